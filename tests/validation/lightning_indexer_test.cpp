// Op 1 (docs/lightning_indexer.md): every rejected field of lightning_indexer. Each test checks the status code, that
// the message names the operator, the field and the value, and that no output, input or cache byte
// changed.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "goldens/common/driver.hpp"
#include "support/lone_buffer.hpp"
#include "mlakit/ops/lightning_indexer.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;

const goldens::OpDriver& driver() { return *goldens::find_driver("lightning_indexer"); }

// A valid call: sequences of 3, 0 and 2 rows over caches of 5, 2 and 4 tokens, H=2, D=16,
// top_k 4, pages of 4. The output is filled with a pattern before each call.
struct Call {
  Bundle b;
  LightningIndexerDesc d;
  LightningIndexerArgs a;

  explicit Call(json overrides = json::object()) {
    json knobs = {{"seq_lens", {3, 0, 2}}, {"cache_lens", {5, 2, 4}}, {"num_heads", 2}, {"head_dim", 16},
                  {"top_k", 4}, {"page_size", 4}, {"num_layers", 2}, {"layer_idx", 1}};
    for (auto it = overrides.begin(); it != overrides.end(); ++it) knobs[it.key()] = it.value();
    b = driver().generate(knobs, 3);
    d.top_k = b.params.at("top_k");
    Tensor& out = b.add("out.output_indices", DType::i32, {b.at("q").shape()[0], d.top_k});
    for (std::int64_t i = 0; i < out.numel(); ++i) out.data<std::int32_t>()[i] = 0x5EEDBEEF + static_cast<std::int32_t>(i);
    d.num_heads = b.params.at("num_heads");
    d.head_dim = b.params.at("head_dim");
    d.mask = b.params.at("mask") == "causal" ? IndexerMask::causal : IndexerMask::none;
    a.q = b.at("q").view();
    a.q_s = b.at("q_s").view();
    a.input_row_offsets = b.at("input_row_offsets").view();
    a.k_cache = goldens::cache_view(b, "k_cache", b.params.at("quant_granularity"));
    a.layer_idx = b.params.at("layer_idx");
    a.output_indices = out.view();
  }
  std::uint32_t& lut(std::int64_t s, std::int64_t col) {
    Tensor& t = b.at("k_cache.lookup_table");
    return t.data<std::uint32_t>()[s * t.shape()[1] + col];
  }
  std::uint32_t num_blocks() const { return static_cast<std::uint32_t>(b.at("k_cache.blocks").shape()[0]); }
};

void set_shape(TensorView& v, std::vector<std::int64_t> dims) {
  v.rank = static_cast<int>(dims.size());
  std::int64_t s = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.shape[i] = dims[i];
    v.strides[i] = s;
    if (i > 0) s *= dims[i];
  }
}

void expect_rejected(Call& c, const std::string& field, const std::string& value) {
  const std::map<std::string, Tensor> before = c.b.tensors;
  const Status s = lightning_indexer(c.d, c.a);
  EXPECT_EQ(s.code, StatusCode::invalid_argument) << s.message;
  EXPECT_EQ(s.op, "lightning_indexer");
  EXPECT_EQ(s.field, field) << s.message;
  EXPECT_EQ(s.message.rfind("lightning_indexer: " + field, 0), 0u) << s.message;
  EXPECT_NE(s.message.find(value), std::string::npos) << "message lacks '" << value << "': " << s.message;
  for (const auto& [name, t] : before) {
    EXPECT_TRUE(c.b.at(name).same_bytes(t)) << "'" << name << "' changed on a rejected call";
    EXPECT_TRUE(c.b.at(name).guard_intact()) << name;
  }
}

TEST(LightningIndexerValidation, TheBaseCallIsValid) {
  Call c;
  const Status s = lightning_indexer(c.d, c.a);
  EXPECT_TRUE(s.ok()) << s.message;
}

// ---- descriptor ----
TEST(LightningIndexerValidation, NumHeads) {
  for (std::int64_t h : {std::int64_t{0}, std::int64_t{-3}}) {
    Call c;
    c.d.num_heads = h;
    expect_rejected(c, "num_heads", std::string("=") + std::to_string(h) + " (must be > 0)");
  }
  Call c;
  c.d.num_heads = std::int64_t{1} << 31;
  expect_rejected(c, "num_heads", "=2147483648");
}

TEST(LightningIndexerValidation, HeadDim) {
  Call c;
  c.d.head_dim = 0;
  expect_rejected(c, "head_dim", "=0");
  Call big;
  big.d.head_dim = std::int64_t{1} << 40;
  expect_rejected(big, "head_dim", "=1099511627776");
}

