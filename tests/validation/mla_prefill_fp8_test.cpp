// mla_prefill_fp8: every validation rule rejects with invalid_argument, names the operator, the field
// and the value, and leaves the output, q and the cache byte-for-byte untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "goldens/common/driver.hpp"
#include "support/lone_buffer.hpp"
#include "mlakit/ops/mla_prefill_fp8.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;
using std::int64_t;

const goldens::OpDriver& driver() { return *goldens::find_driver("mla_prefill_fp8"); }

// A valid call on generated data: two sequences with a prefix, a chunked window, 2 layers.
class MlaPrefillFp8Validation : public ::testing::Test {
 protected:
  void SetUp() override { make(json::object()); }

  void make(const json& extra) {
    json knobs = {{"seq_lens", {3, 4}}, {"cache_lens", {5, 2}}, {"num_layers", 2}, {"layer_idx", 1},
                  {"cache_offsets", "chunked"}};
    for (auto it = extra.begin(); it != extra.end(); ++it) knobs[it.key()] = it.value();
    b = driver().generate(knobs, 11);
    const int64_t T = b.at("q").shape()[0];
    d.num_heads = b.params["num_heads"];
    d.nope = b.params["nope"];
    d.rope = b.params["rope"];
    d.v = b.params["v"];
    d.latent = b.params["latent"];
    d.bn = b.params["bn"];
    d.bk = b.params["bk"];
    d.scale = static_cast<float>(b.params["scale"].get<double>());
    d.epsilon = static_cast<float>(b.params["epsilon"].get<double>());
    b.add("out.output", DType::bf16, {T, d.num_heads, d.v}).poison();
    b.copy_to_output("q");
    b.copy_to_output("kv_cache.blocks");
    a = MlaPrefillFp8Args{};
    a.q = b.at("out.q").view();
    a.input_row_offsets = b.at("input_row_offsets").view();
    a.freqs_cis = b.at("freqs_cis").view();
    a.kv_norm_gamma = b.at("kv_norm_gamma").view();
    a.kv_cache = goldens::cache_view(b, "kv_cache", 0, "out.kv_cache.blocks");
    a.layer_idx = static_cast<std::uint32_t>(b.params["layer_idx"].get<int64_t>());
    a.buffer_row_offsets = b.at("buffer_row_offsets").view();
    a.cache_offsets = b.at("cache_offsets").view();
    a.buffer_length = b.params["buffer_length"];
    a.kv_b_proj = b.at("kv_b_proj").view();
    a.kv_b_proj_scale = b.at("kv_b_proj_scale").view();
    a.output = b.at("out.output").view();
  }

  // A tensor owned by the fixture (kept alive for the call).
  TensorView scratch(DType t, std::vector<int64_t> shape) {
    extra_.push_back(Tensor(t, std::move(shape)));
    return extra_.back().view();
  }
  std::uint32_t* u32(const char* name) { return b.at(name).data<std::uint32_t>(); }

  // The call must fail with invalid_argument, naming the op, `field` and `value`, writing nothing.
  void expect_rejected(const std::string& field, const std::string& value) {
    const Tensor out0 = b.at("out.output"), q0 = b.at("out.q"), blocks0 = b.at("out.kv_cache.blocks");
    const Status s = mla_prefill_fp8(d, a);
    EXPECT_EQ(s.code, StatusCode::invalid_argument) << s.message;
    EXPECT_EQ(s.op, "mla_prefill_fp8");
    EXPECT_EQ(s.message.rfind("mla_prefill_fp8: ", 0), 0u) << s.message;
    EXPECT_NE(s.message.find(field), std::string::npos) << "field '" << field << "' not in: " << s.message;
    EXPECT_NE(s.message.find(value), std::string::npos) << "value '" << value << "' not in: " << s.message;
    EXPECT_NE(s.field.find(field.substr(0, field.find('['))), std::string::npos) << s.field;
    EXPECT_TRUE(b.at("out.output").same_bytes(out0)) << "output written on a rejected call";
    EXPECT_TRUE(b.at("out.q").same_bytes(q0)) << "q written on a rejected call";
    EXPECT_TRUE(b.at("out.kv_cache.blocks").same_bytes(blocks0)) << "cache written on a rejected call";
  }

  Bundle b;
  MlaPrefillFp8Desc d;
  MlaPrefillFp8Args a;
  std::vector<Tensor> extra_;
};

