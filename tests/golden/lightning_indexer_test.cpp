// Op 1 (docs/lightning_indexer.md): the golden matrix, the reference against the oracle, and hand-built cases with
// exact expected outputs for each rule of the spec.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <set>
#include <vector>

#include "goldens/common/driver.hpp"
#include "mlakit/ops/lightning_indexer.hpp"
#include "oracle/lightning_indexer.hpp"
#include "support/matrix.hpp"

MLAKIT_GOLDEN_MATRIX(lightning_indexer);

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::CaseSpec;
using goldens::json;
using goldens::Tensor;

const goldens::OpDriver& driver() {
  const goldens::OpDriver* d = goldens::find_driver("lightning_indexer");
  if (d == nullptr) throw std::runtime_error("lightning_indexer driver is not registered");
  return *d;
}

// ---- the reference against the oracle, every case and seed -----------------------------------

struct OracleParam {
  CaseSpec spec;
  std::uint64_t seed;
};

void PrintTo(const OracleParam& p, std::ostream* os) { *os << p.spec.name << " seed " << p.seed; }

std::vector<OracleParam> oracle_params() {
  std::vector<OracleParam> v;
  for (const auto& spec : driver().cases())
    for (std::uint64_t seed : testing::kSeeds) v.push_back({spec, seed});
  v.push_back({driver().default_case(), 1});
  return v;
}

class LightningIndexerOracle : public ::testing::TestWithParam<OracleParam> {};

TEST_P(LightningIndexerOracle, ReferenceMatchesOracle) {
  testing::run_reference_against_oracle(driver(), GetParam().spec, GetParam().seed, oracle::lightning_indexer);
}

INSTANTIATE_TEST_SUITE_P(lightning_indexer, LightningIndexerOracle, ::testing::ValuesIn(oracle_params()),
                         [](const ::testing::TestParamInfo<OracleParam>& info) {
                           return info.param.spec.name + "_seed" + std::to_string(info.param.seed);
                         });

// ---- hand-built calls -------------------------------------------------------------------------

// Element offset of logical key j of sequence s (its row in `layer`).
std::int64_t key_row(const Bundle& b, std::int64_t s, std::int64_t j, std::int64_t layer = 0) {
  const Tensor& blocks = b.at("k_cache.blocks");
  const Tensor& lut = b.at("k_cache.lookup_table");
  const auto& sh = blocks.shape();
  const std::int64_t blk = lut.data<std::uint32_t>()[s * lut.shape()[1] + j / sh[3]];
  return ((blk * sh[2] + layer) * sh[3] + j % sh[3]) * sh[5];
}

void set_key(Bundle& b, std::int64_t s, std::int64_t j, const std::vector<float>& k, float scale,
             std::int64_t layer = 0) {
  const std::int64_t r = key_row(b, s, j, layer);
  for (std::size_t d = 0; d < k.size(); ++d) b.at("k_cache.blocks").data<std::uint8_t>()[r + d] = f32_to_f8e4m3(k[d]);
  b.at("k_cache.scales").data<float>()[r / b.at("k_cache.blocks").shape()[5]] = scale;
}

void set_query(Bundle& b, std::int64_t t, std::int64_t h, const std::vector<float>& q, float w) {
  const std::int64_t H = b.at("q").shape()[1], D = b.at("q").shape()[2];
  for (std::size_t d = 0; d < q.size(); ++d) b.at("q").data<std::uint8_t>()[(t * H + h) * D + d] = f32_to_f8e4m3(q[d]);
  b.at("q_s").data<float>()[t * H + h] = w;
}

std::vector<std::int32_t> output_row(const Bundle& b, std::int64_t t) {
  const Tensor& o = b.at("out.output_indices");
  const std::int64_t k = o.shape()[1];
  return {o.data<std::int32_t>() + t * k, o.data<std::int32_t>() + (t + 1) * k};
}

Bundle run_reference(Bundle b) {
  const Status s = driver().run(b, RunOptions{Backend::reference});
  EXPECT_TRUE(s.ok()) << s.message;
  return b;
}

using Row = std::vector<std::int32_t>;

