// One test per validated field or rule of op 4 (sparse MLA prefill): the status code, a message that
// names the operator, the field and the value, and nothing written (outputs, cache, every input).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "goldens/common/driver.hpp"
#include "support/lone_buffer.hpp"
#include "mlakit/ops/sparse_mla_prefill.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::Tensor;
using goldens::json;

// Row-major strides for a view whose shape a test changed (so that only the shape is wrong).
void restride(TensorView& v) {
  std::int64_t s = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.strides[i] = s;
    s *= v.shape[i];
  }
}

class SparseMlaPrefillValidation : public ::testing::Test {
 protected:
  void SetUp() override { make(false); }

  // T 3, Hq 2, qk 40, v 24, stride 8, page 5, two layers (layer_idx 1), sink and lengths present;
  // `split`: fp8 rows of 32 codes with e8m0 scales per 16 and a bf16 tail of 8 (spec 06 §B).
  void make(bool fp8, bool split = false) {
    const auto* drv = goldens::find_driver("sparse_mla_prefill");
    ASSERT_NE(drv, nullptr);
    const json knobs = {{"T", 3}, {"num_q_heads", 2}, {"qk_depth", 40}, {"v_depth", 24}, {"indices_stride", 8},
                        {"page_size", 5}, {"seq_lens", json::array({12, 9})}, {"sink", true},
                        {"topk_lengths", "random"}, {"cache_dtype", fp8 ? "f8e4m3" : "bf16"}, {"num_layers", 2},
                        {"layer_idx", 1}};
    json k = knobs;
    if (split) k.update({{"tail_size", 8}, {"quant_granularity", 16}, {"scale_dtype", "e8m0"}});
    b = drv->generate(k, 1);
    d.num_q_heads = 2;
    d.qk_depth = 40;
    d.v_depth = 24;
    d.indices_stride = 8;
    d.scale = b.params.at("scale").get<float>();
    b.add("out.output", DType::bf16, {3, 2, 24}).poison();
    b.add("out.lse", DType::f32, {3, 2}).poison();
    b.add("out.max_logits", DType::f32, {3, 2}).poison();
    a = SparseMlaPrefillArgs{};
    a.q = b.at("q").view();
    a.kv_cache = goldens::cache_view(b, "kv_cache", split ? 16 : fp8 ? 40 : 0);
    a.layer_idx = 1;
    a.indices = b.at("indices").view();
    a.topk_lengths = b.at("topk_lengths").view();
    a.attn_sink = b.at("attn_sink").view();
    a.output = b.at("out.output").view();
    a.lse = b.at("out.lse").view();
    a.max_logits = b.at("out.max_logits").view();
    before = b.tensors;
  }

  void expect_rejected(const std::string& field, const std::string& value) {
    const Status s = sparse_mla_prefill(d, a);
    EXPECT_EQ(s.code, StatusCode::invalid_argument) << s.message;
    EXPECT_EQ(s.op, "sparse_mla_prefill");
    EXPECT_EQ(s.field, field) << s.message;
    EXPECT_EQ(s.message.rfind("sparse_mla_prefill: " + field, 0), 0u) << s.message;
    EXPECT_NE(s.message.find(value), std::string::npos) << "'" << value << "' not in: " << s.message;
    for (const auto& [name, t] : before) EXPECT_TRUE(b.at(name).same_bytes(t)) << name << " was modified";
  }

  // The start of a private buffer holding input `v` alone, with room for any written view after
  // it, so that a view pointed into it overlaps this input and nothing else.
  std::uint8_t* alone(TensorView& v) { return test_support::move_alone(v, scratch, 4096); }

  Bundle b;
  Tensor scratch;
  SparseMlaPrefillDesc d;
  SparseMlaPrefillArgs a;
  std::map<std::string, Tensor> before;
};

TEST_F(SparseMlaPrefillValidation, TheBaseCallIsValidAndWritesEveryOutputElement) {
  ASSERT_TRUE(sparse_mla_prefill(d, a).ok());
  for (std::int64_t i = 0; i < b.at("out.output").numel(); ++i)
    EXPECT_NE(b.at("out.output").data<std::uint16_t>()[i], 0x7FA5) << "poison left at " << i;
  for (std::int64_t i = 0; i < b.at("out.lse").numel(); ++i) EXPECT_FALSE(std::isnan(b.at("out.lse").value(i)));
  // The poison pattern is a NaN in f32: every max_logits element was written (a finite m, or -inf).
  for (std::int64_t i = 0; i < b.at("out.max_logits").numel(); ++i)
    EXPECT_FALSE(std::isnan(b.at("out.max_logits").value(i))) << i;
}