TEST_F(MlaPrefillFp8Validation, ValidCallSucceedsAndWrites) {
  const Tensor out0 = b.at("out.output");
  const Status s = mla_prefill_fp8(d, a);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_FALSE(b.at("out.output").same_bytes(out0));
}

// ---- descriptor --------------------------------------------------------------------------------
// Split rows (spec 06 §B) are op 4's: op 3 writes whole bf16 rows and declines a tail by name.
TEST_F(MlaPrefillFp8Validation, SplitRowsAreDeclined) {
  const auto& bl = a.kv_cache.blocks.shape;
  const Tensor tail(DType::bf16, {bl[0], bl[1], bl[2], bl[3], bl[4], 8});
  a.kv_cache.tail = tail.view();
  const Tensor out0 = b.at("out.output"), q0 = b.at("out.q"), blocks0 = b.at("out.kv_cache.blocks");
  const Status s = mla_prefill_fp8(d, a);
  EXPECT_EQ(s.code, StatusCode::unsupported) << s.message;
  EXPECT_EQ(s.field, "kv_cache.tail") << s.message;
  EXPECT_TRUE(b.at("out.output").same_bytes(out0));
  EXPECT_TRUE(b.at("out.q").same_bytes(q0));
  EXPECT_TRUE(b.at("out.kv_cache.blocks").same_bytes(blocks0));
}
TEST_F(MlaPrefillFp8Validation, NumHeadsPositive) { d.num_heads = 0; expect_rejected("num_heads", "=0"); }
TEST_F(MlaPrefillFp8Validation, NopePositive) { d.nope = -3; expect_rejected("nope", "=-3"); }
TEST_F(MlaPrefillFp8Validation, RopePositive) { d.rope = 0; expect_rejected("rope", "=0"); }
TEST_F(MlaPrefillFp8Validation, RopeEven) { d.rope = 7; expect_rejected("rope", "=7"); }
TEST_F(MlaPrefillFp8Validation, VPositive) { d.v = 0; expect_rejected("v", "=0"); }
TEST_F(MlaPrefillFp8Validation, LatentPositive) { d.latent = 0; expect_rejected("latent", "=0"); }
TEST_F(MlaPrefillFp8Validation, BnPositive) { d.bn = 0; expect_rejected("bn", "=0"); }
TEST_F(MlaPrefillFp8Validation, BkPositive) { d.bk = -1; expect_rejected("bk", "=-1"); }
TEST_F(MlaPrefillFp8Validation, DimensionsBounded) { d.latent = int64_t{1} << 40; expect_rejected("latent", "=1099511627776"); }
TEST_F(MlaPrefillFp8Validation, ScaleFinite) {
  d.scale = std::numeric_limits<float>::quiet_NaN();
  expect_rejected("scale", "=nan");
  d.scale = std::numeric_limits<float>::infinity();
  expect_rejected("scale", "=inf");
}
TEST_F(MlaPrefillFp8Validation, EpsilonPositive) {
  d.epsilon = 0;
  expect_rejected("epsilon", "=0");
  d.epsilon = -1e-6f;
  expect_rejected("epsilon", "=-0.000001");
  d.epsilon = std::numeric_limits<float>::infinity();
  expect_rejected("epsilon", "=inf");
}