// Two rows, six keys on shuffled pages of 2. The data separate the spec's rules from their usual
// mistakes: ReLU after the weight (key 3), heads maxed instead of summed (key 2), k_scale ignored
// (keys 4 and 5), a negative weight on head 0 (row 1).
Bundle six_keys(const std::string& mask) {
  Bundle b = driver().generate({{"seq_lens", {2}}, {"cache_lens", {4}}, {"num_heads", 2}, {"head_dim", 2},
                                {"top_k", 8}, {"page_size", 2}, {"mask", mask}, {"extra_columns", 2}},
                               5);
  set_key(b, 0, 0, {1, 0}, 1);
  set_key(b, 0, 1, {0, 1}, 1);
  set_key(b, 0, 2, {3, 4}, 0.5f);
  set_key(b, 0, 3, {0, -2}, 1);
  set_key(b, 0, 4, {2, -1}, 2);
  set_key(b, 0, 5, {3, 0}, 1);
  set_query(b, 0, 0, {1, 0}, 1.0f);
  set_query(b, 0, 1, {0, 1}, -0.5f);
  set_query(b, 1, 0, {1, 1}, -1.0f);
  set_query(b, 1, 1, {1, -1}, 2.0f);
  return b;
}

TEST(LightningIndexerTest, HandComputedMaskNone) {
  // Row 0 scores: 1, -0.5, 0.5, -0, 4, 3.  Row 1: 1, -1, -3.5, 4, 10, 3.
  const Bundle b = run_reference(six_keys("none"));
  EXPECT_EQ(output_row(b, 0), (Row{4, 5, 0, 2, 3, 1, -1, -1}));
  EXPECT_EQ(output_row(b, 1), (Row{4, 3, 5, 0, 1, 2, -1, -1}));
}

TEST(LightningIndexerTest, HandComputedCausal) {
  // Row 0 sees keys 0..4 (cache 4 + itself), row 1 sees 0..5.
  const Bundle b = run_reference(six_keys("causal"));
  EXPECT_EQ(output_row(b, 0), (Row{4, 0, 2, 3, 1, -1, -1, -1}));
  EXPECT_EQ(output_row(b, 1), (Row{4, 3, 5, 0, 1, 2, -1, -1}));
}

TEST(LightningIndexerTest, TopKCutsTheRankingAndPadsShortRows) {
  Bundle b = six_keys("causal");
  b.params["top_k"] = 2;
  b = run_reference(b);
  EXPECT_EQ(output_row(b, 0), (Row{4, 0}));
  EXPECT_EQ(output_row(b, 1), (Row{4, 3}));
}

TEST(LightningIndexerTest, TiesGoToTheSmallerPositionAndSignedZerosAreEqual) {
  // One head, q = (1, 0), weight −1. Scores: key 0 = −0, key 1 = +0 (negative k_scale), keys 2 and 3
  // identical (= 2), key 4 = −1, key 5 = −0. A total order with −0 < +0 would put key 1 first.
  Bundle b = driver().generate({{"seq_lens", {1}}, {"cache_lens", {5}}, {"num_heads", 1}, {"head_dim", 2},
                                {"top_k", 6}, {"page_size", 4}, {"mask", "causal"}},
                               9);
  set_query(b, 0, 0, {1, 0}, -1.0f);
  set_key(b, 0, 0, {-1, 0}, 1.0f);
  set_key(b, 0, 1, {-1, 3}, -1.0f);
  set_key(b, 0, 2, {2, 0}, -1.0f);
  set_key(b, 0, 3, {2, 0}, -1.0f);
  set_key(b, 0, 4, {1, 0}, 1.0f);
  set_key(b, 0, 5, {0, 0}, 1.0f);
  b = run_reference(b);
  EXPECT_EQ(output_row(b, 0), (Row{2, 3, 0, 1, 5, 4}));
}

