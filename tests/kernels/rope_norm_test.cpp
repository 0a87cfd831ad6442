// RoPE and RMSNorm kernels at every level, bit for bit against the definition in
// simd/rope_norm.hpp written out here in f64 and rounded by neighbour comparison
// (support/bf16_rounding): random normal data, every bf16 bit pattern (NaN, inf, subnormals,
// ±0), f32 factors of every magnitude, a directed case where rounding to f32 first would land on
// a false tie, sizes around the vector width, strided rows with gaps that must stay untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel_list.hpp"
#include "mlakit/dtype.hpp"
#include "support/bf16_rounding.hpp"

namespace mlakit::kernel_tests {
namespace {

using testing::round_to_bf16_bits;

double value(std::uint16_t b) { return static_cast<double>(bf16_to_f32(b)); }
bool is_nan(std::uint16_t b) { return (b & 0x7FFF) > 0x7F80; }

// Kernel result against the definition's bits; any NaN matches any NaN.
void expect_bits(std::uint16_t got, std::uint16_t want, const std::string& where) {
  if (is_nan(want)) EXPECT_TRUE(is_nan(got)) << where << ": got " << got << ", want NaN";
  else EXPECT_EQ(got, want) << where;
}

class RopeNorm : public ::testing::TestWithParam<Isa> {
 protected:
  const simd::RopeNormKernels& table() { return *cpu::rope_norm_kernels_at(GetParam()); }
};

enum class Data { normal, all_bits };

std::vector<std::uint16_t> bf16_data(std::size_t n, Data kind, std::mt19937& rng) {
  std::vector<std::uint16_t> v(n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> bits(0, 0xFFFF);
  for (auto& x : v) x = kind == Data::normal ? f32_to_bf16(normal(rng)) : static_cast<std::uint16_t>(bits(rng));
  return v;
}

// (cos, sin) of random angles, or f32 values of every magnitude (every 7th a random bit pattern).
std::vector<float> factors(std::size_t pairs, Data kind, std::mt19937& rng) {
  std::vector<float> cs(2 * pairs);
  std::uniform_real_distribution<float> angle(-100.0f, 100.0f);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (std::size_t p = 0; p < pairs; ++p) {
    if (kind == Data::normal) {
      const float a = angle(rng);
      cs[2 * p] = std::cos(a);
      cs[2 * p + 1] = std::sin(a);
    } else {
      for (int e = 0; e < 2; ++e) {
        const std::uint32_t u = bits(rng);
        float f;
        std::memcpy(&f, &u, 4);
        cs[2 * p + e] = f;
      }
    }
  }
  return cs;
}

void check_rope(const simd::RopeNormKernels& k, std::size_t rows, std::size_t pairs, std::size_t gap, Data kind,
                std::mt19937& rng) {
  const std::size_t stride = 2 * pairs + gap;
  // One element of offset makes every row unaligned.
  std::vector<std::uint16_t> buf = bf16_data(1 + rows * stride + 3, kind, rng);
  const std::vector<std::uint16_t> before = buf;
  const std::vector<float> cs = factors(pairs, kind, rng);
  k.rope_bf16(buf.data() + 1, stride, rows, cs.data(), pairs);
  const std::string what = std::string(k.level) + " rows " + std::to_string(rows) + " pairs " + std::to_string(pairs);
  for (std::size_t i = 0; i < buf.size(); ++i) {
    const bool in_pair = i >= 1 && i < 1 + rows * stride && (i - 1) % stride < 2 * pairs;
    if (!in_pair) {
      ASSERT_EQ(buf[i], before[i]) << what << ": element " << i << " outside the pairs was written";
      continue;
    }
    const std::size_t e = (i - 1) % stride, p = e / 2;
    const std::size_t first = i - (e % 2);
    const double x0 = value(before[first]), x1 = value(before[first + 1]);
    const double c = cs[2 * p], s = cs[2 * p + 1];
    const double exact = e % 2 == 0 ? x0 * c - x1 * s : x0 * s + x1 * c;  // products exact in f64
    expect_bits(buf[i], round_to_bf16_bits(exact), what + " element " + std::to_string(i));
  }
}

TEST_P(RopeNorm, RopeIsTheF64ArithmeticRoundedOnce) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  std::mt19937 rng(7);
  for (Data kind : {Data::normal, Data::all_bits})
    for (std::size_t rows : {0, 1, 2, 5, 16})
      for (std::size_t pairs : {0, 1, 2, 3, 4, 5, 7, 8, 9, 31, 32, 33})
        for (std::size_t gap : {0, 3}) check_rope(table(), rows, pairs, gap, kind, rng);
}

TEST_P(RopeNorm, RopeAvoidsTheFalseTieOfRoundingToF32First) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  // x0·c − x1·s = 1 + 2^-8 + 2^-30: above the tie between 1 and 1 + 2^-7, so bf16 gives 1 + 2^-7;
  // rounded to f32 first it would be the tie itself, and ties-to-even would give 1.
  const float c = 1.0f + 0x1p-8f, s = -1.0f;
  const std::uint16_t x1 = f32_to_bf16(0x1p-30f);
  for (std::size_t pairs : {1, 5}) {
    std::vector<std::uint16_t> x(2 * pairs);
    std::vector<float> cs(2 * pairs);
    for (std::size_t p = 0; p < pairs; ++p) {
      x[2 * p] = f32_to_bf16(1.0f);
      x[2 * p + 1] = x1;
      cs[2 * p] = c;
      cs[2 * p + 1] = s;
    }
    table().rope_bf16(x.data(), 0, 1, cs.data(), pairs);
    for (std::size_t p = 0; p < pairs; ++p) EXPECT_EQ(x[2 * p], f32_to_bf16(1.0f + 0x1p-7f)) << table().level << " pair " << p;
  }
}

TEST_P(RopeNorm, NanWithAFullPayloadStaysNan) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  // A NaN factor whose payload is all ones carries into the f32 result as 0x7FFFFFFF, which a
  // plain rounding increment would carry over into -0.
  for (std::uint32_t bits : {0x7FFFFFFFu, 0xFFFFFFFFu}) {
    float nan;
    std::memcpy(&nan, &bits, 4);
    for (std::size_t pairs : {1, 4}) {
      std::vector<std::uint16_t> x(2 * pairs, f32_to_bf16(1.0f));
      std::vector<float> cs(2 * pairs, nan);
      table().rope_bf16(x.data(), 0, 1, cs.data(), pairs);
      for (std::size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(is_nan(x[i])) << table().level << " element " << i << ": " << x[i];
    }
  }
}

// The definition: r from the squares summed in index order, then two roundings per element.
std::vector<std::uint16_t> rms_expected(const std::vector<std::uint16_t>& x, const std::vector<std::uint16_t>& gamma,
                                        float eps) {
  double sum = 0;
  for (std::uint16_t b : x) sum += value(b) * value(b);
  const double r = 1.0 / std::sqrt(sum / static_cast<double>(x.size()) + static_cast<double>(eps));
  std::vector<std::uint16_t> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::uint16_t y = round_to_bf16_bits(value(x[i]) * r);
    out[i] = is_nan(y) ? y : round_to_bf16_bits(value(y) * value(gamma[i]));
  }
  return out;
}

