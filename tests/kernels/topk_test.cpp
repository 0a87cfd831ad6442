// Top-k selection at every level against the spec's order written out directly (a stable sort of
// all indices by a comparator): random data, ties, NaNs, ±0, ±inf, k above, at and below n, k = 1,
// n = 0, both NaN policies, and sizes around every vector width and radix digit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/kernel_list.hpp"

namespace mlakit::kernel_tests {
namespace {

using simd::TopkNan;

// The spec order, written independently of the kernel: a before b?
bool better(float a, float b) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na || nb) return !na && nb;  // numbers before NaN; NaN vs NaN: equal
  return a > b;                    // +0 == -0 compare equal here
}

std::vector<std::int32_t> expected(const std::vector<float>& s, std::size_t k, TopkNan nan) {
  std::vector<std::int32_t> idx;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!(nan == TopkNan::exclude && std::isnan(s[i]))) idx.push_back(static_cast<std::int32_t>(i));
  std::stable_sort(idx.begin(), idx.end(), [&](std::int32_t a, std::int32_t b) { return better(s[a], s[b]); });
  if (idx.size() > k) idx.resize(k);
  return idx;
}

class Topk : public ::testing::TestWithParam<Isa> {
 protected:
  const simd::TopkKernels& table() { return *cpu::topk_kernels_at(GetParam()); }

  void check(const std::vector<float>& s, std::size_t k, TopkNan nan, const std::string& what) {
    const auto want = expected(s, k, nan);
    std::vector<unsigned char> scratch(simd::topk_scratch_bytes(s.size(), k) + 3);
    constexpr std::int32_t kSentinel = -7;
    std::vector<std::int32_t> out(k + 4, kSentinel);
    // Unaligned scores and scratch.
    std::vector<float> shifted(s.size() + 1);
    std::copy(s.begin(), s.end(), shifted.begin() + 1);
    const std::size_t got = table().select(shifted.data() + 1, s.size(), k, nan, out.data(), scratch.data() + 3);
    ASSERT_EQ(got, want.size()) << what << " n=" << s.size() << " k=" << k;
    for (std::size_t i = 0; i < got; ++i)
      ASSERT_EQ(out[i], want[i]) << what << " n=" << s.size() << " k=" << k << " rank " << i;
    for (std::size_t i = got; i < out.size(); ++i) ASSERT_EQ(out[i], kSentinel) << what << ": wrote past m";
  }
};

std::vector<std::size_t> sizes() {
  return {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 100, 255, 256, 257, 1000, 2049, 4097};
}

