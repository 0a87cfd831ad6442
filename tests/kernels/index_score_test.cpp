// Lightning-indexer score tiles at every level: against the exact score (f64 over exactly decoded
// operands) within the derived bound, and exactly on data whose every partial sum is exact in f32;
// head counts around the lane width and the register tile, key counts around the key tile, any
// head_dim; unaligned rows and padded strides; nothing written past n; each key's score
// independent of how the keys are split into calls; the IEEE-maximum ReLU (NaN kept, negatives
// and -0 to +0) before a possibly negative weight; NaN codes; padded head lanes kept out of the sum.
// The amx level's kernel also runs every check over emulated tiles (amx_emulated), wherever the
// avx512bf16 level runs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/amx_emulation/emulated_tables.hpp"
#include "kernels/kernel_list.hpp"
#include "mlakit/dtype.hpp"

namespace mlakit::kernel_tests {
namespace {

struct Query {
  std::size_t H, D;
  std::vector<std::uint8_t> q;  // [H][D] codes
  std::vector<float> w;         // [H]
};

struct Keys {
  std::size_t n, D, ldk, offset;
  std::vector<float> k;   // rows at offset + j*ldk
  std::vector<float> ks;  // [n]
  const float* row(std::size_t j) const { return k.data() + offset + j * ldk; }
};

std::uint8_t random_code(Rng& rng) {
  std::uint8_t c;
  do c = static_cast<std::uint8_t>(rng.below(256));
  while ((c & 0x7F) == 0x7F);  // NaN codes are tested on their own
  return c;
}

Query random_query(std::size_t H, std::size_t D, Rng& rng) {
  Query q{H, D, std::vector<std::uint8_t>(H * D), std::vector<float>(H)};
  for (auto& c : q.q) c = random_code(rng);
  for (auto& w : q.w) w = rng.uniform(-1.0f, 1.0f);
  return q;
}

Keys random_keys(std::size_t n, std::size_t D, Rng& rng, std::size_t pad = 0, std::size_t offset = 0) {
  Keys k{n, D, D + pad, offset, {}, std::vector<float>(n)};
  k.k.assign(offset + n * k.ldk + 1, std::numeric_limits<float>::quiet_NaN());  // padding is NaN: never read
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t d = 0; d < D; ++d) k.k[offset + j * k.ldk + d] = f8e4m3_to_f32(random_code(rng));
  for (auto& s : k.ks) s = rng.uniform(0.01f, 0.1f);
  return k;
}

// The exact score and its magnitude |ks|·Σ_h |w|·Σ_d |q·k|.
void exact_score(const Query& q, const Keys& k, std::size_t j, double* score, double* mag) {
  double sum = 0, abs_sum = 0;
  for (std::size_t h = 0; h < q.H; ++h) {
    double dot = 0, dot_abs = 0;
    for (std::size_t d = 0; d < q.D; ++d) {
      const double p = double(f8e4m3_to_f32(q.q[h * q.D + d])) * double(k.row(j)[d]);
      dot += p;
      dot_abs += std::fabs(p);
    }
    const double relu = std::isnan(dot) ? dot : (dot > 0 ? dot : 0.0);
    sum += relu * q.w[h];
    abs_sum += dot_abs * std::fabs(q.w[h]);
  }
  *score = double(k.ks[j]) * sum;
  *mag = std::fabs(double(k.ks[j])) * abs_sum;
}

class IndexScore : public ::testing::TestWithParam<Subject<simd::IndexScoreKernels>> {
 protected:
  const simd::IndexScoreKernels& table() { return *GetParam().table; }

  std::vector<float> pack(const Query& q) {
    std::vector<float> p(table().packed_floats(q.H, q.D) + 1);
    table().pack_query(q.q.data(), q.w.data(), q.H, q.D, p.data() + 1);  // unaligned on purpose
    return p;
  }