TEST(LightningIndexerValidation, TopK) {
  Call c;
  c.d.top_k = 0;
  expect_rejected(c, "top_k", "=0");
  Call neg;
  neg.d.top_k = -1;
  expect_rejected(neg, "top_k", "=-1");
  Call big;
  big.d.top_k = std::int64_t{1} << 33;
  expect_rejected(big, "top_k", "=8589934592");
}

TEST(LightningIndexerValidation, Mask) {
  Call c;
  c.d.mask = static_cast<IndexerMask>(7);
  expect_rejected(c, "mask", "=7");
}

// ---- q ----
TEST(LightningIndexerValidation, QMissing) {
  Call c;
  c.a.q.data = nullptr;
  expect_rejected(c, "q", "missing");
}

TEST(LightningIndexerValidation, QDtype) {
  Call c;
  c.a.q.dtype = DType::bf16;
  expect_rejected(c, "q.dtype", "=bf16");
}

TEST(LightningIndexerValidation, QRank) {
  Call c;
  set_shape(c.a.q, {5, 32});
  expect_rejected(c, "q.rank", "=2");
}

TEST(LightningIndexerValidation, QShapeAgainstHeadsAndHeadDim) {
  Call c;
  c.d.num_heads = 3;
  expect_rejected(c, "q.shape", "=[5, 2, 16]");
  Call c2;
  c2.d.head_dim = 8;
  expect_rejected(c2, "q.shape", "=[5, 2, 16]");
}

TEST(LightningIndexerValidation, QStrides) {
  Call c;
  c.a.q.strides[1] = 32;  // heads interleaved: not row-major
  c.a.q.strides[0] = 64;
  c.a.q.shape[0] = 2;  // stays inside the buffer; only the strides are wrong
  c.a.q_s.shape[0] = 2;
  expect_rejected(c, "q.strides", "not row-major");
}

TEST(LightningIndexerValidation, QElementCountOverflows) {
  Call c;
  // 2·2^30·2^30 elements fit in int64, their size in bytes does not.
  c.d.num_heads = std::int64_t{1} << 30;
  c.d.head_dim = std::int64_t{1} << 30;
  set_shape(c.a.q, {2, c.d.num_heads, c.d.head_dim});
  expect_rejected(c, "q.shape", "overflows");
}

// ---- q_s ----
TEST(LightningIndexerValidation, QsMissingDtypeShape) {
  Call c;
  c.a.q_s.data = nullptr;
  expect_rejected(c, "q_s", "missing");
  Call c2;
  c2.a.q_s.dtype = DType::bf16;
  expect_rejected(c2, "q_s.dtype", "=bf16");
  Call c3;
  set_shape(c3.a.q_s, {5, 1});
  expect_rejected(c3, "q_s.shape", "=[5, 1]");
  Call c4;
  set_shape(c4.a.q_s, {4, 2});
  expect_rejected(c4, "q_s.shape", "=[4, 2]");
}

// ---- input_row_offsets ----
TEST(LightningIndexerValidation, RowOffsetsDtypeAndShape) {
  Call c;
  c.a.input_row_offsets.dtype = DType::i32;
  expect_rejected(c, "input_row_offsets.dtype", "=i32");
  Call c2;
  set_shape(c2.a.input_row_offsets, {0});
  expect_rejected(c2, "input_row_offsets.shape", "=[0]");
}

TEST(LightningIndexerValidation, RowOffsetsMustStartAtZero) {
  Call c;
  c.b.at("input_row_offsets").data<std::uint32_t>()[0] = 1;
  expect_rejected(c, "input_row_offsets[0]", "=1");
}

TEST(LightningIndexerValidation, RowOffsetsMustNotDecrease) {
  Call c;
  c.b.at("input_row_offsets").data<std::uint32_t>()[2] = 2;  // [0, 3, 2, 5]
  expect_rejected(c, "input_row_offsets[2]", "=2 < input_row_offsets[1]=3");
}

TEST(LightningIndexerValidation, RowOffsetsMustEndAtT) {
  Call c;
  c.b.at("input_row_offsets").data<std::uint32_t>()[3] = 4;
  expect_rejected(c, "input_row_offsets[3]", "=4");
}

// ---- k_cache ----
TEST(LightningIndexerValidation, CacheBlocks) {
  Call c;
  c.a.k_cache.blocks.dtype = DType::bf16;
  expect_rejected(c, "k_cache.blocks.dtype", "=bf16");
  Call c2;
  c2.a.k_cache.blocks.data = nullptr;
  expect_rejected(c2, "k_cache.blocks", "missing");
}