// ---- tensors -----------------------------------------------------------------------------------
TEST_F(MlaPrefillFp8Validation, QPresent) { a.q.data = nullptr; expect_rejected("q", "missing"); }
TEST_F(MlaPrefillFp8Validation, QDtype) { a.q.dtype = DType::f16; expect_rejected("q.dtype", "=f16"); }
TEST_F(MlaPrefillFp8Validation, QShape) {
  a.q = scratch(DType::bf16, {7, d.num_heads + 1, d.nope + d.rope});
  expect_rejected("q.shape", "=[7, 4, 24]");
}
TEST_F(MlaPrefillFp8Validation, QContiguous) { a.q.strides[0] += 1; expect_rejected("q.strides", "not row-major"); }
TEST_F(MlaPrefillFp8Validation, InputRowOffsetsStartAtZero) {
  u32("input_row_offsets")[0] = 1;
  expect_rejected("input_row_offsets[0]", "=1");
}
TEST_F(MlaPrefillFp8Validation, InputRowOffsetsNonDecreasing) {
  u32("input_row_offsets")[1] = 8;
  expect_rejected("input_row_offsets[2]", "=7 < input_row_offsets[1]=8");
}
TEST_F(MlaPrefillFp8Validation, InputRowOffsetsEndAtT) {
  u32("input_row_offsets")[2] = 6;
  expect_rejected("input_row_offsets[2]", "=6");
}
TEST_F(MlaPrefillFp8Validation, InputRowOffsetsDtype) {
  a.input_row_offsets.dtype = DType::i32;
  expect_rejected("input_row_offsets.dtype", "=i32");
}
TEST_F(MlaPrefillFp8Validation, FreqsDtype) { a.freqs_cis.dtype = DType::f16; expect_rejected("freqs_cis.dtype", "=f16"); }
TEST_F(MlaPrefillFp8Validation, FreqsShape) {
  a.freqs_cis = scratch(DType::bf16, {40, d.rope + 2});
  expect_rejected("freqs_cis.shape", "=[40, 10]");
}
TEST_F(MlaPrefillFp8Validation, FreqsCoverEveryNewPosition) {
  // Sequence 0 has new tokens at positions 5..7: 7 rows are one too few.
  a.freqs_cis = scratch(DType::f32, {7, d.rope});
  expect_rejected("freqs_cis.shape[0]", "=7");
}
TEST_F(MlaPrefillFp8Validation, GammaShape) {
  a.kv_norm_gamma = scratch(DType::bf16, {d.latent - 1});
  expect_rejected("kv_norm_gamma.shape", "=[79]");
}
TEST_F(MlaPrefillFp8Validation, GammaDtype) { a.kv_norm_gamma.dtype = DType::f32; expect_rejected("kv_norm_gamma.dtype", "=f32"); }

// ---- the cache ---------------------------------------------------------------------------------
TEST_F(MlaPrefillFp8Validation, CacheDtype) {
  a.kv_cache.blocks.dtype = DType::f32;
  expect_rejected("kv_cache.blocks.dtype", "=f32");
}
TEST_F(MlaPrefillFp8Validation, CacheKvDimIsOne) {
  auto& bl = a.kv_cache.blocks;
  a.kv_cache.blocks = scratch(DType::bf16, {bl.shape[0], 2, bl.shape[2], bl.shape[3], 1, bl.shape[5]});
  expect_rejected("kv_cache.blocks.shape[1]", "=2");
}
TEST_F(MlaPrefillFp8Validation, CacheHasOneHead) {
  auto& bl = a.kv_cache.blocks;
  a.kv_cache.blocks = scratch(DType::bf16, {bl.shape[0], 1, bl.shape[2], bl.shape[3], 2, bl.shape[5]});
  expect_rejected("kv_cache.blocks.shape[4]", "=2");
}
TEST_F(MlaPrefillFp8Validation, CacheHeadSizeIsLatentPlusRope) {
  auto& bl = a.kv_cache.blocks;
  a.kv_cache.blocks = scratch(DType::bf16, {bl.shape[0], 1, bl.shape[2], bl.shape[3], 1, d.latent});
  expect_rejected("kv_cache.blocks.shape[5]", "=80");
}
TEST_F(MlaPrefillFp8Validation, CacheTakesNoScales) {
  auto& bl = a.kv_cache.blocks;
  a.kv_cache.scales = scratch(DType::f32, {bl.shape[0], 1, bl.shape[2], bl.shape[3], 1, 1});
  expect_rejected("kv_cache.scales", "present");
}
TEST_F(MlaPrefillFp8Validation, LayerIdxInRange) { a.layer_idx = 2; expect_rejected("layer_idx", "=2"); }
TEST_F(MlaPrefillFp8Validation, LookupTableBatch) {
  a.kv_cache.lookup_table = scratch(DType::u32, {3, 4});
  expect_rejected("kv_cache.lookup_table.shape", "=[3, 4]");
}
TEST_F(MlaPrefillFp8Validation, CacheLengthsShape) {
  a.kv_cache.cache_lengths = scratch(DType::u32, {3});
  expect_rejected("kv_cache.cache_lengths.shape", "=[3]");
}
TEST_F(MlaPrefillFp8Validation, NewTokenNeedsAPage) {
  // Sequence 1: 2 cached + 4 new tokens, page 8: positions 2..5 on page column 0.
  const int64_t cols = a.kv_cache.lookup_table.shape[1], num_blocks = a.kv_cache.num_blocks();
  b.at("kv_cache.lookup_table").data<std::uint32_t>()[cols + 0] = static_cast<std::uint32_t>(num_blocks);
  expect_rejected("kv_cache.lookup_table[1, 0]", "=" + std::to_string(num_blocks));
}
TEST_F(MlaPrefillFp8Validation, NewTokenPageOutOfRange) {
  b.at("kv_cache.lookup_table").data<std::uint32_t>()[0] = 1000;
  expect_rejected("kv_cache.lookup_table[0, 0]", "=1000");
}
TEST_F(MlaPrefillFp8Validation, NewTokenPastTheLookupTable) {
  // Sequence 0 claims a prefix of 40 tokens: its new positions need page column 5.
  u32("kv_cache.cache_lengths")[0] = 40;
  a.freqs_cis = scratch(DType::bf16, {64, d.rope});
  expect_rejected("kv_cache.lookup_table", ".shape[1]=" + std::to_string(a.kv_cache.lookup_table.shape[1]));
}
TEST_F(MlaPrefillFp8Validation, GatheredPositionNeedsAPage) {
  // Sequence 0's window starts at cache_offsets[0] >= 1 and runs past position 8 (padded to the
  // page): column 1 holds its second page; move the window so it needs the sentinel column.
  const int64_t cols = a.kv_cache.lookup_table.shape[1];
  u32("cache_offsets")[0] = static_cast<std::uint32_t>((cols - 1) * 8);
  expect_rejected("kv_cache.lookup_table[0, " + std::to_string(cols - 1) + "]", "needs a page");
}
TEST_F(MlaPrefillFp8Validation, GatheredWindowPastTheLookupTable) {
  u32("cache_offsets")[1] = 4000000000u;
  expect_rejected("kv_cache.lookup_table", "too small: sequence 1 position 4000000000");
}
TEST_F(MlaPrefillFp8Validation, NewTokensWriteDistinctRows) {
  // Sequence 1's first page is made to share sequence 0's first page: both write offsets 5..7.
  const int64_t cols = a.kv_cache.lookup_table.shape[1];
  std::uint32_t* lut = u32("kv_cache.lookup_table");
  lut[cols + 0] = lut[0];
  expect_rejected("kv_cache.lookup_table[", "same cache row");
}