TEST_P(RopeNorm, RmsNormIsTheF64ArithmeticRoundedTwice) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> binade(-60, 60);
  for (std::size_t n : {1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 512, 513})
    for (int trial = 0; trial < 6; ++trial) {
      // Normal rows at a random scale, rows of random bit patterns (inf and NaN among them), and a
      // zero row (r = 1/sqrt(eps)).
      std::vector<std::uint16_t> x = bf16_data(n, trial == 4 ? Data::all_bits : Data::normal, rng);
      const float scale = std::ldexp(1.0f, binade(rng));
      for (auto& b : x) b = trial == 5 ? std::uint16_t{0} : trial == 4 ? b : f32_to_bf16(bf16_to_f32(b) * scale);
      const std::vector<std::uint16_t> gamma = bf16_data(n, trial == 3 ? Data::all_bits : Data::normal, rng);
      const float eps = trial == 0 ? 0.0f : 1e-6f;
      const auto want = rms_expected(x, gamma, eps);
      std::vector<std::uint16_t> buf(n + 2, 0xBEEF);  // one element of offset, one past the end
      std::memcpy(buf.data() + 1, x.data(), n * 2);
      table().rms_norm_bf16(buf.data() + 1, n, gamma.data(), eps);
      const std::string what = std::string(table().level) + " n " + std::to_string(n) + " trial " + std::to_string(trial);
      EXPECT_EQ(buf[0], 0xBEEF) << what;
      EXPECT_EQ(buf[n + 1], 0xBEEF) << what;
      for (std::size_t i = 0; i < n; ++i) expect_bits(buf[1 + i], want[i], what + " element " + std::to_string(i));
    }
}

TEST_P(RopeNorm, EmptyCallsWriteNothing) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  std::uint16_t x[2] = {0x1234, 0x5678};
  const float cs[2] = {0.5f, 0.25f};
  const std::uint16_t gamma[2] = {0x3F80, 0x3F80};
  table().rope_bf16(x, 2, 0, cs, 1);
  table().rope_bf16(x, 2, 1, cs, 0);
  table().rms_norm_bf16(x, 0, gamma, 1e-6f);
  EXPECT_EQ(x[0], 0x1234);
  EXPECT_EQ(x[1], 0x5678);
}

INSTANTIATE_TEST_SUITE_P(Levels, RopeNorm, ::testing::ValuesIn(levels_of("rope_norm")), level_param_name);

}  // namespace
}  // namespace mlakit::kernel_tests