TEST(LightningIndexerTest, NaNScoresRankLastInPositionOrder) {
  // Row 0: keys 1 and 3 hold a NaN code (0·NaN is NaN, so both heads are NaN there).
  // Row 1: head 0 of q is NaN, so every score is NaN: IEEE maximum keeps it (fmax would not).
  Bundle b = driver().generate({{"seq_lens", {2}}, {"cache_lens", {3}}, {"num_heads", 2}, {"head_dim", 2},
                                {"top_k", 7}, {"page_size", 2}, {"mask", "none"}},
                               3);
  set_key(b, 0, 0, {1, 1}, 1);
  set_key(b, 0, 1, {NAN, 1}, 1);
  set_key(b, 0, 2, {2, 0}, 1);
  set_key(b, 0, 3, {NAN, 0}, 1);
  set_key(b, 0, 4, {0.5f, 0}, 1);
  set_query(b, 0, 0, {1, 0}, 1.0f);
  set_query(b, 0, 1, {0, 1}, 1.0f);
  set_query(b, 1, 0, {NAN, 0}, 1.0f);
  set_query(b, 1, 1, {1, 0}, 1.0f);
  Bundle r = run_reference(b);
  EXPECT_EQ(output_row(r, 0), (Row{0, 2, 4, 1, 3, -1, -1}));  // 2, 2, 0.5, NaN, NaN
  EXPECT_EQ(output_row(r, 1), (Row{0, 1, 2, 3, 4, -1, -1}));
  // With fewer columns than numbers, NaNs are not selected at all.
  b.params["top_k"] = 3;
  r = run_reference(b);
  EXPECT_EQ(output_row(r, 0), (Row{0, 2, 4}));
}

TEST(LightningIndexerTest, SubnormalCodesAreNotFlushed) {
  // q = 2^-8; keys 2^-9, 0, 3·2^-9, −2^-9 (codes 0x01, 0x00, 0x03, 0x81). Flushing would tie them all.
  Bundle b = driver().generate({{"seq_lens", {1}}, {"cache_lens", {3}}, {"num_heads", 1}, {"head_dim", 1},
                                {"top_k", 4}, {"page_size", 2}},
                               4);
  set_query(b, 0, 0, {std::ldexp(1.0f, -8)}, 1.0f);
  set_key(b, 0, 0, {std::ldexp(1.0f, -9)}, 1);
  set_key(b, 0, 1, {0}, 1);
  set_key(b, 0, 2, {3 * std::ldexp(1.0f, -9)}, 1);
  set_key(b, 0, 3, {-std::ldexp(1.0f, -9)}, 1);
  b = run_reference(b);
  EXPECT_EQ(output_row(b, 0), (Row{2, 0, 1, 3}));
}

TEST(LightningIndexerTest, ReadsOnlyTheChosenLayerAndTheVisiblePositions) {
  const Bundle inputs = driver().generate({{"seq_lens", {5, 0, 4}}, {"cache_lens", {7, 9, 3}}, {"num_heads", 4},
                                           {"head_dim", 16}, {"top_k", 9}, {"page_size", 4}, {"num_layers", 3},
                                           {"layer_idx", 1}, {"spare_blocks", 3}},
                                          21);
  const Bundle base = run_reference(inputs);
  // Scribble over the other layers of every block, and over every block no read position uses.
  Bundle other = inputs;
  Tensor& blocks = other.at("k_cache.blocks");
  const auto& sh = blocks.shape();
  std::set<std::int64_t> read_rows;
  const std::int64_t seq[3] = {5, 0, 4}, cache[3] = {7, 9, 3};
  for (std::int64_t s = 0; s < 3; ++s)
    if (seq[s] > 0)
      for (std::int64_t j = 0; j < seq[s] + cache[s]; ++j) read_rows.insert(key_row(other, s, j, 1) / sh[5]);
  for (std::int64_t r = 0; r < blocks.numel() / sh[5]; ++r) {
    if (read_rows.count(r)) continue;
    for (std::int64_t d = 0; d < sh[5]; ++d) blocks.data<std::uint8_t>()[r * sh[5] + d] = static_cast<std::uint8_t>(r * 7 + d);
    other.at("k_cache.scales").data<float>()[r] = 1e6f;
  }
  const Bundle scribbled = run_reference(other);
  EXPECT_TRUE(scribbled.at("out.output_indices").same_bytes(base.at("out.output_indices")));
  // A read row does matter: make position 1 of sequence 0 the best key of every row of that sequence.
  Bundle boosted = inputs;
  const std::int64_t r = key_row(boosted, 0, 1, 1);
  for (std::int64_t d = 0; d < sh[5]; ++d) boosted.at("k_cache.blocks").data<std::uint8_t>()[r + d] = 0;
  for (std::int64_t t = 0; t < 5; ++t)
    for (std::int64_t h = 0; h < 4; ++h) {
      for (std::int64_t d = 0; d < 16; ++d) boosted.at("q").data<std::uint8_t>()[(t * 4 + h) * 16 + d] = 0;
      boosted.at("q_s").data<float>()[t * 4 + h] = 1.0f;
    }
  boosted.at("q").data<std::uint8_t>()[0] = f32_to_f8e4m3(1.0f);  // row 0, head 0, dim 0
  boosted.at("k_cache.blocks").data<std::uint8_t>()[r] = f32_to_f8e4m3(448.0f);
  boosted = run_reference(boosted);
  EXPECT_EQ(output_row(boosted, 0)[0], 1);
}