// ---- buffer window ---------------------------------------------------------------------------
TEST_F(MlaPrefillFp8Validation, BufferRowOffsetsShape) {
  a.buffer_row_offsets = scratch(DType::u32, {2});
  expect_rejected("buffer_row_offsets.shape", "=[2]");
}
TEST_F(MlaPrefillFp8Validation, BufferLengthMatches) {
  a.buffer_length += 1;
  expect_rejected("buffer_length", "=" + std::to_string(a.buffer_length));
}
TEST_F(MlaPrefillFp8Validation, BufferLengthNonNegative) { a.buffer_length = -8; expect_rejected("buffer_length", "=-8"); }
TEST_F(MlaPrefillFp8Validation, BufferRowOffsetsStartAtZero) {
  u32("buffer_row_offsets")[0] = 2;
  expect_rejected("buffer_row_offsets[0]", "=2");
}
TEST_F(MlaPrefillFp8Validation, BufferRowOffsetsNonDecreasing) {
  u32("buffer_row_offsets")[1] = u32("buffer_row_offsets")[2] + 1;
  expect_rejected("buffer_row_offsets[2]", "(must be non-decreasing)");
}
TEST_F(MlaPrefillFp8Validation, CacheOffsetsShape) {
  a.cache_offsets = scratch(DType::u32, {4});
  expect_rejected("cache_offsets.shape", "=[4]");
}
TEST_F(MlaPrefillFp8Validation, CacheOffsetsDtype) { a.cache_offsets.dtype = DType::i32; expect_rejected("cache_offsets.dtype", "=i32"); }
TEST_F(MlaPrefillFp8Validation, CacheOffsetsBPlusOneAccepted) {
  make(json{{"cache_offsets_len", "B+1"}});
  const Status s = mla_prefill_fp8(d, a);
  EXPECT_TRUE(s.ok()) << s.message;
}