TEST_F(SparseMlaPrefillValidation, TheFp8BaseCallIsValid) {
  make(true);
  EXPECT_TRUE(sparse_mla_prefill(d, a).ok());
}

TEST_F(SparseMlaPrefillValidation, LookupTableAndCacheLengthsAreOptional) {
  a.kv_cache.lookup_table = TensorView{};
  a.kv_cache.cache_lengths = TensorView{};
  EXPECT_TRUE(sparse_mla_prefill(d, a).ok());
}

// ---- descriptor -----------------------------------------------------------------------------
TEST_F(SparseMlaPrefillValidation, NumQHeads) { d.num_q_heads = 0; expect_rejected("num_q_heads", "=0 (must be > 0)"); }
TEST_F(SparseMlaPrefillValidation, QkDepth) { d.qk_depth = -4; expect_rejected("qk_depth", "=-4 (must be > 0)"); }
TEST_F(SparseMlaPrefillValidation, VDepth) { d.v_depth = 0; expect_rejected("v_depth", "=0 (must be > 0)"); }
TEST_F(SparseMlaPrefillValidation, VDepthAboveQkDepth) {
  d.v_depth = 41;
  expect_rejected("v_depth", "=41 (must be <= qk_depth=40)");
}
TEST_F(SparseMlaPrefillValidation, IndicesStride) { d.indices_stride = 0; expect_rejected("indices_stride", "=0 (must be > 0)"); }
TEST_F(SparseMlaPrefillValidation, ScaleNaN) {
  d.scale = std::numeric_limits<float>::quiet_NaN();
  expect_rejected("scale", "=nan (must be finite;");
}
TEST_F(SparseMlaPrefillValidation, ScaleHasNoDefault) {
  d.scale = SparseMlaPrefillDesc{}.scale;
  expect_rejected("scale", "it has no default: set the model's softmax scale, 1/sqrt(192) for DeepSeek-V3.2");
}
TEST_F(SparseMlaPrefillValidation, ScaleInfinite) {
  d.scale = -std::numeric_limits<float>::infinity();
  expect_rejected("scale", "=-inf (must be finite)");
}

// ---- q ----------------------------------------------------------------------------------------
TEST_F(SparseMlaPrefillValidation, QMissing) { a.q.data = nullptr; expect_rejected("q", "missing"); }
TEST_F(SparseMlaPrefillValidation, QDtype) { a.q.dtype = DType::f32; expect_rejected("q.dtype", "=f32 (expected bf16)"); }
TEST_F(SparseMlaPrefillValidation, QRank) { a.q.rank = 2; expect_rejected("q.rank", "=2"); }
TEST_F(SparseMlaPrefillValidation, QHeads) { a.q.shape[1] = 3; expect_rejected("q.shape", "=[3, 3, 40] (expected [*, 2, 40])"); }
TEST_F(SparseMlaPrefillValidation, QDepth) { a.q.shape[2] = 20; restride(a.q); expect_rejected("q.shape", "=[3, 2, 20]"); }
TEST_F(SparseMlaPrefillValidation, QStrides) { a.q.strides[1] = 80; expect_rejected("q.strides", "not row-major"); }