std::vector<std::size_t> ks(std::size_t n) {
  std::vector<std::size_t> v = {1, 2, 3, 7, 47, 48, 64, 2048};
  if (n > 1) v.push_back(n - 1);
  v.push_back(n);
  v.push_back(n + 1);
  v.push_back(2 * n + 5);
  v.erase(std::remove(v.begin(), v.end(), std::size_t{0}), v.end());
  return v;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

using Gen = std::vector<float> (*)(std::size_t n, Rng& rng);

std::vector<float> gen_random(std::size_t n, Rng& rng) {
  std::vector<float> s(n);
  for (auto& x : s) x = rng.uniform(-1.0f, 1.0f);
  return s;
}
std::vector<float> gen_ties(std::size_t n, Rng& rng) {  // small integers: many equal scores
  std::vector<float> s(n);
  for (auto& x : s) x = static_cast<float>(static_cast<int>(rng.below(7)) - 3);
  return s;
}
std::vector<float> gen_specials(std::size_t n, Rng& rng) {  // NaN of both signs, ±0, ±inf, tiny
  const float pool[] = {kNaN, -kNaN, 0.0f, -0.0f, kInf, -kInf, 1.0f, -1.0f, 0x1p-149f, -0x1p-149f,
                        std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 2.5f};
  std::vector<float> s(n);
  for (auto& x : s) x = pool[rng.below(sizeof pool / sizeof pool[0])];
  return s;
}
std::vector<float> gen_all_equal(std::size_t n, Rng&) { return std::vector<float>(n, 0.5f); }
std::vector<float> gen_all_nan(std::size_t n, Rng&) { return std::vector<float>(n, kNaN); }
std::vector<float> gen_zeros(std::size_t n, Rng& rng) {  // +0 and -0 only: all equal
  std::vector<float> s(n);
  for (auto& x : s) x = rng.below(2) ? 0.0f : -0.0f;
  return s;
}
std::vector<float> gen_ascending(std::size_t n, Rng&) {
  std::vector<float> s(n);
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<float>(i) * 0.25f - 3.0f;
  return s;
}
std::vector<float> gen_mostly_nan(std::size_t n, Rng& rng) {  // a few numbers among NaNs
  std::vector<float> s(n, kNaN);
  for (auto& x : s)
    if (rng.below(8) == 0) x = rng.uniform(-1.0f, 1.0f);
  return s;
}
// Values that share the high radix digits: only the low bits differ (exercises digits 2 and 3).
std::vector<float> gen_close(std::size_t n, Rng& rng) {
  std::vector<float> s(n);
  for (auto& x : s) x = float_of(0x3F800000u + rng.below(3000));
  return s;
}

// Scores that bunch near the k-th best with a thin tail above (an indexer's row).
std::vector<float> gen_normal(std::size_t n, Rng& rng) {
  std::vector<float> s(n);
  for (auto& x : s) {
    const float u1 = rng.uniform(0.0f, 1.0f), u2 = rng.uniform(0.0f, 1.0f);
    x = std::sqrt(-2.0f * std::log1p(-u1)) * std::cos(6.2831853f * u2);
  }
  return s;
}
// Both signs over ~200 binades: the keys' span is the whole 32 bits (three sort digits).
std::vector<float> gen_wide(std::size_t n, Rng& rng) {
  std::vector<float> s(n);
  for (auto& x : s) {
    const int exponent = static_cast<int>(rng.below(200)) - 100;
    x = (rng.below(2) ? 1.0f : -1.0f) * std::ldexp(1.0f + rng.uniform(0.0f, 1.0f), exponent);
  }
  return s;
}
// Nearly every key in a narrow cluster, a few far outliers on both sides: the k-th best lies in
// one bucket of the whole span, and the selection has to narrow it over several rounds.
std::vector<float> gen_clustered(std::size_t n, Rng& rng) {
  std::vector<float> s(n);
  for (auto& x : s) {
    const std::uint32_t r = rng.below(64);
    x = r == 0 ? 1e30f : r == 1 ? -1e30f : float_of(0x3F800000u + rng.below(40000));
  }
  return s;
}

struct NamedGen {
  const char* name;
  Gen gen;
};
const NamedGen kGens[] = {{"random", gen_random},       {"ties", gen_ties},         {"specials", gen_specials},
                          {"all_equal", gen_all_equal}, {"all_nan", gen_all_nan},   {"zeros", gen_zeros},
                          {"ascending", gen_ascending}, {"mostly_nan", gen_mostly_nan}, {"close", gen_close},
                          {"normal", gen_normal},       {"wide", gen_wide},         {"clustered", gen_clustered}};

TEST_P(Topk, MatchesSpecOrder) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  for (std::uint64_t seed : {7, 8, 9}) {
    Rng rng(seed);
    for (const NamedGen& g : kGens)
      for (std::size_t n : sizes()) {
        const auto s = g.gen(n, rng);
        for (std::size_t k : ks(n))
          for (TopkNan nan : {TopkNan::last, TopkNan::exclude}) {
            check(s, k, nan,
                  std::string(g.name) + (nan == TopkNan::last ? " nan=last" : " nan=exclude") + " seed " +
                      std::to_string(seed));
            if (HasFatalFailure()) return;
          }
      }
  }
}

TEST_P(Topk, IndexerSizedRows) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  Rng rng(11);
  for (const NamedGen& g : kGens) {
    // A prefill row, and a causal row short enough to be sorted whole.
    for (std::size_t n : {std::size_t{8192} + 5, std::size_t{1536}}) {
      const auto s = g.gen(n, rng);
      check(s, 2048, TopkNan::last, std::string(g.name) + " n=" + std::to_string(n));
      check(s, 2048, TopkNan::exclude, std::string(g.name) + " n=" + std::to_string(n) + " exclude");
    }
    const auto s = g.gen(131072 + 3, rng);
    check(s, 2048, TopkNan::last, std::string(g.name) + " n=131075");
    check(s, 2048, TopkNan::exclude, std::string(g.name) + " n=131075 exclude");
    if (HasFatalFailure()) return;
  }
}

TEST_P(Topk, ZeroCases) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  std::int32_t out[2] = {-7, -7};
  unsigned char scratch[256];
  EXPECT_EQ(table().select(nullptr, 0, 5, TopkNan::last, out, scratch), 0u);  // n = 0
  const float one = 1.0f;
  EXPECT_EQ(table().select(&one, 1, 0, TopkNan::last, out, scratch), 0u);  // k = 0
  EXPECT_EQ(out[0], -7);
  const float nan = kNaN;
  EXPECT_EQ(table().select(&nan, 1, 1, TopkNan::exclude, out, scratch), 0u);  // only NaN, excluded
  EXPECT_EQ(table().select(&nan, 1, 1, TopkNan::last, out, scratch), 1u);
  EXPECT_EQ(out[0], 0);
}

// +0 and -0 are equal: the smaller index wins either way round.
TEST_P(Topk, SignedZerosTieByIndex) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  check({-0.0f, 0.0f, -1.0f}, 1, TopkNan::last, "-0 first");
  check({0.0f, -0.0f, -1.0f}, 2, TopkNan::last, "+0 first");
  check({-1.0f, -0.0f, kNaN, 0.0f}, 4, TopkNan::last, "mixed");
}

INSTANTIATE_TEST_SUITE_P(Levels, Topk, ::testing::ValuesIn(levels_of("topk")), level_param_name);

}  // namespace
}  // namespace mlakit::kernel_tests