// ---- weight and output ------------------------------------------------------------------------
TEST_F(MlaPrefillFp8Validation, WeightDtype) { a.kv_b_proj.dtype = DType::u8; expect_rejected("kv_b_proj.dtype", "=u8"); }
TEST_F(MlaPrefillFp8Validation, WeightShape) {
  a.kv_b_proj = scratch(DType::f8e4m3, {d.num_heads * (d.nope + d.v), d.latent + 1});
  expect_rejected("kv_b_proj.shape", "=[96, 81]");
}
TEST_F(MlaPrefillFp8Validation, WeightScaleShapeRoundsUp) {
  // latent 80 / bk 32 needs 3 scale columns (the last group is partial), not 2.
  a.kv_b_proj_scale = scratch(DType::f32, {4, 2});
  expect_rejected("kv_b_proj_scale.shape", "=[4, 2]");
}
TEST_F(MlaPrefillFp8Validation, WeightScaleDtype) { a.kv_b_proj_scale.dtype = DType::bf16; expect_rejected("kv_b_proj_scale.dtype", "=bf16"); }
TEST_F(MlaPrefillFp8Validation, OutputPresent) { a.output.data = nullptr; expect_rejected("output", "missing"); }
TEST_F(MlaPrefillFp8Validation, OutputDtype) { a.output.dtype = DType::f32; expect_rejected("output.dtype", "=f32"); }
TEST_F(MlaPrefillFp8Validation, OutputShape) {
  a.output = scratch(DType::bf16, {7, d.num_heads, d.v + 1});
  expect_rejected("output.shape", "=[7, 3, 17]");
}

// ---- numerics profiles and topk_indices (DeepSeek's own code) ------------------------------------
TEST_F(MlaPrefillFp8Validation, NumericsMustBeAProfile) {
  d.numerics = static_cast<MlaNumerics>(7);
  expect_rejected("numerics", "=7 (expected max, deepseek or deepseek_ue8m0)");
}
TEST_F(MlaPrefillFp8Validation, F32GammaNeedsADeepseekProfile) {
  Tensor& g32 = extra_.emplace_back(DType::f32, std::vector<int64_t>{d.latent});
  for (int64_t k = 0; k < d.latent; ++k) g32.data<float>()[k] = 1.0f;
  a.kv_norm_gamma = g32.view();
  expect_rejected("kv_norm_gamma.dtype", "=f32 (expected bf16)");
  for (MlaNumerics n : {MlaNumerics::deepseek, MlaNumerics::deepseek_ue8m0}) {
    d.numerics = n;
    const Status s = mla_prefill_fp8(d, a);
    EXPECT_TRUE(s.ok()) << s.message;
  }
}
TEST_F(MlaPrefillFp8Validation, GammaOtherDtypesStayRefused) {
  d.numerics = MlaNumerics::deepseek;
  a.kv_norm_gamma.dtype = DType::f16;
  expect_rejected("kv_norm_gamma.dtype", "=f16 (expected bf16 or f32)");
}
TEST_F(MlaPrefillFp8Validation, TopkIndicesDtype) {
  a.topk_indices = scratch(DType::u32, {a.q.shape[0], 4});
  expect_rejected("topk_indices.dtype", "=u32 (expected i32)");
}
TEST_F(MlaPrefillFp8Validation, TopkIndicesRows) {
  a.topk_indices = scratch(DType::i32, {a.q.shape[0] + 1, 4});
  expect_rejected("topk_indices.shape", "=[8, 4] (expected [7, *])");
}
TEST_F(MlaPrefillFp8Validation, TopkIndicesRank) {
  a.topk_indices = scratch(DType::i32, {a.q.shape[0] * 4});
  expect_rejected("topk_indices.rank", "=1");
}
TEST_F(MlaPrefillFp8Validation, TopkIndicesInDeviceMemory) {
  a.topk_indices = scratch(DType::i32, {a.q.shape[0], 4});
  a.topk_indices.memory = MemorySpace::device;
  expect_rejected("topk_indices", "device memory");
}
TEST_F(MlaPrefillFp8Validation, OutputMustNotOverlapTopkIndices) {
  // topk_indices moved alone into a buffer with room for the whole output.
  const TensorView idx = scratch(DType::i32, {a.q.shape[0], 4});
  Tensor& room = extra_.emplace_back();
  a.topk_indices = idx;
  a.output.data = test_support::move_alone(a.topk_indices, room, a.output.size_bytes());
  expect_rejected("output", "overlaps topk_indices");
}
TEST_F(MlaPrefillFp8Validation, AnyTopkValuesAreValid) {
  // Positions outside the window, in the future, -1 and other negatives select nothing.
  const TensorView idx = scratch(DType::i32, {a.q.shape[0], 5});
  const std::int32_t junk[5] = {-1, -7, 1 << 30, 3, 0};
  for (int64_t t = 0; t < a.q.shape[0]; ++t)
    for (int e = 0; e < 5; ++e) static_cast<std::int32_t*>(idx.data)[t * 5 + e] = junk[e];
  a.topk_indices = idx;
  const Status s = mla_prefill_fp8(d, a);
  EXPECT_TRUE(s.ok()) << s.message;
}