// ---- cache --------------------------------------------------------------------------------------
TEST_F(SparseMlaPrefillValidation, BlocksMissing) { a.kv_cache.blocks.data = nullptr; expect_rejected("kv_cache.blocks", "missing"); }
TEST_F(SparseMlaPrefillValidation, BlocksDtype) {
  a.kv_cache.blocks.dtype = DType::f32;
  expect_rejected("kv_cache.blocks.dtype", "=f32 (expected bf16 or f8e4m3)");
}
TEST_F(SparseMlaPrefillValidation, BlocksRank) { a.kv_cache.blocks.rank = 5; expect_rejected("kv_cache.blocks.rank", "=5"); }
TEST_F(SparseMlaPrefillValidation, KvDim) {
  // Same element count, two K/V planes: an ordinary cache is not an MLA cache.
  a.kv_cache.blocks.shape[1] = 2;
  a.kv_cache.blocks.shape[2] = 1;
  restride(a.kv_cache.blocks);
  expect_rejected("kv_cache.blocks.shape[1]", "=2 (kv_dim must be 1)");
}
TEST_F(SparseMlaPrefillValidation, NumKvHeads) {
  a.kv_cache.blocks.shape[4] = 2;
  a.kv_cache.blocks.shape[5] = 20;
  restride(a.kv_cache.blocks);
  expect_rejected("kv_cache.blocks.shape[4]", "=2 (num_kv_heads must be 1)");
}
TEST_F(SparseMlaPrefillValidation, HeadSize) {
  d.qk_depth = 36;  // q keeps 40 columns, so make q agree first
  a.q.shape[2] = 36;
  restride(a.q);
  expect_rejected("kv_cache.blocks.shape[5]", "=40 (head_size must be 36)");
}
TEST_F(SparseMlaPrefillValidation, LayerIdx) { a.layer_idx = 2; expect_rejected("layer_idx", "=2 (must be < num_layers=2)"); }
TEST_F(SparseMlaPrefillValidation, ScalesOnABf16Cache) {
  Tensor s(DType::f32, {1});
  a.kv_cache.scales = s.view();
  expect_rejected("kv_cache.scales", "is present");
}
TEST_F(SparseMlaPrefillValidation, Fp8WithoutScales) {
  make(true);
  a.kv_cache.scales = TensorView{};
  expect_rejected("kv_cache.scales", "missing");
}
TEST_F(SparseMlaPrefillValidation, Fp8GranularityZero) {
  make(true);
  a.kv_cache.quant_granularity = 0;
  expect_rejected("kv_cache.quant_granularity", "=0 (must be >= 1)");
}
TEST_F(SparseMlaPrefillValidation, Fp8ScalesShape) {
  make(true);
  a.kv_cache.scales.shape[3] = 4;
  expect_rejected("kv_cache.scales.shape", "(expected [");
}
TEST_F(SparseMlaPrefillValidation, Fp8ScalesDtype) {
  make(true);
  a.kv_cache.scales.dtype = DType::bf16;
  expect_rejected("kv_cache.scales.dtype", "=bf16 (expected f32 or e8m0)");
}