TEST(LightningIndexerTest, ZeroRowCallsSucceedAndWriteNothing) {
  for (const json& knobs : {json{{"seq_lens", json::array()}, {"cache_lens", json::array()}},
                            json{{"seq_lens", {0, 0}}, {"cache_lens", {5, 0}}}}) {
    json k = knobs;
    k["num_heads"] = 2;
    k["head_dim"] = 8;
    k["top_k"] = 4;
    Bundle b = driver().generate(k, 1);
    const Status s = driver().run(b, RunOptions{Backend::reference});
    EXPECT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(b.at("out.output_indices").numel(), 0);
    EXPECT_TRUE(b.at("out.output_indices").guard_intact());
  }
}

TEST(LightningIndexerTest, AutomaticOnHostRunsTheCpuBackEnd) {
  const Bundle inputs = driver().generate(driver().cases().front().knobs, 2);
  Bundle cpu = inputs;
  ASSERT_TRUE(driver().run(cpu, RunOptions{Backend::cpu}).ok());
  for (const auto& c : driver().compare(run_reference(inputs), cpu)) EXPECT_TRUE(c.pass) << c.detail;
  Bundle automatic = inputs;
  ASSERT_TRUE(driver().run(automatic, RunOptions{}).ok());
  EXPECT_TRUE(automatic.at("out.output_indices").same_bytes(cpu.at("out.output_indices")));
}

// ---- the generator and the comparison -----------------------------------------------------------