// ---- memory: one space, no aliasing of written buffers -------------------------------------------
TEST_F(MlaPrefillFp8Validation, OneMemorySpace) {
  a.kv_b_proj.memory = MemorySpace::device;
  expect_rejected("kv_b_proj", "device memory");
}
TEST_F(MlaPrefillFp8Validation, OutputMustNotOverlapQ) {
  a.output.data = a.q.data;  // q is larger than the output: same bytes
  expect_rejected("output", "overlaps q");
}
TEST_F(MlaPrefillFp8Validation, OutputMustNotOverlapTheCache) {
  a.output.data = test_support::move_alone(a.kv_cache.blocks, extra_.emplace_back(), a.output.size_bytes());
  expect_rejected("output", "overlaps kv_cache.blocks");
}
TEST_F(MlaPrefillFp8Validation, QMustNotOverlapTheCache) {
  a.q.data = static_cast<std::uint16_t*>(a.kv_cache.blocks.data) + 8;
  expect_rejected("q", "overlaps kv_cache.blocks");
}
TEST_F(MlaPrefillFp8Validation, QMustNotOverlapAnInput) {
  Tensor& big = extra_.emplace_back(DType::bf16, std::vector<int64_t>{a.q.numel() + 64});
  a.q.data = big.bytes();
  a.freqs_cis = TensorView::contiguous(big.bytes() + 32, DType::bf16, {a.freqs_cis.shape[0], d.rope});
  expect_rejected("q", "overlaps freqs_cis");
}
TEST_F(MlaPrefillFp8Validation, CacheMustNotOverlapAnInput) {
  a.kv_b_proj.data = a.kv_cache.blocks.data;
  expect_rejected("kv_cache.blocks", "overlaps kv_b_proj");
}
TEST_F(MlaPrefillFp8Validation, OutputMustNotOverlapAnInput) {
  // The scales, moved alone into a buffer with room for the whole output: the output overlaps
  // them and nothing else.
  a.output.data = test_support::move_alone(a.kv_b_proj_scale, extra_.emplace_back(), a.output.size_bytes());
  expect_rejected("output", "overlaps kv_b_proj_scale");
}

// ---- calls without work ------------------------------------------------------------------------
TEST_F(MlaPrefillFp8Validation, ZeroRowCallIsValidAndWritesNothing) {
  make(json{{"seq_lens", {0, 0}}});
  const Tensor blocks0 = b.at("out.kv_cache.blocks");
  const Status s = mla_prefill_fp8(d, a);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_TRUE(b.at("out.kv_cache.blocks").same_bytes(blocks0));
}
TEST_F(MlaPrefillFp8Validation, EmptyBatchIsValid) {
  make(json{{"seq_lens", json::array()}, {"cache_lens", json::array()}});
  const Status s = mla_prefill_fp8(d, a);
  EXPECT_TRUE(s.ok()) << s.message;
}

// Host memory: automatic runs the cpu back-end (the same bits as asking for it, on a fresh copy of
// the inputs, since the call updates q and the cache in place); cuda refuses host memory.
TEST_F(MlaPrefillFp8Validation, AutomaticRunsTheCpuBackEnd) {
  ASSERT_TRUE(mla_prefill_fp8(d, a, RunOptions{Backend::cpu}).ok());
  const Tensor out_cpu = b.at("out.output"), blocks_cpu = b.at("out.kv_cache.blocks");
  make(json::object());
  ASSERT_TRUE(mla_prefill_fp8(d, a, RunOptions{Backend::automatic}).ok());
  EXPECT_TRUE(b.at("out.output").same_bytes(out_cpu));
  EXPECT_TRUE(b.at("out.kv_cache.blocks").same_bytes(blocks_cpu));
  make(json::object());
  EXPECT_EQ(mla_prefill_fp8(d, a, RunOptions{Backend::cuda}).code, StatusCode::invalid_argument);  // host memory
}

}  // namespace
}  // namespace mlakit