TEST(LightningIndexerValidation, CacheShape) {
  struct Case { int dim; std::int64_t value; std::string field; };
  for (const Case& k : {Case{1, 2, "k_cache.blocks.shape[1]"}, Case{4, 2, "k_cache.blocks.shape[4]"},
                        Case{5, 32, "k_cache.blocks.shape[5]"}, Case{3, 0, "k_cache.blocks.shape[3]"}}) {
    Call c;
    std::vector<std::int64_t> dims(c.a.k_cache.blocks.shape.begin(), c.a.k_cache.blocks.shape.begin() + 6);
    dims[k.dim] = k.value;
    set_shape(c.a.k_cache.blocks, dims);
    SCOPED_TRACE(k.field);
    expect_rejected(c, k.field, std::string("=") + std::to_string(k.value));
  }
}

TEST(LightningIndexerValidation, LayerIdx) {
  Call c;
  c.a.layer_idx = 2;
  expect_rejected(c, "layer_idx", "=2 (must be < num_layers=2)");
}

TEST(LightningIndexerValidation, Scales) {
  Call c;
  c.a.k_cache.scales.data = nullptr;
  expect_rejected(c, "k_cache.scales", "missing");
  Call c2;
  c2.a.k_cache.scales.dtype = DType::bf16;
  expect_rejected(c2, "k_cache.scales.dtype", "=bf16");
  Call c3;
  c3.a.k_cache.scales.shape[3] = 2;
  expect_rejected(c3, "k_cache.scales.shape", "expected");
}

TEST(LightningIndexerValidation, QuantGranularityBelowHeadDim) {
  Call c;
  c.a.k_cache.quant_granularity = 8;
  expect_rejected(c, "k_cache.quant_granularity", "=8 (must be >= 16)");
  Call c2;
  c2.a.k_cache.quant_granularity = 0;
  expect_rejected(c2, "k_cache.quant_granularity", "=0");
}

TEST(LightningIndexerValidation, LookupTable) {
  Call c;
  c.a.k_cache.lookup_table.dtype = DType::i32;
  expect_rejected(c, "k_cache.lookup_table.dtype", "=i32");
  Call c2;
  set_shape(c2.a.k_cache.lookup_table, {2, c2.a.k_cache.lookup_table.shape[1]});
  expect_rejected(c2, "k_cache.lookup_table.shape", "=[2, ");
  Call c3;
  c3.a.k_cache.lookup_table.memory = MemorySpace::device;
  expect_rejected(c3, "k_cache.lookup_table", "device memory");
}

TEST(LightningIndexerValidation, CacheLengths) {
  Call c;
  c.a.k_cache.cache_lengths.data = nullptr;
  expect_rejected(c, "k_cache.cache_lengths", "missing");
  Call c2;
  c2.a.k_cache.cache_lengths.dtype = DType::i32;
  expect_rejected(c2, "k_cache.cache_lengths.dtype", "=i32");
  Call c3;
  set_shape(c3.a.k_cache.cache_lengths, {2});
  expect_rejected(c3, "k_cache.cache_lengths.shape", "=[2]");
}

// ---- pages of every position read ----
TEST(LightningIndexerValidation, SentinelPageWhereAPositionIsRead) {
  Call c;
  c.lut(2, 1) = c.num_blocks();  // sequence 2 reads positions 0..5: page column 1 is needed
  expect_rejected(c, "k_cache.lookup_table[2, 1]", std::string("=") + std::to_string(c.num_blocks()));
}

TEST(LightningIndexerValidation, PageOutOfRange) {
  Call c;
  c.lut(0, 0) = c.num_blocks() + 5;
  expect_rejected(c, "k_cache.lookup_table[0, 0]", std::string("=") + std::to_string(c.num_blocks() + 5));
}

TEST(LightningIndexerValidation, PositionPastTheLookupTable) {
  Call c;
  // Sequence 0 would read 3 + 30 positions: more page columns than the table has (its sentinel
  // column is made a real page so that the table's width is what fails).
  c.lut(0, 2) = 0;
  c.b.at("k_cache.cache_lengths").data<std::uint32_t>()[0] = 30;
  expect_rejected(c, "k_cache.lookup_table", ".shape[1]=");
}

TEST(LightningIndexerValidation, PositionsMustFitInI32) {
  Call c;
  c.b.at("k_cache.cache_lengths").data<std::uint32_t>()[0] = std::numeric_limits<std::int32_t>::max();
  expect_rejected(c, "k_cache.cache_lengths[0]", "=2147483647");
}

TEST(LightningIndexerValidation, SequencesWithoutRowsNeedNoPages) {
  Call c;
  // Sequence 1 has no rows: its table row may be all sentinels, and its length anything.
  for (std::int64_t col = 0; col < c.b.at("k_cache.lookup_table").shape()[1]; ++col) c.lut(1, col) = c.num_blocks();
  c.b.at("k_cache.cache_lengths").data<std::uint32_t>()[1] = 4000000000u;
  const Status s = lightning_indexer(c.d, c.a);
  EXPECT_TRUE(s.ok()) << s.message;
}

