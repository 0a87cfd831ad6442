// MSA block indexer (docs/msa_block_indexer.md): the golden matrix, the reference against the oracle, and targeted
// tests with hand-built data and hand-computed expected selections.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <vector>

#include "goldens/common/driver.hpp"
#include "goldens/common/random.hpp"
#include "mlakit/ops/msa_block_indexer.hpp"
#include "oracle/msa_block_indexer.hpp"
#include "support/matrix.hpp"

MLAKIT_GOLDEN_MATRIX(msa_block_indexer);

namespace mlakit::testing {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;

const goldens::OpDriver& driver() {
  const auto* d = goldens::find_driver("msa_block_indexer");
  if (!d) throw std::runtime_error("msa_block_indexer driver not registered");
  return *d;
}

// ---- the reference against the oracle, every case x seed ------------------------------------
struct OracleParam {
  goldens::CaseSpec spec;
  std::uint64_t seed;
};

std::vector<OracleParam> oracle_params() {
  std::vector<OracleParam> v;
  for (const auto& c : driver().cases())
    for (std::uint64_t s : kSeeds) v.push_back({c, s});
  return v;
}

void PrintTo(const OracleParam& p, std::ostream* os) { *os << p.spec.name << " seed " << p.seed; }

class MsaOracle : public ::testing::TestWithParam<OracleParam> {};

TEST_P(MsaOracle, ReferenceMatchesOracle) {
  run_reference_against_oracle(driver(), GetParam().spec, GetParam().seed, msa_block_indexer_oracle);
}

INSTANTIATE_TEST_SUITE_P(msa_block_indexer, MsaOracle, ::testing::ValuesIn(oracle_params()),
                         [](const ::testing::TestParamInfo<OracleParam>& i) {
                           return i.param.spec.name + "_seed" + std::to_string(i.param.seed);
                         });

// ---- hand-built data --------------------------------------------------------------------------
// A generated bundle (for its layout: shuffled pages, sentinels) whose q and K are then rewritten.
Bundle layout(const json& knobs) { return driver().generate(knobs, 11); }

// Element index of (sequence s, position pos, d = 0) in k_cache.blocks, through the page table.
std::int64_t key_at(const Bundle& b, std::int64_t s, std::int64_t pos) {
  const Tensor& blocks = b.at("k_cache.blocks");
  const Tensor& lut = b.at("k_cache.lookup_table");
  const auto& sh = blocks.shape();
  const std::int64_t page = sh[3];
  const std::int64_t blk = lut.data<std::uint32_t>()[s * lut.shape()[1] + pos / page];
  const std::int64_t layer = b.params.at("layer_idx").get<std::int64_t>();
  return ((blk * sh[2] + layer) * page + pos % page) * sh[5];
}

void set_key(Bundle& b, std::int64_t s, std::int64_t pos, const std::vector<float>& v) {
  Tensor& blocks = b.at("k_cache.blocks");
  const std::int64_t at = key_at(b, s, pos);
  for (std::size_t d = 0; d < v.size(); ++d) {
    if (blocks.dtype() == DType::bf16) blocks.data<std::uint16_t>()[at + d] = f32_to_bf16(v[d]);
    else blocks.data<std::uint8_t>()[at + d] = f32_to_f8e4m3(v[d]);
  }
}

void set_q(Bundle& b, std::int64_t t, std::int64_t h, const std::vector<float>& v) {
  Tensor& q = b.at("q");
  const std::int64_t heads = q.shape()[1], dim = q.shape()[2];
  for (std::size_t d = 0; d < v.size(); ++d) q.data<std::uint16_t>()[(t * heads + h) * dim + d] = f32_to_bf16(v[d]);
}

void set_param(Bundle& b, const char* key, const json& v) { b.params[key] = v; }

// out.out_idxs row (head h, row t).
std::vector<std::int32_t> run_row(Bundle& b, std::int64_t h, std::int64_t t, Backend be = Backend::reference) {
  const Status s = driver().run(b, RunOptions{be});
  EXPECT_TRUE(s.ok()) << s.message;
  const Tensor& out = b.at("out.out_idxs");
  const std::int64_t rows = out.shape()[1], topk = out.shape()[2];
  const std::int32_t* p = out.data<std::int32_t>() + (h * rows + t) * topk;
  return std::vector<std::int32_t>(p, p + topk);
}

using Row = std::vector<std::int32_t>;

TEST(MsaBlockIndexer, HandComputedBlockMaxima) {
  // One decode row: nk = 10, block 2 -> 5 blocks. Score of key j = q·k = ±k0.
  Bundle b = layout({{"seq_lens", {1}}, {"prefix_lens", {9}}, {"num_index_heads", 2}, {"idx_head_dim", 2},
                     {"block_size", 2}, {"topk", 3}, {"init_blocks", 0}, {"local_blocks", 0}, {"scale", 1.0}});
  const float k0[10] = {3, 1, 7, -2, 5, 5, 0, 9, -1, 4};
  for (int j = 0; j < 10; ++j) set_key(b, 0, j, {k0[j], 0.5f});
  set_q(b, 0, 0, {1, 0});
  set_q(b, 0, 1, {-1, 0});
  EXPECT_EQ(run_row(b, 0, 0), (Row{3, 1, 2}));  // maxima 3 7 5 9 4
  EXPECT_EQ(run_row(b, 1, 0), (Row{1, 4, 3}));  // maxima -1 2 -5 0 1
  set_param(b, "init_blocks", 1);
  set_param(b, "local_blocks", 1);
  EXPECT_EQ(run_row(b, 0, 0), (Row{0, 4, 3}));
  EXPECT_EQ(run_row(b, 1, 0), (Row{0, 4, 1}));
}

TEST(MsaBlockIndexer, CausalCutInsideTheLastBlock) {
  // Prefill of 3 rows after 4 cached keys, block 4: row i sees keys 0 .. 4+i.
  Bundle b = layout({{"seq_lens", {3}}, {"prefix_lens", {4}}, {"num_index_heads", 1}, {"idx_head_dim", 1},
                     {"block_size", 4}, {"topk", 2}, {"init_blocks", 0}, {"local_blocks", 0}, {"scale", 1.0}});
  const float k[8] = {1, 1, 1, 1, 0, 100, 50, 1000};  // position 7 is in the page but never visible
  for (int j = 0; j < 8; ++j) set_key(b, 0, j, {k[j]});
  for (int t = 0; t < 3; ++t) set_q(b, t, 0, {1});
  EXPECT_EQ(run_row(b, 0, 0), (Row{0, 1}));  // block 1 = {0}: keys 5.. are in the future
  EXPECT_EQ(run_row(b, 0, 1), (Row{1, 0}));  // block 1 = {0, 100}
  EXPECT_EQ(run_row(b, 0, 2), (Row{1, 0}));
  // With the scale negated, block 1's max over {0, -100, -50} is 0 > -1.
  set_param(b, "scale", -1.0);
  EXPECT_EQ(run_row(b, 0, 2), (Row{1, 0}));
  set_key(b, 0, 4, {7});
  EXPECT_EQ(run_row(b, 0, 0), (Row{0, 1}));  // max {-7} < -1
}

TEST(MsaBlockIndexer, NaNKeysMakeTheirBlockNaN) {
  Bundle b = layout({{"seq_lens", {1}}, {"prefix_lens", {7}}, {"num_index_heads", 1}, {"idx_head_dim", 1},
                     {"block_size", 2}, {"topk", 4}, {"init_blocks", 0}, {"local_blocks", 0}, {"scale", 1.0}});
  const float k[8] = {1, 2, NAN, 50, 3, 4, 5, 6};
  for (int j = 0; j < 8; ++j) set_key(b, 0, j, {k[j]});
  set_q(b, 0, 0, {1});
  // Block 1 holds 50 but also a NaN key: it is NaN, never selected, and the row ends early.
  EXPECT_EQ(run_row(b, 0, 0), (Row{3, 2, 0, -1}));
  set_param(b, "init_blocks", 2);  // a forced block takes its forced value even when NaN
  EXPECT_EQ(run_row(b, 0, 0), (Row{0, 1, 3, 2}));
  for (int j = 0; j < 8; ++j) set_key(b, 0, j, {NAN});
  set_param(b, "init_blocks", 1);
  set_param(b, "local_blocks", 1);
  EXPECT_EQ(run_row(b, 0, 0), (Row{0, 3, -1, -1}));
}

TEST(MsaBlockIndexer, ForcedBlocksInitFirstLocalWinsOverlap) {
  Bundle b = layout({{"seq_lens", {1}}, {"prefix_lens", {7}}, {"num_index_heads", 1}, {"idx_head_dim", 1},
                     {"block_size", 2}, {"topk", 4}, {"init_blocks", 0}, {"local_blocks", 0}, {"scale", 1.0}});
  for (int j = 0; j < 8; ++j) set_key(b, 0, j, {static_cast<float>(1 + j / 2)});  // block maxima 1 2 3 4
  set_q(b, 0, 0, {1});
  struct Case { int init, local; Row want; };
  const Case cases[] = {
      {0, 0, {3, 2, 1, 0}}, {2, 1, {0, 1, 3, 2}}, {3, 2, {0, 1, 2, 3}}, {1, 4, {0, 1, 2, 3}},
      {4, 0, {0, 1, 2, 3}}, {0, 2, {2, 3, 1, 0}}, {1, 1, {0, 3, 2, 1}}, {9, 9, {0, 1, 2, 3}},
  };
  for (const Case& c : cases) {
    set_param(b, "init_blocks", c.init);
    set_param(b, "local_blocks", c.local);
    EXPECT_EQ(run_row(b, 0, 0), c.want) << "init " << c.init << " local " << c.local;
  }
  // Counts far beyond any sequence (no overflow): every block is local.
  set_param(b, "init_blocks", std::numeric_limits<std::int64_t>::max());
  set_param(b, "local_blocks", std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(run_row(b, 0, 0), (Row{0, 1, 2, 3}));
  set_param(b, "local_blocks", 0);
  EXPECT_EQ(run_row(b, 0, 0), (Row{0, 1, 2, 3}));
  // Both forced kinds, topk below their count: init first.
  set_param(b, "topk", 2);
  set_param(b, "init_blocks", 1);
  set_param(b, "local_blocks", 2);
  EXPECT_EQ(run_row(b, 0, 0), (Row{0, 2}));
}

TEST(MsaBlockIndexer, TiesGoToTheSmallerBlockAndSignedZerosTie) {
  Bundle b = layout({{"seq_lens", {1}}, {"prefix_lens", {7}}, {"num_index_heads", 1}, {"idx_head_dim", 1},
                     {"block_size", 2}, {"topk", 4}, {"init_blocks", 0}, {"local_blocks", 0}, {"scale", 1.0}});
  const float k[8] = {-0.0f, -0.0f, 0.0f, 0.0f, -0.0f, 0.0f, -1.0f, -1.0f};
  for (int j = 0; j < 8; ++j) set_key(b, 0, j, {k[j]});
  set_q(b, 0, 0, {1});
  EXPECT_EQ(run_row(b, 0, 0), (Row{0, 1, 2, 3}));
  for (int j = 0; j < 8; ++j) set_key(b, 0, j, {5});
  set_key(b, 0, 2, {9});  // block 1 wins, the rest tie
  EXPECT_EQ(run_row(b, 0, 0), (Row{1, 0, 2, 3}));
}

TEST(MsaBlockIndexer, AllFp8CodesRankByTheirExactValue) {
  // Block size 1, Di 1, q = 1: the score of block c is the value of code c.
  Bundle b = layout({{"seq_lens", {1}}, {"prefix_lens", {255}}, {"num_index_heads", 1}, {"idx_head_dim", 1},
                     {"block_size", 1}, {"topk", 256}, {"init_blocks", 0}, {"local_blocks", 0}, {"scale", 1.0},
                     {"cache_dtype", "f8e4m3"}});
  for (int c = 0; c < 256; ++c) b.at("k_cache.blocks").data<std::uint8_t>()[key_at(b, 0, c)] = static_cast<std::uint8_t>(c);
  set_q(b, 0, 0, {1});
  Row want;
  for (int c = 0x7E; c >= 0x01; --c) want.push_back(c);  // 448 down to the smallest subnormal
  want.push_back(0x00);                                   // +0 and -0 tie: the smaller block first
  want.push_back(0x80);
  for (int c = 0x81; c <= 0xFE; ++c) want.push_back(c);   // -2^-9 down to -448
  want.push_back(-1);                                     // 0x7F and 0xFF are NaN
  want.push_back(-1);
  EXPECT_EQ(run_row(b, 0, 0), want);
  // A power-of-two scale keeps the order; a negative one reverses it.
  set_param(b, "scale", -0.125);
  std::reverse(want.begin(), want.end() - 2);
  std::swap(want[126], want[127]);  // the tied zeros stay in block order
  EXPECT_EQ(run_row(b, 0, 0), want);
}

TEST(MsaBlockIndexer, DecodeEqualsPrefillRowByRow) {
  const Bundle pre = driver().generate({{"seq_lens", {10}}, {"prefix_lens", {5}}, {"num_index_heads", 2},
                                        {"idx_head_dim", 16}, {"block_size", 3}, {"topk", 4}}, 7);
  Bundle p = pre;
  ASSERT_TRUE(driver().run(p, RunOptions{Backend::reference}).ok());
  // The same rows as 10 decode sequences sharing the prefill's pages: prefix 5 .. 14.
  Bundle d = pre;
  goldens::make_row_offsets(d, "input_row_offsets", std::vector<std::int64_t>(10, 1));
  Tensor& pl = d.add("prefix_lens", DType::u32, {10});
  const Tensor& lut0 = pre.at("k_cache.lookup_table");
  const std::int64_t cols = lut0.shape()[1];
  Tensor& lut = d.add("k_cache.lookup_table", DType::u32, {10, cols});
  Tensor& lens = d.add("k_cache.cache_lengths", DType::u32, {10});
  for (int s = 0; s < 10; ++s) {
    pl.data<std::uint32_t>()[s] = static_cast<std::uint32_t>(5 + s);
    lens.data<std::uint32_t>()[s] = static_cast<std::uint32_t>(5 + s);
    std::copy_n(lut0.data<std::uint32_t>(), cols, lut.data<std::uint32_t>() + s * cols);
  }
  ASSERT_TRUE(driver().run(d, RunOptions{Backend::reference}).ok());
  EXPECT_TRUE(d.at("out.out_idxs").same_bytes(p.at("out.out_idxs")));
}

TEST(MsaBlockIndexer, ReadsOnlyTheChosenLayer) {
  const Bundle multi = driver().generate({{"num_layers", 3}, {"layer_idx", 1}, {"data", "exact"}, {"scale", 0.125}}, 5);
  Bundle m = multi;
  ASSERT_TRUE(driver().run(m, RunOptions{Backend::reference}).ok());
  // Copy layer 1 into a one-layer cache.
  Bundle one = multi;
  const Tensor& src = multi.at("k_cache.blocks");
  auto sh = src.shape();
  const std::int64_t per_layer = sh[3] * sh[4] * sh[5];
  Tensor& dst = one.add("k_cache.blocks", src.dtype(), {sh[0], 1, 1, sh[3], sh[4], sh[5]});
  for (std::int64_t blk = 0; blk < sh[0]; ++blk)
    std::copy_n(src.bytes() + (blk * 3 + 1) * per_layer * 2, per_layer * 2, dst.bytes() + blk * per_layer * 2);
  one.params["layer_idx"] = 0;
  ASSERT_TRUE(driver().run(one, RunOptions{Backend::reference}).ok());
  EXPECT_TRUE(one.at("out.out_idxs").same_bytes(m.at("out.out_idxs")));
  // Another layer holds other keys: the selection changes somewhere.
  Bundle other = multi;
  other.params["layer_idx"] = 2;
  ASSERT_TRUE(driver().run(other, RunOptions{Backend::reference}).ok());
  EXPECT_FALSE(other.at("out.out_idxs").same_bytes(m.at("out.out_idxs")));
}

TEST(MsaBlockIndexer, WritesEveryElementAndNothingPastTheEnd) {
  for (const auto& c : driver().cases()) {
    Bundle b = driver().generate(c.knobs, 1);
    ASSERT_TRUE(driver().run(b, RunOptions{Backend::reference}).ok()) << c.name;
    const Tensor& out = b.at("out.out_idxs");
    EXPECT_TRUE(out.guard_intact()) << c.name;
    const std::int64_t topk = out.shape()[2];
    for (std::int64_t i = 0; i < out.numel(); ++i) {
      const std::int32_t v = out.data<std::int32_t>()[i];
      ASSERT_GE(v, -1) << c.name << " element " << i << " (poison left?)";
      // -1 only as a tail.
      if (v == -1 && i % topk + 1 < topk) {
        ASSERT_EQ(out.data<std::int32_t>()[i + 1], -1) << c.name << " element " << i;
      }
    }
  }
}

TEST(MsaBlockIndexer, ZeroRowsIsValidAndWritesNothing) {
  Bundle b = driver().generate({{"seq_lens", {0, 0}}, {"prefix_lens", {3, 0}}}, 1);
  ASSERT_TRUE(driver().run(b, RunOptions{Backend::reference}).ok());
  EXPECT_EQ(b.at("out.out_idxs").numel(), 0);
  EXPECT_TRUE(b.at("out.out_idxs").guard_intact());
  Bundle none = driver().generate({{"seq_lens", json::array()}, {"prefix_lens", json::array()}}, 1);
  ASSERT_TRUE(driver().run(none, RunOptions{Backend::reference}).ok());
  EXPECT_EQ(none.at("out.out_idxs").numel(), 0);
}

// ---- the comparison can fail ------------------------------------------------------------------
struct Mutated {
  Bundle expected, candidate;
};

Mutated reference_pair(const json& knobs) {
  Mutated m{driver().generate(knobs, 3), {}};
  EXPECT_TRUE(driver().run(m.expected, RunOptions{Backend::reference}).ok());
  m.candidate = m.expected;
  return m;
}

bool passes(const Mutated& m) {
  bool ok = true;
  for (const auto& c : driver().compare(m.expected, m.candidate)) ok &= c.pass;
  return ok;
}

std::int32_t* first_row(Mutated& m) { return m.candidate.at("out.out_idxs").data<std::int32_t>(); }

TEST(MsaBlockIndexer, ToleranceFollowsTheData) {
  EXPECT_TRUE(driver().generate({{"data", "exact"}, {"scale", 0.125}}, 1).tolerance.at("out.out_idxs").contains("exact"));
  EXPECT_TRUE(driver().generate({{"data", "random"}}, 1).tolerance.at("out.out_idxs").contains("selection"));
  // Integer data with a scale that is not a power of two is not exact.
  Bundle b = driver().generate({{"data", "exact"}, {"scale", 0.125}}, 1);
  b.params["scale"] = 0.1;
  EXPECT_TRUE(driver().tolerance(b).at("out.out_idxs").contains("selection"));
}

TEST(MsaBlockIndexer, ExactComparisonCatchesASwap) {
  Mutated m = reference_pair({{"data", "exact"}, {"scale", 0.125}, {"init_blocks", 0}, {"local_blocks", 0}});
  ASSERT_TRUE(passes(m));
  std::swap(first_row(m)[0], first_row(m)[1]);
  EXPECT_FALSE(passes(m));
}

// The row of (head 0, last row of the first non-empty sequence) on random data: 4 of >= 5 blocks.
Mutated structural_pair() {
  Mutated m = reference_pair({{"seq_lens", {1}}, {"prefix_lens", {30}}, {"block_size", 4}, {"topk", 4},
                              {"init_blocks", 1}, {"local_blocks", 1}});
  EXPECT_TRUE(m.expected.tolerance.at("out.out_idxs").contains("selection"));
  return m;
}

TEST(MsaBlockIndexer, StructuralComparisonAcceptsTheReference) { EXPECT_TRUE(passes(structural_pair())); }

TEST(MsaBlockIndexer, StructuralComparisonCatchesWrongCount) {
  Mutated m = structural_pair();
  first_row(m)[3] = -1;
  EXPECT_FALSE(passes(m));
}

TEST(MsaBlockIndexer, StructuralComparisonCatchesDuplicates) {
  Mutated m = structural_pair();
  first_row(m)[3] = first_row(m)[2];
  EXPECT_FALSE(passes(m));
}

TEST(MsaBlockIndexer, StructuralComparisonCatchesOutOfRange) {
  Mutated m = structural_pair();
  first_row(m)[3] = 8;  // nb = 8 for nk = 31, block 4
  EXPECT_FALSE(passes(m));
}

TEST(MsaBlockIndexer, StructuralComparisonCatchesForcedOrder) {
  Mutated m = structural_pair();
  ASSERT_EQ(first_row(m)[0], 0);
  ASSERT_EQ(first_row(m)[1], 7);
  std::swap(first_row(m)[0], first_row(m)[1]);
  EXPECT_FALSE(passes(m));
}

TEST(MsaBlockIndexer, StructuralComparisonCatchesAWorseBlock) {
  Mutated m = structural_pair();
  // Reverse the two scored picks: the later one scores clearly lower on random data.
  std::swap(first_row(m)[2], first_row(m)[3]);
  EXPECT_FALSE(passes(m));
  // Replace the last pick with the block left out that scores lowest: some unselected block beats it.
  m = structural_pair();
  std::int32_t* row = first_row(m);
  for (std::int32_t c = 1; c < 7; ++c)
    if (std::find(row, row + 4, c) == row + 4) {
      row[3] = c;
      if (!passes(m)) break;
    }
  EXPECT_FALSE(passes(m));
}

}  // namespace
}  // namespace mlakit::testing