  // Scores of all n keys, with a guard after the last one.
  std::vector<float> scores(const std::vector<float>& packed, const Query& q, const Keys& k) {
    constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
    std::vector<float> out(k.n + 3, float_of(kGuard));
    table().score(packed.data() + 1, q.H, q.D, k.row(0), k.ldk, k.ks.data(), k.n, out.data() + 1);
    EXPECT_EQ(bits_of(out[0]), kGuard) << "wrote before out";
    EXPECT_EQ(bits_of(out[k.n + 1]), kGuard) << "wrote past n";
    return std::vector<float>(out.begin() + 1, out.begin() + 1 + static_cast<std::ptrdiff_t>(k.n));
  }
};

TEST_P(IndexScore, WithinBoundOfExactScores) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  const std::size_t heads[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64, 65, 96};
  const std::size_t dims[] = {1, 2, 3, 7, 16, 33, 128, 257, 300};  // past 256: rows in several slabs
  std::size_t seed = 1;
  for (std::size_t H : heads) {
    for (std::size_t D : dims) {
      Rng rng(seed++);
      const Query q = random_query(H, D, rng);
      const std::size_t n = 1 + rng.below(29);
      const Keys k = random_keys(n, D, rng, seed % 3, 1 + seed % 2);
      const auto packed = pack(q);
      const auto got = scores(packed, q, k);
      for (std::size_t j = 0; j < n; ++j) {
        double want, mag;
        exact_score(q, k, j, &want, &mag);
        // D multiply-adds per head, H/lanes head steps per lane, log2(lanes) reduction steps, the
        // weight and the key scale: (D + H + 8) rounding errors at most, times 2 to spare.
        const double bound = 2.0 * double(D + H + 8) * 0x1p-24 * mag;
        ASSERT_LE(std::fabs(double(got[j]) - want), bound)
            << "H=" << H << " D=" << D << " n=" << n << " key " << j << " got " << got[j] << " want " << want;
      }
    }
  }
}

// Small integers: every product, dot, weighted sum and scaled score is exact in f32, so every level
// must give the exact value.
TEST_P(IndexScore, ExactOnExactData) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  for (std::size_t H : {1, 7, 8, 16, 23, 64}) {
    Rng rng(H);
    const std::size_t D = 128, n = 37;
    Query q{H, D, std::vector<std::uint8_t>(H * D), std::vector<float>(H)};
    for (auto& c : q.q) c = f32_to_f8e4m3(static_cast<float>(static_cast<int>(rng.below(5)) - 2));
    for (auto& w : q.w) w = static_cast<float>(static_cast<int>(rng.below(9)) - 4) * 0.5f;
    Keys k = random_keys(n, D, rng);
    for (auto& x : k.k)
      if (!std::isnan(x)) x = static_cast<float>(static_cast<int>(rng.below(5)) - 2);
    for (auto& s : k.ks) s = rng.below(2) ? 0.25f : 0.125f;
    const auto got = scores(pack(q), q, k);
    for (std::size_t j = 0; j < n; ++j) {
      double want, mag;
      exact_score(q, k, j, &want, &mag);
      ASSERT_EQ(double(got[j]), want) << "H=" << H << " key " << j;
    }
  }
}

// A key's score does not depend on which call, or where in a call's register tiles, it is
// computed: any split of the keys gives the same bits (the operator's determinism rests on it).
TEST_P(IndexScore, ScoresDoNotDependOnHowKeysAreSplit) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  Rng rng(7);
  for (std::size_t H : {5, 64}) {
    const std::size_t D = 128, n = 61;
    const Query q = random_query(H, D, rng);
    const Keys k = random_keys(n, D, rng);
    const auto packed = pack(q);
    const auto whole = scores(packed, q, k);
    for (std::size_t piece : {1, 2, 3, 5, 7, 11}) {
      std::vector<float> parts(n);
      for (std::size_t j = 0; j < n; j += piece) {
        const std::size_t m = std::min(piece, n - j);
        table().score(packed.data() + 1, H, D, k.row(j), k.ldk, k.ks.data() + j, m, parts.data() + j);
      }
      for (std::size_t j = 0; j < n; ++j)
        ASSERT_EQ(bits_of(parts[j]), bits_of(whole[j])) << "H=" << H << " pieces of " << piece << ", key " << j;
    }
  }
}