TEST(LightningIndexerValidation, PagesAfterTheLastReadPositionAreNotNeeded) {
  Call c;
  // Sequence 2 reads positions 0..5 (pages 0, 1); columns after that may hold anything.
  for (std::int64_t col = 2; col < c.b.at("k_cache.lookup_table").shape()[1]; ++col) c.lut(2, col) = 0xFFFFFFFFu;
  const Status s = lightning_indexer(c.d, c.a);
  EXPECT_TRUE(s.ok()) << s.message;
}

// ---- output_indices ----
// Split rows (a bf16 tail after the codes, spec 06 §B) are op 4's; the indexer declines them, and
// e8m0 scales, by name.
TEST(LightningIndexerValidation, SplitRowsAndE8m0ScalesAreDeclined) {
  Call c;
  const auto& bl = c.a.k_cache.blocks.shape;
  const Tensor tail(DType::bf16, {bl[0], bl[1], bl[2], bl[3], bl[4], 8});
  c.a.k_cache.tail = tail.view();
  const std::map<std::string, Tensor> before = c.b.tensors;
  const Status s = lightning_indexer(c.d, c.a);
  EXPECT_EQ(s.code, StatusCode::unsupported) << s.message;
  EXPECT_EQ(s.field, "k_cache.tail") << s.message;
  EXPECT_NE(s.message.find("split rows with a bf16 tail are read by sparse_mla_prefill only"), std::string::npos) << s.message;
  for (const auto& [name, t] : before) EXPECT_TRUE(c.b.at(name).same_bytes(t)) << name;
  Call e;
  e.a.k_cache.scales.dtype = DType::e8m0;
  expect_rejected(e, "k_cache.scales.dtype", "=e8m0 (expected f32)");
}

TEST(LightningIndexerValidation, Output) {
  Call c;
  c.a.output_indices.data = nullptr;
  expect_rejected(c, "output_indices", "missing");
  Call c2;
  c2.a.output_indices.dtype = DType::u32;
  expect_rejected(c2, "output_indices.dtype", "=u32");
  Call c3;
  set_shape(c3.a.output_indices, {5, 3});
  expect_rejected(c3, "output_indices.shape", "=[5, 3] (expected [5, 4])");
  Call c4;
  set_shape(c4.a.output_indices, {4, 4});
  expect_rejected(c4, "output_indices.shape", "=[4, 4]");
}

TEST(LightningIndexerValidation, OutputMayNotOverlapAnyInput) {
  const std::vector<std::pair<std::string, TensorView LightningIndexerArgs::*>> inputs = {
      {"q", &LightningIndexerArgs::q}, {"q_s", &LightningIndexerArgs::q_s},
      {"input_row_offsets", &LightningIndexerArgs::input_row_offsets}};
  const std::vector<std::pair<std::string, TensorView PagedKVCacheView::*>> cache_parts = {
      {"k_cache.blocks", &PagedKVCacheView::blocks}, {"k_cache.scales", &PagedKVCacheView::scales},
      {"k_cache.lookup_table", &PagedKVCacheView::lookup_table},
      {"k_cache.cache_lengths", &PagedKVCacheView::cache_lengths}};
  // The output view starts inside the input, moved alone into a buffer with room for the whole
  // output, so that it overlaps that input and nothing else.
  const auto check = [](Call& c, TensorView& input, const std::string& name) {
    SCOPED_TRACE(name);
    Tensor room;
    c.a.output_indices.data = test_support::move_alone(input, room, c.a.output_indices.size_bytes() + 4) + 4;
    expect_rejected(c, "output_indices", "overlaps " + name);
  };
  for (const auto& [name, member] : inputs) {
    Call c;
    check(c, c.a.*member, name);
  }
  for (const auto& [name, member] : cache_parts) {
    Call c;
    check(c, c.a.k_cache.*member, name);
  }
}

TEST(LightningIndexerValidation, OneMemorySpace) {
  Call c;
  c.a.output_indices.memory = MemorySpace::device;
  expect_rejected(c, "output_indices", "is in device memory but q is in host memory");
  Call c2;
  c2.a.k_cache.blocks.memory = MemorySpace::device;
  expect_rejected(c2, "k_cache.blocks", "is in device memory but q is in host memory");
}

TEST(LightningIndexerValidation, EveryBackendValidates) {
  for (Backend be : {Backend::automatic, Backend::reference, Backend::cpu}) {
    Call c;
    c.lut(0, 1) = c.num_blocks();
    const std::map<std::string, Tensor> before = c.b.tensors;
    RunOptions o;
    o.backend = be;
    const Status s = lightning_indexer(c.d, c.a, o);
    EXPECT_EQ(s.code, StatusCode::invalid_argument) << backend_name(be);
    for (const auto& [name, t] : before) EXPECT_TRUE(c.b.at(name).same_bytes(t)) << name;
  }
}

}  // namespace
}  // namespace mlakit