// Exact data: every score is exact in f32 whichever order an implementation sums in (checked here
// by summing in f32 forwards and backwards), and distinct within a row unless ties are asked for.
TEST(LightningIndexerTest, ExactDataIsExactInF32AndDistinct) {
  for (const auto& spec : driver().cases()) {
    if (spec.knobs.value("data", "random") != "exact") continue;
    for (std::uint64_t seed : testing::kSeeds) {
      const Bundle b = driver().generate(spec.knobs, seed);
      const std::int64_t H = b.params.at("num_heads"), D = b.params.at("head_dim");
      const std::int64_t layer = b.params.at("layer_idx");
      const bool causal = b.params.at("mask") == "causal";
      const bool ties = spec.knobs.value("ties", "none") != "none";
      const Tensor& q = b.at("q");
      const Tensor& offsets = b.at("input_row_offsets");
      for (std::int64_t s = 0; s + 1 < offsets.numel(); ++s) {
        const std::int64_t first = offsets.data<std::uint32_t>()[s], last = offsets.data<std::uint32_t>()[s + 1];
        const std::int64_t cl = b.at("k_cache.cache_lengths").data<std::uint32_t>()[s];
        for (std::int64_t t = first; t < last; ++t) {
          const std::int64_t n = causal ? cl + t - first + 1 : cl + last - first;
          std::set<double> seen;
          auto is_nan_code = [](std::uint8_t c) { return (c & 0x7F) == 0x7F; };
          const std::uint8_t* qrow = q.data<std::uint8_t>() + t * H * D;
          if (std::any_of(qrow, qrow + H * D, is_nan_code)) continue;  // every score NaN: nothing to round
          for (std::int64_t j = 0; j < n; ++j) {
            const std::int64_t r = key_row(b, s, j, layer);
            const std::uint8_t* krow = b.at("k_cache.blocks").data<std::uint8_t>() + r;
            if (std::any_of(krow, krow + D, is_nan_code)) continue;  // a NaN key
            const float ks = b.at("k_cache.scales").data<float>()[r / D];
            double exact = 0;
            float fwd = 0, bwd = 0;
            for (std::int64_t h = 0; h < H; ++h) {
              double dot = 0;
              float dot_f = 0, dot_b = 0;
              for (std::int64_t d = 0; d < D; ++d) {
                const double x = f8e4m3_to_f32(q.data<std::uint8_t>()[(t * H + h) * D + d]);
                const double y = f8e4m3_to_f32(b.at("k_cache.blocks").data<std::uint8_t>()[r + d]);
                const double x2 = f8e4m3_to_f32(q.data<std::uint8_t>()[(t * H + h) * D + D - 1 - d]);
                const double y2 = f8e4m3_to_f32(b.at("k_cache.blocks").data<std::uint8_t>()[r + D - 1 - d]);
                dot += x * y;
                dot_f += static_cast<float>(x * y);
                dot_b += static_cast<float>(x2 * y2);
              }
              ASSERT_EQ(static_cast<double>(dot_f), dot);
              ASSERT_EQ(static_cast<double>(dot_b), dot);
              const float w = b.at("q_s").data<float>()[t * H + h];
              exact += std::max(dot, 0.0) * w;
              fwd += std::max(dot_f, 0.0f) * w;
            }
            for (std::int64_t h = H - 1; h >= 0; --h) {
              double dot = 0;
              for (std::int64_t d = 0; d < D; ++d)
                dot += f8e4m3_to_f32(q.data<std::uint8_t>()[(t * H + h) * D + d]) *
                       f8e4m3_to_f32(b.at("k_cache.blocks").data<std::uint8_t>()[r + d]);
              bwd += static_cast<float>(std::max(dot, 0.0)) * b.at("q_s").data<float>()[t * H + h];
            }
            ASSERT_EQ(static_cast<double>(fwd), exact) << spec.name;
            ASSERT_EQ(static_cast<double>(bwd), exact) << spec.name;
            ASSERT_EQ(static_cast<double>(fwd * ks), exact * ks) << spec.name;
            if (!ties) {
              EXPECT_TRUE(seen.insert(exact * ks).second) << spec.name << " seed " << seed << " row " << t << " key " << j;
            }
          }
        }
      }
    }
  }
}

TEST(LightningIndexerTest, RandomCasesHoldEveryFp8CodeInQAndInTheReadKeys) {
  for (const auto& spec : driver().cases()) {
    if (spec.knobs.value("data", "random") != "random" || spec.knobs.value("ties", "none") != "none") continue;
    const Bundle b = driver().generate(spec.knobs, 1);
    const Tensor& q = b.at("q");
    if (q.numel() >= 256) {
      const std::set<int> codes(q.data<std::uint8_t>(), q.data<std::uint8_t>() + q.numel());
      EXPECT_EQ(codes.size(), 256u) << spec.name;
    }
    const std::int64_t D = b.params.at("head_dim"), layer = b.params.at("layer_idx");
    const Tensor& offsets = b.at("input_row_offsets");
    std::set<int> codes;
    std::int64_t slots = 0;
    for (std::int64_t s = 0; s + 1 < offsets.numel(); ++s) {
      const std::int64_t seq = offsets.data<std::uint32_t>()[s + 1] - offsets.data<std::uint32_t>()[s];
      if (seq == 0) continue;
      const std::int64_t n = seq + b.at("k_cache.cache_lengths").data<std::uint32_t>()[s];
      for (std::int64_t j = 0; j < n; ++j, slots += D) {
        const std::uint8_t* k = b.at("k_cache.blocks").data<std::uint8_t>() + key_row(b, s, j, layer);
        codes.insert(k, k + D);
      }
    }
    if (slots >= 256) {
      EXPECT_EQ(codes.size(), 256u) << spec.name;
    }
  }
}

// Golden files are read by outside tools that expect every fp8 tensor of >= 256 elements to hold all
// 256 codes; exact data included.
TEST(LightningIndexerTest, EveryCaseHoldsEveryFp8CodeInEachFp8Tensor) {
  std::vector<CaseSpec> all = driver().cases();
  all.push_back(driver().default_case());
  for (const auto& spec : all) {
    const Bundle b = driver().generate(spec.knobs, 2);
    for (const char* name : {"q", "k_cache.blocks"}) {
      const Tensor& t = b.at(name);
      if (t.numel() < 256) continue;
      const std::set<int> codes(t.data<std::uint8_t>(), t.data<std::uint8_t>() + t.numel());
      EXPECT_EQ(codes.size(), 256u) << spec.name << " " << name;
    }
  }
}