// score_f8 on fp8 rows anywhere in memory (every code, NaN codes included) gives the bits of
// score on the same rows decoded, for any split of the keys.
TEST_P(IndexScore, Fp8RowsGiveTheBitsOfDecodedRows) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  Rng rng(13);
  for (std::size_t H : {3, 16, 64}) {
    for (std::size_t D : {5, 128, 301}) {
      const std::size_t n = 47;
      const Query q = random_query(H, D, rng);
      // Rows scattered through a pool in a shuffled order, every code present somewhere.
      std::vector<std::uint8_t> pool((n + 5) * (D + 3));
      for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<std::uint8_t>(i * 37 + rng.below(7));
      for (std::size_t i = 0; i < pool.size(); i += 97) pool[i] = rng.below(2) ? 0x7F : 0xFF;  // a few NaN keys
      std::vector<const std::uint8_t*> rows(n);
      Keys k{n, D, D, 0, std::vector<float>(n * D), std::vector<float>(n)};
      for (std::size_t j = 0; j < n; ++j) {
        rows[j] = pool.data() + ((j * 7) % (n + 5)) * (D + 3) + j % 3;
        for (std::size_t d = 0; d < D; ++d) k.k[j * D + d] = f8e4m3_to_f32(rows[j][d]);
        k.ks[j] = rng.uniform(-0.1f, 0.1f);
      }
      const auto packed = pack(q);
      const auto want = scores(packed, q, k);
      for (std::size_t piece : {n, std::size_t{1}, std::size_t{4}, std::size_t{7}}) {
        std::vector<float> got(n);
        for (std::size_t j = 0; j < n; j += piece) {
          const std::size_t m = std::min(piece, n - j);
          table().score_f8(packed.data() + 1, H, D, rows.data() + j, k.ks.data() + j, m, got.data() + j);
        }
        for (std::size_t j = 0; j < n; ++j)
          ASSERT_EQ(bits_of(got[j]), bits_of(want[j])) << "H=" << H << " D=" << D << " pieces of " << piece << " key " << j;
      }
    }
  }
}

TEST_P(IndexScore, ZeroKeysWritesNothing) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  Rng rng(3);
  const Query q = random_query(8, 16, rng);
  const auto packed = pack(q);
  float out = 1.5f, k = 0, ks = 1;
  table().score(packed.data() + 1, 8, 16, &k, 16, &ks, 0, &out);
  EXPECT_EQ(out, 1.5f);
  const std::uint8_t code = 0x38;
  const std::uint8_t* row = &code;
  table().score_f8(packed.data() + 1, 8, 16, &row, &ks, 0, &out);
  EXPECT_EQ(out, 1.5f);
}

// ReLU before the weight: a head with a negative dot adds nothing even when its weight is
// negative; the weight then scales the positive dots (negative results are kept); the head sum is
// a sum, not a max.
TEST_P(IndexScore, ReluBeforeWeightAndHeadSum) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  const std::size_t H = 3, D = 2;
  // dots against key (1, 1): head 0: 1+2 = 3, head 1: -2-1 = -3, head 2: 0.5+0.5 = 1.
  Query q{H, D, {f32_to_f8e4m3(1), f32_to_f8e4m3(2), f32_to_f8e4m3(-2), f32_to_f8e4m3(-1), f32_to_f8e4m3(0.5f), f32_to_f8e4m3(0.5f)},
          {2.0f, -4.0f, -1.0f}};
  Keys k{2, D, D, 0, {1, 1, -1, -1}, {0.5f, 2.0f}};
  const auto got = scores(pack(q), q, k);
  EXPECT_EQ(got[0], 0.5f * (3 * 2.0f + 0 + 1 * -1.0f));  // 2.5
  EXPECT_EQ(got[1], 2.0f * (0 + 3 * -4.0f + 0));          // -24: only head 1's dot (+3) is positive
}