// Split rows (FlashMLA's V32 / MODEL1 caches): an f8e4m3 part with f32 or e8m0 scales and a bf16 tail.
TEST_F(SparseMlaPrefillValidation, TheSplitRowBaseCallIsValid) {
  make(true, true);
  ASSERT_EQ(a.kv_cache.scales.dtype, DType::e8m0);
  ASSERT_EQ(a.kv_cache.tail_size(), 8);
  EXPECT_TRUE(sparse_mla_prefill(d, a).ok());
}
TEST_F(SparseMlaPrefillValidation, TailAfterBf16Rows) {
  const Tensor tail(DType::bf16, {a.kv_cache.blocks.shape[0], 1, 2, 5, 1, 8});
  a.kv_cache.tail = tail.view();
  expect_rejected("kv_cache.tail", "is present with kv_cache.blocks.dtype=bf16 (a tail follows an f8e4m3");
}
TEST_F(SparseMlaPrefillValidation, TailDtype) {
  make(true, true);
  a.kv_cache.tail.dtype = DType::f32;
  expect_rejected("kv_cache.tail.dtype", "=f32 (expected bf16)");
}
TEST_F(SparseMlaPrefillValidation, TailShape) {
  make(true, true);
  a.kv_cache.tail.shape[3] = 4;
  restride(a.kv_cache.tail);
  expect_rejected("kv_cache.tail.shape", "(expected [");
}
TEST_F(SparseMlaPrefillValidation, TailRowNotContiguous) {
  make(true, true);
  a.kv_cache.tail.strides[5] = 2;
  expect_rejected("kv_cache.tail.strides", "(each row must be contiguous: the last stride must be 1)");
}
TEST_F(SparseMlaPrefillValidation, SplitRowWidthIsNotQkDepth) {
  make(true, true);
  a.kv_cache.tail.shape[5] = 7;
  expect_rejected("kv_cache.blocks.shape[5] + kv_cache.tail.shape[5]", "=32 + 7 (head_size must be 40)");
}
TEST_F(SparseMlaPrefillValidation, SplitRowGranularityMustDivideTheQuantizedPart) {
  make(true, true);
  a.kv_cache.quant_granularity = 12;
  expect_rejected("kv_cache.quant_granularity", "=12 (must divide the quantized part of a split row, "
                                                "kv_cache.blocks.shape[5]=32)");
}
TEST_F(SparseMlaPrefillValidation, SplitRowScalesShape) {
  make(true, true);
  a.kv_cache.quant_granularity = 8;  // four scales per row wanted, two given
  expect_rejected("kv_cache.scales.shape", "(expected [");
}
TEST_F(SparseMlaPrefillValidation, MisalignedF32Scales) {
  make(true);
  a.kv_cache.scales.data = alone(a.kv_cache.scales) + 2;
  expect_rejected("kv_cache.scales.data", "is not aligned to its element size 4");
}
TEST_F(SparseMlaPrefillValidation, MisalignedTail) {
  make(true, true);
  a.kv_cache.tail.data = alone(a.kv_cache.tail) + 1;
  expect_rejected("kv_cache.tail.data", "is not aligned to its element size 2");
}
TEST_F(SparseMlaPrefillValidation, OutputOverlapsTheTail) {
  make(true, true);
  a.output.data = alone(a.kv_cache.tail) + 6;
  expect_rejected("output", "overlaps kv_cache.tail");
}
TEST_F(SparseMlaPrefillValidation, LookupTableDtype) {
  a.kv_cache.lookup_table.dtype = DType::i32;
  expect_rejected("kv_cache.lookup_table.dtype", "=i32 (expected u32)");
}
TEST_F(SparseMlaPrefillValidation, LookupTableRank) {
  a.kv_cache.lookup_table.rank = 1;
  expect_rejected("kv_cache.lookup_table.rank", "=1");
}
TEST_F(SparseMlaPrefillValidation, CacheLengthsShape) {
  a.kv_cache.cache_lengths.shape[0] = 3;
  expect_rejected("kv_cache.cache_lengths.shape", "=[3] (expected [2])");
}
TEST_F(SparseMlaPrefillValidation, CacheLengthsDtype) {
  a.kv_cache.cache_lengths.dtype = DType::f32;
  expect_rejected("kv_cache.cache_lengths.dtype", "=f32 (expected u32)");
}

// ---- indices, lengths, sink -----------------------------------------------------------------------
TEST_F(SparseMlaPrefillValidation, IndicesMissing) { a.indices.data = nullptr; expect_rejected("indices", "missing"); }
TEST_F(SparseMlaPrefillValidation, IndicesDtype) {
  a.indices.dtype = DType::f32;
  expect_rejected("indices.dtype", "=f32 (expected i32 or u32)");
}
TEST_F(SparseMlaPrefillValidation, IndicesStrideMismatch) {
  d.indices_stride = 7;
  expect_rejected("indices.shape", "=[3, 8] (expected [3, 7])");
}
TEST_F(SparseMlaPrefillValidation, IndicesRows) {
  a.indices.shape[0] = 2;
  expect_rejected("indices.shape", "=[2, 8] (expected [3, 8])");
}
TEST_F(SparseMlaPrefillValidation, TopkLengthsDtype) {
  a.topk_lengths.dtype = DType::i32;
  expect_rejected("topk_lengths.dtype", "=i32 (expected u32)");
}
TEST_F(SparseMlaPrefillValidation, TopkLengthsShape) {
  a.topk_lengths.shape[0] = 2;
  expect_rejected("topk_lengths.shape", "=[2] (expected [3])");
}
TEST_F(SparseMlaPrefillValidation, TopkLengthAboveStride) {
  b.at("topk_lengths").data<std::uint32_t>()[1] = 9;
  before = b.tensors;
  expect_rejected("topk_lengths[1]", "=9 (must be <= indices_stride=8)");
}
TEST_F(SparseMlaPrefillValidation, TopkLengthAtStrideIsValid) {
  b.at("topk_lengths").data<std::uint32_t>()[2] = 8;
  EXPECT_TRUE(sparse_mla_prefill(d, a).ok());
}
TEST_F(SparseMlaPrefillValidation, AttnSinkDtype) {
  a.attn_sink.dtype = DType::bf16;
  expect_rejected("attn_sink.dtype", "=bf16 (expected f32)");
}
TEST_F(SparseMlaPrefillValidation, AttnSinkShape) {
  a.attn_sink.shape[0] = 1;
  expect_rejected("attn_sink.shape", "=[1] (expected [2])");
}

