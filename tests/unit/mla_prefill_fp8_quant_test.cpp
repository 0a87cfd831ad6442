// The step-4 quantizer shared by every back-end (src/core/shared/mla_prefill_fp8_quant.hpp), checked
// against the spec's definition written out with f64 arithmetic and a nearest-code search.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "goldens/common/random.hpp"
#include "oracle/mla_prefill_fp8.hpp"
#include "core/shared/mla_prefill_fp8_quant.hpp"

namespace mlakit {
namespace {

namespace quant = mla_prefill_fp8_quant;

TEST(MlaPrefillFp8Quant, AmaxIgnoresNanAndCountsInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float a[] = {nan, -3.0f, 2.0f, nan};
  EXPECT_EQ(quant::group_amax(a, 4), 3.0f);
  const float b[] = {1.0f, -inf};
  EXPECT_EQ(quant::group_amax(b, 2), inf);
  const float c[] = {-0.0f, 0.0f};
  EXPECT_EQ(quant::group_amax(c, 2), 0.0f);
}

TEST(MlaPrefillFp8Quant, ScaleCapsAt1200) {
  EXPECT_EQ(quant::group_scale(448.0f), 1.0f);
  EXPECT_EQ(quant::group_scale(1.75f), 0x1p-8f);
  EXPECT_EQ(quant::group_scale(1200.0f), 1200.0f / 448.0f);
  EXPECT_EQ(quant::group_scale(5000.0f), 1200.0f / 448.0f);
  EXPECT_EQ(quant::group_scale(std::numeric_limits<float>::infinity()), 1200.0f / 448.0f);
}

TEST(MlaPrefillFp8Quant, InverseIsZeroForZeroOrOverflowingScales) {
  EXPECT_EQ(quant::group_inverse(0.0f), 0.0f);
  EXPECT_EQ(quant::group_inverse(0x1p-8f), 256.0f);
  const float tiny = quant::group_scale(1e-40f);  // subnormal amax: 1/sa overflows f32
  EXPECT_GT(tiny, 0.0f);
  EXPECT_EQ(quant::group_inverse(tiny), 0.0f);
  const float zeros[4] = {0, 0, 0, 0};
  std::uint8_t codes[4] = {1, 1, 1, 1};
  EXPECT_EQ(quant::quantize_group(zeros, 4, codes), 0.0f);
  for (std::uint8_t c : codes) EXPECT_EQ(c, 0);
  const float denormal[2] = {1e-40f, -1e-40f};
  quant::quantize_group(denormal, 2, codes);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0x80);  // -0
}

TEST(MlaPrefillFp8Quant, ClampsPastTheCapAndMapsNanTo7F) {
  const float x[] = {3000.0f, -1500.0f, 600.0f, std::numeric_limits<float>::quiet_NaN()};
  std::uint8_t codes[4];
  const float sa = quant::quantize_group(x, 4, codes);
  EXPECT_EQ(sa, 1200.0f / 448.0f);
  EXPECT_EQ(codes[0], 0x7E);  // +448
  EXPECT_EQ(codes[1], 0xFE);  // -448
  EXPECT_EQ(codes[2], f32_to_f8e4m3(600.0f * (1.0f / sa)));
  EXPECT_EQ(codes[3], 0x7F);
}

TEST(MlaPrefillFp8Quant, RoundsTiesToEven) {
  // sa = 1 (amax 448): the value itself is rounded.
  const float x[] = {448.0f, 1.0625f, 1.1875f, -0.01171875f /* -6·2^-9 */};
  std::uint8_t codes[4];
  quant::quantize_group(x, 4, codes);
  EXPECT_EQ(codes[0], 0x7E);
  EXPECT_EQ(codes[1], 0x38);  // 1.0625 is halfway 1.0 (even) / 1.125
  EXPECT_EQ(codes[2], 0x3A);  // 1.1875 is halfway 1.125 / 1.25 (even)
  EXPECT_EQ(codes[3], 0x86);  // exactly -6·2^-9, a subnormal code
}

TEST(MlaPrefillFp8Quant, TheGroupMaximumMapsTo448) {
  goldens::Rng rng(3);
  for (int i = 0; i < 20000; ++i) {
    const float amax = static_cast<float>(std::ldexp(rng.uniform(1.0, 2.0), static_cast<int>(rng.integer(-30, 10))));
    const float x[2] = {amax, -amax * 0.5f};
    std::uint8_t codes[2];
    quant::quantize_group(x, 2, codes);
    EXPECT_EQ(codes[0], 0x7E) << amax;
  }
}

// The definition written out independently: f32 operations as f64 operations rounded to f32
// (exact for one operation on f32 operands), the code by nearest search, ties to the even code.
TEST(MlaPrefillFp8Quant, AgreesWithAnIndependentDerivation) {
  goldens::Rng rng(9);
  int checked = 0;
  for (int g = 0; g < 3000; ++g) {
    const int n = static_cast<int>(rng.integer(1, 64));
    const double spread = std::ldexp(1.0, static_cast<int>(rng.integer(-20, 12)));
    std::vector<float> x(static_cast<std::size_t>(n));
    for (auto& e : x) e = bf16_to_f32(f32_to_bf16(static_cast<float>(rng.normal() * spread)));
    std::vector<std::uint8_t> codes(x.size());
    const float sa = quant::quantize_group(x.data(), n, codes.data());
    double amax = 0;
    for (float e : x) amax = std::fmax(amax, std::fabs(static_cast<double>(e)));
    const float want_sa = static_cast<float>(std::fmin(amax, 1200.0) / 448.0);
    ASSERT_EQ(sa, want_sa);
    const float r = static_cast<float>(1.0 / static_cast<double>(want_sa));
    const float inv = (want_sa == 0 || std::isinf(r)) ? 0.0f : r;
    for (int i = 0; i < n; ++i) {
      float y = static_cast<float>(static_cast<double>(x[i]) * static_cast<double>(inv));
      y = std::fmin(std::fmax(y, -448.0f), 448.0f);
      const int want = oracle::nearest_fp8_code(y);
      // -0 and +0 are the same value; compare values for zero, codes otherwise.
      if (oracle::fp8_code_value(want) == 0) {
        EXPECT_EQ(f8e4m3_to_f32(codes[i]), 0.0f);
      } else {
        EXPECT_EQ(codes[i], want) << "x=" << x[i] << " inv=" << inv;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 50000);
}

// ---- the deepseek profiles (DeepSeek's act_quant) -------------------------------------------------
TEST(MlaPrefillFp8QuantDeepseek, ScaleIsTheFlooredAmaxTimesTheF32Reciprocal) {
  const float r = static_cast<float>(1.0 / 448.0);
  for (float amax : {0.0f, 1e-5f, 1e-4f, 0.3f, 448.0f, 1199.0f, 5000.0f, 3.0e38f}) {
    const float want = (amax > 1e-4f ? amax : 1e-4f) * r;
    EXPECT_EQ(quant::deepseek_scale(amax, false), want) << amax;  // no cap at 1200
  }
  EXPECT_EQ(quant::deepseek_scale(std::numeric_limits<float>::infinity(), false), std::numeric_limits<float>::infinity());
}

TEST(MlaPrefillFp8QuantDeepseek, Ue8m0RoundsTheScaleUpToAPowerOfTwo) {
  goldens::Rng rng(7);
  for (int i = 0; i < 20000; ++i) {
    const float amax = static_cast<float>(std::ldexp(rng.uniform(1, 2), static_cast<int>(rng.integer(-20, 100))));
    const float s = quant::deepseek_scale(amax, false), p = quant::deepseek_scale(amax, true);
    // DeepSeek's kernel: 2^ceil(log2(s)), in f64 here.
    EXPECT_EQ(static_cast<double>(p), std::exp2(std::ceil(std::log2(static_cast<double>(s))))) << amax;
  }
  EXPECT_EQ(quant::deepseek_scale(448.0f * 4.0f, true), 4.0f);  // an exact power of two stays
  EXPECT_EQ(quant::deepseek_scale(0.0f, true), std::exp2(std::ceil(std::log2(static_cast<double>(1e-4f * static_cast<float>(1.0 / 448.0))))));
  EXPECT_EQ(quant::deepseek_scale(std::numeric_limits<float>::infinity(), true), std::numeric_limits<float>::infinity());
}

TEST(MlaPrefillFp8QuantDeepseek, CodesComeFromADivision) {
  // x / sa and x · (1/sa) differ for some x when sa is not a power of two; the profile divides.
  const float x[4] = {1.0f, 3.0f, 7.0f, 11.0f};
  std::uint8_t codes[4];
  const float sa = quant::quantize_group_deepseek(x, 4, false, codes);
  EXPECT_EQ(sa, 11.0f * static_cast<float>(1.0 / 448.0));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(codes[i], f32_to_f8e4m3(x[i] / sa)) << i;
  goldens::Rng rng(9);
  int differs = 0;
  for (int i = 0; i < 100000; ++i) {  // values whose quotient sits at a tie between two FP8 codes
    const float s = static_cast<float>(rng.uniform(0.01, 3));
    const float v = static_cast<float>((1.0625 + static_cast<double>(rng.integer(0, 6)) * 0.125) * s);
    differs += quant::quantize_value_div(v, s) != quant::quantize_value(v, 1.0f / s);
  }
  EXPECT_GT(differs, 0) << "the division is never told from the multiply";
  // ue8m0: the power-of-two scale makes both the same, inf and NaN included.
  const float y[3] = {std::numeric_limits<float>::infinity(), -2.5f, std::numeric_limits<float>::quiet_NaN()};
  std::uint8_t c2[3];
  const float p = quant::quantize_group_deepseek(y, 3, true, c2);
  EXPECT_EQ(p, std::numeric_limits<float>::infinity());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c2[i], quant::quantize_value_div(y[i], p)) << i;
}

}  // namespace
}  // namespace mlakit