// The structural comparison must catch each kind of wrong selection.
TEST(LightningIndexerTest, SelectionComparisonCatchesWrongOutputs) {
  json knobs = driver().cases().front().knobs;  // random data, causal
  const Bundle expected = run_reference(driver().generate(knobs, 3));
  ASSERT_EQ(expected.tolerance.at("out.output_indices").count("selection"), 1u);
  auto passes = [&](const Bundle& candidate) {
    bool ok = true;
    for (const auto& c : driver().compare(expected, candidate)) ok = ok && c.pass;
    return ok;
  };
  EXPECT_TRUE(passes(expected));
  const std::int64_t k = expected.at("out.output_indices").shape()[1];
  // The last row of the (single) sequence sees every key; pick a row whose ranking has no near ties.
  const std::int64_t t = expected.at("q").shape()[0] - 1;
  auto tampered = [&](auto edit) {
    Bundle c = expected;
    edit(c.at("out.output_indices").data<std::int32_t>() + t * k);
    return c;
  };
  EXPECT_FALSE(passes(tampered([](std::int32_t* r) { r[1] = r[0]; })));                   // duplicate
  EXPECT_FALSE(passes(tampered([](std::int32_t* r) { r[2] = -1; })));                     // -1 before the tail
  EXPECT_FALSE(passes(tampered([&](std::int32_t* r) { r[0] = 1 << 20; })));               // out of range
  EXPECT_FALSE(passes(tampered([&](std::int32_t* r) { std::swap(r[0], r[k - 1]); })));    // best key moved last
  EXPECT_FALSE(passes(tampered([&](std::int32_t* r) {                                     // best key dropped
    std::set<std::int32_t> used(r, r + k);
    for (std::int32_t j = 0;; ++j)
      if (!used.count(j)) { r[0] = j; break; }
  })));
  // A wrong expected output is caught as well (it is checked too).
  Bundle wrong_expected = tampered([](std::int32_t* r) { r[1] = r[0]; });
  bool ok = true;
  for (const auto& c : driver().compare(wrong_expected, expected)) ok = ok && c.pass;
  EXPECT_FALSE(ok);
}

TEST(LightningIndexerTest, ExactComparisonCatchesASwappedTie) {
  json knobs;
  for (const auto& spec : driver().cases())
    if (spec.name == "exact_duplicate_keys") knobs = spec.knobs;
  ASSERT_FALSE(knobs.is_null());
  const Bundle expected = run_reference(driver().generate(knobs, 1));
  Bundle candidate = expected;
  std::int32_t* r = candidate.at("out.output_indices").data<std::int32_t>();
  // Find two adjacent columns of equal score (same group of duplicates) and swap them.
  const std::int64_t k = candidate.at("out.output_indices").shape()[1];
  bool swapped = false;
  for (std::int64_t c = 0; c + 1 < k && !swapped; ++c)
    if (r[c] >= 0 && r[c + 1] >= 0 && r[c] / 3 == r[c + 1] / 3) std::swap(r[c], r[c + 1]), swapped = true;
  ASSERT_TRUE(swapped);
  const auto cmp = driver().compare(expected, candidate);
  ASSERT_EQ(cmp.size(), 1u);
  EXPECT_FALSE(cmp[0].pass);
}

TEST(LightningIndexerTest, WorkCountsPairsAndKeyBytes) {
  const Bundle b = driver().generate({{"seq_lens", {2, 0, 3}}, {"cache_lens", {4, 8, 1}}, {"num_heads", 2},
                                      {"head_dim", 8}, {"top_k", 3}, {"page_size", 4}},
                                     1);
  const goldens::Work w = driver().work(b);
  // Causal pairs: sequence 0: 5 + 6; sequence 2: 2 + 3 + 4.
  EXPECT_EQ(w.flops, 2.0 * 2 * 8 * 20);
  EXPECT_EQ(w.bytes, 5.0 * 2 * 12 + (6 + 4) * 12.0 + 5 * 3 * 4);
}

}  // namespace
}  // namespace mlakit