// ---- outputs ----------------------------------------------------------------------------------
TEST_F(SparseMlaPrefillValidation, OutputMissing) { a.output.data = nullptr; expect_rejected("output", "missing"); }
TEST_F(SparseMlaPrefillValidation, OutputDtype) {
  a.output.dtype = DType::f32;
  expect_rejected("output.dtype", "=f32 (expected bf16)");
}
TEST_F(SparseMlaPrefillValidation, OutputShape) {
  a.output.shape[2] = 20;
  restride(a.output);
  expect_rejected("output.shape", "=[3, 2, 20] (expected [3, 2, 24])");
}
TEST_F(SparseMlaPrefillValidation, LseDtype) { a.lse.dtype = DType::bf16; expect_rejected("lse.dtype", "=bf16 (expected f32)"); }
TEST_F(SparseMlaPrefillValidation, LseShape) {
  a.lse.shape[1] = 1;
  restride(a.lse);
  expect_rejected("lse.shape", "=[3, 1] (expected [3, 2])");
}
TEST_F(SparseMlaPrefillValidation, MaxLogitsDtype) {
  a.max_logits.dtype = DType::bf16;
  expect_rejected("max_logits.dtype", "=bf16 (expected f32)");
}
TEST_F(SparseMlaPrefillValidation, MaxLogitsShape) {
  a.max_logits.shape[0] = 2;
  restride(a.max_logits);
  expect_rejected("max_logits.shape", "=[2, 2] (expected [3, 2])");
}

// ---- aliasing and memory spaces ---------------------------------------------------------------------
TEST_F(SparseMlaPrefillValidation, OutputOverlapsQ) {
  a.output.data = a.q.data;
  expect_rejected("output", "overlaps q");
}
TEST_F(SparseMlaPrefillValidation, OutputOverlapsTheCache) {
  a.output.data = a.kv_cache.blocks.as<std::uint16_t>() + 10;
  expect_rejected("output", "overlaps kv_cache.blocks");
}
TEST_F(SparseMlaPrefillValidation, OutputOverlapsIndices) {
  a.output.data = alone(a.indices) + 2;
  expect_rejected("output", "overlaps indices");
}
TEST_F(SparseMlaPrefillValidation, LseOverlapsTheSink) {
  a.lse.data = alone(a.attn_sink);
  expect_rejected("lse", "overlaps attn_sink");
}
TEST_F(SparseMlaPrefillValidation, LseOverlapsTopkLengths) {
  a.lse.data = alone(a.topk_lengths) + 4;
  expect_rejected("lse", "overlaps topk_lengths");
}
TEST_F(SparseMlaPrefillValidation, LseOverlapsOutput) {
  a.lse.data = a.output.as<std::uint16_t>() + 4;
  expect_rejected("lse", "overlaps output");
}
TEST_F(SparseMlaPrefillValidation, MaxLogitsOverlapsQ) {
  a.max_logits.data = a.q.data;
  expect_rejected("max_logits", "overlaps q");
}
TEST_F(SparseMlaPrefillValidation, MaxLogitsOverlapsLse) {
  a.max_logits.data = alone(a.lse) + 4;
  expect_rejected("max_logits", "overlaps lse");
}
TEST_F(SparseMlaPrefillValidation, MaxLogitsInDeviceMemory) {
  a.max_logits.memory = MemorySpace::device;
  expect_rejected("max_logits", "is in device memory but q is in host memory");
}
TEST_F(SparseMlaPrefillValidation, MixedMemorySpaces) {
  a.attn_sink.memory = MemorySpace::device;
  expect_rejected("attn_sink", "is in device memory but q is in host memory");
}
TEST_F(SparseMlaPrefillValidation, CudaBackendOnHostMemory) {
  const Status s = sparse_mla_prefill(d, a, RunOptions{Backend::cuda});
  EXPECT_EQ(s.code, StatusCode::invalid_argument) << s.message;
  EXPECT_EQ(s.field, "backend");
  EXPECT_NE(s.message.find("sparse_mla_prefill: backend=cuda"), std::string::npos) << s.message;
  for (const auto& [name, t] : before) EXPECT_TRUE(b.at(name).same_bytes(t)) << name << " was modified";
}

}  // namespace
}  // namespace mlakit
