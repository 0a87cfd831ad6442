// FP8 group quantization kernels at every level against the scalar definitions: the encoder
// over every bf16 bit pattern times factors from 0 to 2^40 (inf and NaN included) against
// mlakit::f32_to_f8e4m3 of the f32 product, bit for bit, and the dividing encoder likewise; the group maximum on rows with NaN,
// ±inf and -0; sizes around the vector width, unaligned, nothing written past n.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/kernel_list.hpp"
#include "mlakit/dtype.hpp"

namespace mlakit::kernel_tests {
namespace {

class Fp8Quant : public ::testing::TestWithParam<Isa> {
 protected:
  const simd::Fp8QuantKernels& table() { return *cpu::fp8_quant_kernels_at(GetParam()); }
};

TEST_P(Fp8Quant, EncodesEveryBf16PatternAsTheScalarConversion) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  std::vector<std::uint16_t> x(1 + 65536);
  for (std::uint32_t b = 0; b < 65536; ++b) x[1 + b] = static_cast<std::uint16_t>(b);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float inv : {1.0f, 0.0f, 0.5f, 448.0f / 3.7f, 0x1p-20f, 0x1p40f, 3.0f, inf, nan}) {
    std::vector<std::uint8_t> codes(1 + 65536 + 1, 0xA5);
    table().encode_bf16(x.data() + 1, 65536, inv, codes.data() + 1);
    std::set<int> seen;
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const std::uint8_t want = f32_to_f8e4m3(bf16_to_f32(static_cast<std::uint16_t>(b)) * inv);
      ASSERT_EQ(codes[1 + b], want) << table().level << " bf16 " << b << " inv " << inv;
      seen.insert(codes[1 + b]);
    }
    EXPECT_EQ(codes[0], 0xA5);
    EXPECT_EQ(codes[65537], 0xA5);
    if (inv == 1.0f) {
      EXPECT_EQ(seen.size(), 255u) << "every code but 0xFF (NaN encodes as 0x7F)";
    }
  }
}

// The deepseek quantizer divides: every bf16 pattern over scales from subnormal to inf (a
// power of two and the general amax·f32(1/448) kind), against the scalar f32 division.
TEST_P(Fp8Quant, DividingEncoderMatchesTheScalarDivisionOnEveryBf16Pattern) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  std::vector<std::uint16_t> x(1 + 65536);
  for (std::uint32_t b = 0; b < 65536; ++b) x[1 + b] = static_cast<std::uint16_t>(b);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float sa : {1.0f, 3.7f * (1.0f / 448.0f), 1e-4f * (1.0f / 448.0f), 0x1p-20f, 0x1p-140f, 0x1p100f, 0.0f, inf, nan,
                   -2.5f}) {
    std::vector<std::uint8_t> codes(1 + 65536 + 1, 0xA5);
    table().encode_div_bf16(x.data() + 1, 65536, sa, codes.data() + 1);
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const std::uint8_t want = f32_to_f8e4m3(bf16_to_f32(static_cast<std::uint16_t>(b)) / sa);
      ASSERT_EQ(codes[1 + b], want) << table().level << " bf16 " << b << " sa " << sa;
    }
    EXPECT_EQ(codes[0], 0xA5);
    EXPECT_EQ(codes[65537], 0xA5);
  }
  for (std::size_t n = 0; n <= 40; ++n) {  // short rows: nothing written past them
    std::vector<std::uint8_t> codes(n + 3, 0x5A);
    table().encode_div_bf16(x.data() + 1 + 1000 * n, n, 0.37f, codes.data() + 1);
    EXPECT_EQ(codes[0], 0x5A) << n;
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(codes[1 + i], f32_to_f8e4m3(bf16_to_f32(x[1 + 1000 * n + i]) / 0.37f)) << table().level << " n " << n;
    EXPECT_EQ(codes[n + 1], 0x5A) << n;
  }
}

TEST_P(Fp8Quant, EncodesShortRowsWithoutWritingPastThem) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  for (std::size_t n = 0; n <= 40; ++n) {
    std::vector<std::uint16_t> x(n + 1);
    for (auto& v : x) v = f32_to_bf16(normal(rng));
    std::vector<std::uint8_t> codes(n + 3, 0x5A);
    table().encode_bf16(x.data() + 1, n, 1.25f, codes.data() + 1);
    EXPECT_EQ(codes[0], 0x5A) << n;
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(codes[1 + i], f32_to_f8e4m3(bf16_to_f32(x[1 + i]) * 1.25f)) << table().level << " n " << n << " i " << i;
    EXPECT_EQ(codes[n + 1], 0x5A) << n;
    EXPECT_EQ(codes[n + 2], 0x5A) << n;
  }
}

float amax_definition(const std::vector<std::uint16_t>& x, std::size_t off, std::size_t n) {
  float m = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = bf16_to_f32(x[off + i]);
    const float a = v < 0.0f ? -v : v;
    if (a > m) m = a;
  }
  return m;
}

TEST_P(Fp8Quant, GroupMaximumSkipsNanAndCountsInfinity) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::uint16_t kNan = 0x7FC1, kNegNan = 0xFFC0, kInf = 0x7F80, kNegInf = 0xFF80, kNegZero = 0x8000;
  for (std::size_t n : {0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 127, 128, 129}) {
    for (int variant = 0; variant < 6; ++variant) {
      std::vector<std::uint16_t> x(n + 1);
      for (auto& v : x) v = f32_to_bf16(normal(rng) * 4.0f);
      if (n > 0) {
        const std::size_t at = 1 + (n * 7 + static_cast<std::size_t>(variant)) % n;
        if (variant == 1) x[at] = kNan;  // larger than any number as bits: must not win
        if (variant == 2) x[at] = kNegInf;
        if (variant == 3) {
          x[at] = kInf;
          x[1 + (at % n)] = kNegNan;
        }
        if (variant == 4)
          for (std::size_t i = 1; i <= n; ++i) x[i] = i % 2 ? kNan : kNegNan;  // nothing but NaN: 0
        if (variant == 5)
          for (std::size_t i = 1; i <= n; ++i) x[i] = kNegZero;
      }
      const float got = table().amax_bf16(x.data() + 1, n), want = amax_definition(x, 1, n);
      EXPECT_EQ(got, want) << table().level << " n " << n << " variant " << variant;
      EXPECT_FALSE(std::signbit(got)) << table().level << " n " << n << " variant " << variant;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, Fp8Quant, ::testing::ValuesIn(levels_of("fp8_quant")), level_param_name);

}  // namespace
}  // namespace mlakit::kernel_tests