// NaN: a NaN code in q's head h, or a NaN in a key row, makes the dot NaN, maximum(NaN, 0) keeps it
// and the score is NaN; -0 dots become +0 and add nothing.
TEST_P(IndexScore, NanPropagatesAndNegativeZeroIsZero) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  Rng rng(11);
  const std::size_t H = 19, D = 40, n = 14;
  Query q = random_query(H, D, rng);
  Keys k = random_keys(n, D, rng);
  k.k[k.offset + 5 * k.ldk + 17] = std::numeric_limits<float>::quiet_NaN();
  k.k[k.offset + 9 * k.ldk + 0] = -std::numeric_limits<float>::quiet_NaN();
  auto got = scores(pack(q), q, k);
  for (std::size_t j = 0; j < n; ++j) EXPECT_EQ(std::isnan(got[j]), j == 5 || j == 9) << "key " << j;
  q.q[7 * D + 3] = 0xFF;  // NaN code in head 7: every score NaN
  got = scores(pack(q), q, k);
  for (std::size_t j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(got[j])) << "key " << j;
  // Dots of -0 only (q = -0 everywhere): every head adds +0; with a negative weight the score is 0.
  Query z{4, 8, std::vector<std::uint8_t>(32, 0x80), {-1.0f, -2.0f, 1.0f, 3.0f}};
  Keys kz = random_keys(3, 8, rng);
  got = scores(pack(z), z, kz);
  for (float s : got) EXPECT_EQ(s, 0.0f);
}

// Padded head lanes (H not a multiple of the vector width) must not enter the sum: with an
// infinite key element and every real head's q positive there, each real dot is +inf and the
// score +inf, while a padded lane would give 0 * inf = NaN.
TEST_P(IndexScore, PaddedHeadLanesAreMaskedOut) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  for (std::size_t H : {1, 3, 5, 9, 17, 33}) {
    const std::size_t D = 4;
    Query q{H, D, std::vector<std::uint8_t>(H * D, f32_to_f8e4m3(1.0f)), std::vector<float>(H, 0.25f)};
    Keys k{2, D, D, 0, {std::numeric_limits<float>::infinity(), 1, 1, 1, 1, 2, 3, 4}, {1.0f, 1.0f}};
    const auto got = scores(pack(q), q, k);
    EXPECT_EQ(got[0], std::numeric_limits<float>::infinity()) << "H=" << H;
    EXPECT_EQ(got[1], 0.25f * 10.0f * static_cast<float>(H)) << "H=" << H;
  }
}

// Every fp8 code of q is decoded exactly by pack_query: a one-dim query against the key 1.0
// scores relu(code) (NaN for the NaN codes), at every head position of a 40-head query.
TEST_P(IndexScore, PackDecodesEveryCode) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  const std::size_t H = 40, D = 1;
  for (std::size_t code = 0; code < 256; ++code) {
    const std::size_t h = code % H;
    Query q{H, D, std::vector<std::uint8_t>(H, 0x00), std::vector<float>(H, 0.0f)};
    q.q[h] = static_cast<std::uint8_t>(code);
    q.w[h] = 1.0f;
    Keys k{1, D, D, 0, {1.0f}, {1.0f}};
    const float got = scores(pack(q), q, k)[0];
    const float v = f8e4m3_to_f32(static_cast<std::uint8_t>(code));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << code;
    } else {
      EXPECT_EQ(got, v > 0 ? v : 0.0f) << "code " << code;
    }
  }
}

// Against simd/generic on one DeepSeek-shaped query: both within the bound of the exact scores,
// hence within twice the bound of each other.
TEST_P(IndexScore, AgreesWithGeneric) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  Rng rng(5);
  const std::size_t H = 64, D = 128, n = 100;
  const Query q = random_query(H, D, rng);
  const Keys k = random_keys(n, D, rng);
  const auto got = scores(pack(q), q, k);
  const simd::IndexScoreKernels& g = simd::index_score_generic;
  std::vector<float> gp(g.packed_floats(H, D)), want(n);
  g.pack_query(q.q.data(), q.w.data(), H, D, gp.data());
  g.score(gp.data(), H, D, k.row(0), k.ldk, k.ks.data(), n, want.data());
  for (std::size_t j = 0; j < n; ++j) {
    double exact, mag;
    exact_score(q, k, j, &exact, &mag);
    ASSERT_LE(std::fabs(double(got[j]) - double(want[j])), 4.0 * double(D + H + 8) * 0x1p-24 * mag) << "key " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, IndexScore,
                         ::testing::ValuesIn(subjects_with_emulated_amx("index_score", &cpu::index_score_kernels_at,
                                                                        simd::index_score_amx_emulated)),
                         subject_name<simd::IndexScoreKernels>);

}  // namespace
}  // namespace mlakit::kernel_tests
