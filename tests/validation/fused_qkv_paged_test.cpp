// fused_qkv_paged: one test per validation rule. Each checks the status code, that the message
// names the operator, the field and the offending value, and that no output byte and no cache
// byte changed.
#include <gtest/gtest.h>

#include <cstring>

#include <list>
#include <map>
#include <memory>
#include <string>

#include "goldens/common/driver.hpp"
#include "goldens/fused_qkv_paged.hpp"
#include "support/lone_buffer.hpp"
#include "mlakit/ops/fused_qkv_paged.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;

// "=<v>", built by appending (GCC 12 misreports `"=" + std::string` under -Wrestrict).
std::string eq(std::int64_t v) {
  std::string s("=");
  s += std::to_string(v);
  return s;
}

// A valid call built from the driver's generator (default knobs: dense bf16 weight, ordinary cache
// with 2 heads of 32, q_dim 96, K 256, seq_lens {3, 0, 4}, cache_lens {5, 2, 0}, page 16, layer 1 of 2),
// with its outputs created as the driver creates them. Tests then break one thing.
struct Call {
  Bundle b;
  std::list<Tensor> extra;  // replacement tensors, kept alive (views point into them)
  FusedQkvPagedDesc d;
  FusedQkvPagedArgs a;

  explicit Call(const json& knobs) {
    const auto* drv = goldens::find_driver("fused_qkv_paged");
    b = drv->generate(knobs, 11);
    d = goldens::fused_qkv_paged_desc(b);
    b.add("out.output", b.at("hidden_state").dtype(), {b.at("hidden_state").shape()[0], d.q_dim}).poison();
    b.copy_to_output("kv_cache.blocks");
    a = goldens::fused_qkv_paged_args(b);
  }

  Tensor& add(DType dt, std::vector<std::int64_t> shape) {
    extra.emplace_back(dt, std::move(shape));
    return extra.back();
  }
  std::uint32_t* lut() { return b.at("kv_cache.lookup_table").data<std::uint32_t>(); }
  std::int64_t lut_cols() const { return b.at("kv_cache.lookup_table").shape()[1]; }
  std::uint32_t* lens() { return b.at("kv_cache.cache_lengths").data<std::uint32_t>(); }
  std::uint32_t* offsets() { return b.at("input_row_offsets").data<std::uint32_t>(); }
};

std::unique_ptr<Call> make(const json& knobs = json::object()) { return std::make_unique<Call>(knobs); }

const json kFp8 = {{"weight_format", "fp8_block"}, {"K", 200}, {"q_dim", 72}};  // N = 200
const json kGptq = {{"weight_format", "gptq"}, {"has_zp", true}, {"g_idx", true}};  // K 256, gs 128, N 224
const json kGptqNoZp = {{"weight_format", "gptq"}};

// Runs the call; it must fail with `code`, naming `field` and containing `value`; nothing changes.
void expect_rejected(Call& c, const std::string& field, const std::string& value,
                     StatusCode code = StatusCode::invalid_argument) {
  const std::map<std::string, Tensor> before = c.b.tensors;
  const std::list<Tensor> extra_before = c.extra;
  const Status s = fused_qkv_paged(c.d, c.a);
  EXPECT_EQ(s.code, code) << s.message;
  EXPECT_EQ(s.op, "fused_qkv_paged");
  EXPECT_EQ(s.field, field) << s.message;
  EXPECT_EQ(s.message.rfind("fused_qkv_paged: " + field, 0), 0u) << s.message;
  EXPECT_NE(s.message.find(value), std::string::npos) << "value '" << value << "' not in: " << s.message;
  for (const auto& [name, t] : before) EXPECT_TRUE(c.b.at(name).same_bytes(t)) << name << " changed";
  auto it = extra_before.begin();
  for (const Tensor& t : c.extra) EXPECT_TRUE(t.same_bytes(*it++)) << "a replacement tensor changed";
  for (const auto& name : c.b.output_names()) EXPECT_TRUE(c.b.at(name).guard_intact()) << name;
}

// Split rows (spec 06 §B) are op 4's: op 5 writes whole rows and declines a tail by name.
TEST(FusedQkvPagedValidation, SplitRowsAreDeclined) {
  auto c = make();
  const auto& bl = c->a.kv_cache.blocks.shape;
  const Tensor tail(DType::bf16, {bl[0], bl[1], bl[2], bl[3], bl[4], 8});
  c->a.kv_cache.tail = tail.view();
  expect_rejected(*c, "kv_cache.tail", "split rows with a bf16 tail are read by sparse_mla_prefill only",
                  StatusCode::unsupported);
}
TEST(FusedQkvPagedValidation, TheUnbrokenCallsSucceed) {
  for (const json& k : {json::object(), kFp8, kGptq, kGptqNoZp}) {
    auto c = make(k);
    const Status s = fused_qkv_paged(c->d, c->a);
    EXPECT_TRUE(s.ok()) << s.message;
    EXPECT_FALSE(c->b.at("out.kv_cache.blocks").same_bytes(c->b.at("kv_cache.blocks")));
  }
}

TEST(FusedQkvPagedValidation, ZeroRowsAreValidAndWriteNothing) {
  auto c = make({{"seq_lens", {0, 0}}, {"cache_lens", {4, 0}}});
  const Tensor blocks = c->b.at("out.kv_cache.blocks");
  const Status s = fused_qkv_paged(c->d, c->a);
  EXPECT_TRUE(s.ok()) << s.message;
  EXPECT_TRUE(c->b.at("out.kv_cache.blocks").same_bytes(blocks));
}

// ---- descriptor -------------------------------------------------------------------------------

TEST(FusedQkvPagedValidation, WeightFormat) {
  auto c = make();
  c->d.weight_format = static_cast<WeightFormat>(7);
  expect_rejected(*c, "weight_format", "=7");
}

TEST(FusedQkvPagedValidation, QDimPositive) {
  auto c = make();
  c->d.q_dim = 0;
  expect_rejected(*c, "q_dim", "=0");
}

TEST(FusedQkvPagedValidation, QDimMustMatchTheWeight) {
  auto c = make();
  c->d.q_dim = 95;
  expect_rejected(*c, "weight.shape[0]", "=224 (expected N = q_dim + 2·num_kv_heads·head_size");
}

TEST(FusedQkvPagedValidation, HasZpOnlyForGptq) {
  for (const json& k : {json::object(), kFp8}) {
    auto c = make(k);
    c->d.has_zp = true;
    expect_rejected(*c, "has_zp", "=true");
  }
}

// ---- hidden_state and offsets -----------------------------------------------------------------

TEST(FusedQkvPagedValidation, HiddenStateMissing) {
  auto c = make();
  c->a.hidden_state.data = nullptr;
  expect_rejected(*c, "hidden_state", "missing");
}

TEST(FusedQkvPagedValidation, HiddenStateDtype) {
  auto c = make();
  c->a.hidden_state.dtype = DType::f16;
  expect_rejected(*c, "hidden_state.dtype", "=f16");
}

TEST(FusedQkvPagedValidation, HiddenStateRank) {
  auto c = make();
  c->a.hidden_state.rank = 3;
  c->a.hidden_state.shape[2] = 1;
  c->a.hidden_state.strides[2] = 1;
  expect_rejected(*c, "hidden_state.rank", "=3");
}

TEST(FusedQkvPagedValidation, HiddenStateContiguous) {
  auto c = make();
  c->a.hidden_state.strides[0] = 512;
  expect_rejected(*c, "hidden_state.strides", "not row-major");
}

TEST(FusedQkvPagedValidation, HiddenStateKPositive) {
  auto c = make();
  c->a.hidden_state.shape[1] = 0;
  c->a.hidden_state.strides[0] = 0;
  expect_rejected(*c, "hidden_state.shape[1]", "=0");
}

TEST(FusedQkvPagedValidation, RowOffsetsStartAtZero) {
  auto c = make();
  c->offsets()[0] = 1;
  expect_rejected(*c, "input_row_offsets[0]", "=1");
}

TEST(FusedQkvPagedValidation, RowOffsetsNonDecreasing) {
  auto c = make();  // offsets {0, 3, 3, 7}
  c->offsets()[2] = 2;
  expect_rejected(*c, "input_row_offsets[2]", "=2 < input_row_offsets[1]=3");
}

TEST(FusedQkvPagedValidation, RowOffsetsEndAtT) {
  auto c = make();
  c->offsets()[3] = 6;
  expect_rejected(*c, "input_row_offsets[3]", "=6");
}

TEST(FusedQkvPagedValidation, RowOffsetsDtype) {
  auto c = make();
  c->a.input_row_offsets.dtype = DType::i32;
  expect_rejected(*c, "input_row_offsets.dtype", "=i32");
}

// ---- the cache --------------------------------------------------------------------------------

TEST(FusedQkvPagedValidation, CacheDtypeMustMatchHiddenState) {
  auto c = make({{"dtype", "f32"}});
  c->a.kv_cache.blocks.dtype = DType::bf16;
  expect_rejected(*c, "kv_cache.blocks.dtype", "=bf16 (expected f32)");
}

TEST(FusedQkvPagedValidation, CacheKvDim) {
  auto c = make();
  c->a.kv_cache.blocks.shape[1] = 3;
  c->a.kv_cache.blocks.strides[0] = 3 * c->a.kv_cache.blocks.strides[1];
  expect_rejected(*c, "kv_cache.blocks.shape[1]", "=3");
}

TEST(FusedQkvPagedValidation, MlaCacheHasOneHead) {
  auto c = make({{"cache", "mla"}, {"num_kv_heads", 2}});
  expect_rejected(*c, "kv_cache.blocks.shape[4]", "=2");
}

TEST(FusedQkvPagedValidation, LayerIdx) {
  auto c = make();
  c->a.layer_idx = 2;
  expect_rejected(*c, "layer_idx", "=2");
}

TEST(FusedQkvPagedValidation, QuantizedCacheRefused) {
  auto c = make();
  Tensor& s = c->add(DType::f32, {1});
  c->a.kv_cache.scales = s.view();
  expect_rejected(*c, "kv_cache.scales", "is present");
}

TEST(FusedQkvPagedValidation, LookupTableBatch) {
  auto c = make();
  c->a.kv_cache.lookup_table.shape[0] = 2;
  expect_rejected(*c, "kv_cache.lookup_table.shape", "[2, ");
}

TEST(FusedQkvPagedValidation, CacheLengthsMissing) {
  auto c = make();
  c->a.kv_cache.cache_lengths.data = nullptr;
  expect_rejected(*c, "kv_cache.cache_lengths", "missing");
}

TEST(FusedQkvPagedValidation, PageMissingForANewToken) {
  auto c = make();  // sequence 0 writes positions 5..7 (LUT column 0)
  const std::int64_t nb = c->b.at("kv_cache.blocks").shape()[0];
  c->lut()[0] = static_cast<std::uint32_t>(nb);
  expect_rejected(*c, "kv_cache.lookup_table[0, 0]", eq(nb));
}

TEST(FusedQkvPagedValidation, PageOutOfRange) {
  auto c = make();  // sequence 2 writes positions 0..3
  c->lut()[2 * c->lut_cols()] = 99;
  expect_rejected(*c, "kv_cache.lookup_table[2, 0]", "=99");
}

TEST(FusedQkvPagedValidation, PageSentinelInTheMiddleOfAWrite) {
  auto c = make({{"seq_lens", {20}}, {"cache_lens", {10}}});  // positions 10..29: columns 0 and 1
  const std::int64_t nb = c->b.at("kv_cache.blocks").shape()[0];
  c->lut()[1] = static_cast<std::uint32_t>(nb);
  expect_rejected(*c, "kv_cache.lookup_table[0, 1]", "position 16");
}

TEST(FusedQkvPagedValidation, LookupTableTooNarrow) {
  auto c = make();
  c->lens()[2] = 1000;
  expect_rejected(*c, "kv_cache.lookup_table", ".shape[1]=");
}

TEST(FusedQkvPagedValidation, TwoSequencesWriteOneRow) {
  auto c = make();  // sequence 0: positions 5..7 in its page 0; sequence 2 now 5..8 in the same block
  c->lens()[2] = 5;
  c->lut()[2 * c->lut_cols()] = c->lut()[0];
  expect_rejected(*c, "kv_cache.lookup_table[2, 0]", "same cache row");
}

TEST(FusedQkvPagedValidation, OneSequenceNamesABlockTwice) {
  auto c = make({{"page_size", 1}, {"seq_lens", {3}}, {"cache_lens", {0}}});
  c->lut()[2] = c->lut()[0];
  expect_rejected(*c, "kv_cache.lookup_table[0, 2]", "position 2 of sequence 0 and position 0 of sequence 0");
}

// ---- dense ------------------------------------------------------------------------------------

TEST(FusedQkvPagedValidation, DenseWeightMissing) {
  auto c = make();
  c->a.weight.data = nullptr;
  expect_rejected(*c, "weight", "missing");
}

TEST(FusedQkvPagedValidation, DenseWeightDtype) {
  auto c = make();
  c->a.weight.dtype = DType::f32;
  expect_rejected(*c, "weight.dtype", "=f32 (expected bf16");
}

TEST(FusedQkvPagedValidation, DenseWeightK) {
  auto c = make();
  c->a.weight.shape = {448, 128};
  c->a.weight.strides = {128, 1};
  expect_rejected(*c, "weight.shape", "=[448, 128]");
}

TEST(FusedQkvPagedValidation, DenseWeightN) {
  auto c = make();
  c->a.weight.shape = {112, 256};
  expect_rejected(*c, "weight.shape[0]", "=112");
}

TEST(FusedQkvPagedValidation, DenseRefusesOtherFormatsTensors) {
  for (const char* field : {"weight_scale", "qweight", "scales", "qzeros", "g_idx"}) {
    SCOPED_TRACE(field);
    auto c = make();
    const TensorView v = c->add(DType::i32, {4}).view();
    const std::string f(field);
    (f == "weight_scale" ? c->a.weight_scale : f == "qweight" ? c->a.qweight : f == "scales" ? c->a.scales
                                                          : f == "qzeros" ? c->a.qzeros : c->a.g_idx) = v;
    expect_rejected(*c, field, "is present (the dense weight format");
  }
}

// ---- fp8_block --------------------------------------------------------------------------------

TEST(FusedQkvPagedValidation, Fp8WeightDtype) {
  auto c = make(kFp8);
  c->a.weight.dtype = DType::bf16;
  expect_rejected(*c, "weight.dtype", "=bf16 (expected f8e4m3)");
}

TEST(FusedQkvPagedValidation, Fp8WeightN) {
  auto c = make(kFp8);
  c->d.q_dim = 73;
  expect_rejected(*c, "weight.shape[0]", "=200");
}

TEST(FusedQkvPagedValidation, Fp8ScaleMissing) {
  auto c = make(kFp8);
  c->a.weight_scale.data = nullptr;
  expect_rejected(*c, "weight_scale", "missing");
}

TEST(FusedQkvPagedValidation, Fp8ScaleShapeRoundsUp) {
  auto c = make(kFp8);  // N = K = 200: scales [2, 2]
  c->a.weight_scale.shape = {1, 1};
  c->a.weight_scale.strides = {1, 1};
  expect_rejected(*c, "weight_scale.shape", "=[1, 1] (expected [2, 2])");
}

TEST(FusedQkvPagedValidation, Fp8ScaleDtype) {
  auto c = make(kFp8);
  c->a.weight_scale.dtype = DType::f16;
  expect_rejected(*c, "weight_scale.dtype", "=f16");
}

TEST(FusedQkvPagedValidation, Fp8RefusesGptqTensors) {
  auto c = make(kFp8);
  c->a.qweight = c->add(DType::i32, {4}).view();
  expect_rejected(*c, "qweight", "is present (the fp8_block weight format");
}

// ---- gptq -------------------------------------------------------------------------------------

TEST(FusedQkvPagedValidation, GptqGroupSize) {
  for (std::int64_t gs : {0, 48, 16, 256}) {
    auto c = make(kGptq);
    c->d.group_size = gs;
    expect_rejected(*c, "group_size", eq(gs) + " (expected 32, 64 or 128)");
  }
}

TEST(FusedQkvPagedValidation, GptqKMultipleOf8) {
  auto c = make(kGptq);
  c->a.hidden_state.shape[1] = 36;
  c->a.hidden_state.strides[0] = 36;
  expect_rejected(*c, "hidden_state.shape[1]", "=36 (gptq packs 8");
}

TEST(FusedQkvPagedValidation, GptqKMultipleOfGroupSize) {
  auto c = make(kGptq);
  c->d.group_size = 64;
  c->a.hidden_state.shape[1] = 96;
  c->a.hidden_state.strides[0] = 96;
  expect_rejected(*c, "hidden_state.shape[1]", "=96 (K must be a multiple of group_size=64)");
}

TEST(FusedQkvPagedValidation, GptqRefusesDenseWeight) {
  auto c = make(kGptq);
  c->a.weight = c->add(DType::bf16, {224, 256}).view();
  expect_rejected(*c, "weight", "is present (the gptq weight format");
}

TEST(FusedQkvPagedValidation, GptqRefusesWeightScale) {
  auto c = make(kGptq);
  c->a.weight_scale = c->add(DType::f32, {2, 2}).view();
  expect_rejected(*c, "weight_scale", "is present");
}

TEST(FusedQkvPagedValidation, GptqQweightMissing) {
  auto c = make(kGptq);
  c->a.qweight.data = nullptr;
  expect_rejected(*c, "qweight", "missing");
}

TEST(FusedQkvPagedValidation, GptqQweightDtype) {
  auto c = make(kGptq);
  c->a.qweight.dtype = DType::u32;
  expect_rejected(*c, "qweight.dtype", "=u32 (expected i32)");
}

TEST(FusedQkvPagedValidation, GptqQweightRows) {
  auto c = make(kGptq);
  c->a.qweight.shape[0] = 16;  // K/8 = 32
  expect_rejected(*c, "qweight.shape", "=[16, 224] (expected [32, *])");
}

TEST(FusedQkvPagedValidation, GptqQweightN) {
  auto c = make(kGptq);
  c->d.q_dim = 88;
  expect_rejected(*c, "qweight.shape[1]", "=224 (expected N");
}

TEST(FusedQkvPagedValidation, GptqScalesDtype) {
  auto c = make(kGptq);
  c->a.scales.dtype = DType::f32;
  expect_rejected(*c, "scales.dtype", "=f32 (expected f16 or bf16)");
}

TEST(FusedQkvPagedValidation, GptqScalesShape) {
  auto c = make(kGptq);
  c->a.scales.shape[0] = 1;  // K/gs = 2
  expect_rejected(*c, "scales.shape", "=[1, 224] (expected [2, 224])");
}

TEST(FusedQkvPagedValidation, GptqZeroPointsNeedNMultipleOf8) {
  auto c = make({{"weight_format", "gptq"}, {"q_dim", 92}});  // N = 220
  c->d.has_zp = true;
  c->a.qzeros = c->add(DType::i32, {2, 27}).view();
  expect_rejected(*c, "has_zp", "N=220");
}

TEST(FusedQkvPagedValidation, GptqQzerosMissing) {
  auto c = make(kGptq);
  c->a.qzeros.data = nullptr;
  expect_rejected(*c, "qzeros", "missing");
}

TEST(FusedQkvPagedValidation, GptqQzerosWithoutHasZp) {
  auto c = make(kGptq);
  c->d.has_zp = false;
  expect_rejected(*c, "qzeros", "is present but has_zp=false");
}

TEST(FusedQkvPagedValidation, ZeroFormatV1NeedsZeroPoints) {
  auto c = make({{"weight_format", "gptq"}});
  c->d.zero_format = ZeroFormat::v1;
  expect_rejected(*c, "zero_format", "=v1 with has_zp=false");
}

TEST(FusedQkvPagedValidation, ZeroFormatOutOfRange) {
  auto c = make(kGptq);
  c->d.zero_format = static_cast<ZeroFormat>(7);
  expect_rejected(*c, "zero_format", "=7 (expected v2 or v1)");
}

TEST(FusedQkvPagedValidation, GptqQzerosShape) {
  auto c = make(kGptq);
  c->a.qzeros.shape[1] = 27;
  expect_rejected(*c, "qzeros.shape", "=[2, 27] (expected [2, 28])");
}

TEST(FusedQkvPagedValidation, GptqQzerosDtype) {
  auto c = make(kGptq);
  c->a.qzeros.dtype = DType::f32;
  expect_rejected(*c, "qzeros.dtype", "=f32");
}

TEST(FusedQkvPagedValidation, GptqGidxDtype) {
  auto c = make(kGptq);
  c->a.g_idx.dtype = DType::u32;
  expect_rejected(*c, "g_idx.dtype", "=u32");
}

TEST(FusedQkvPagedValidation, GptqGidxShape) {
  auto c = make(kGptq);
  c->a.g_idx.shape[0] = 255;
  expect_rejected(*c, "g_idx.shape", "=[255] (expected [256])");
}

TEST(FusedQkvPagedValidation, GptqGidxTooLarge) {
  auto c = make(kGptq);
  c->b.at("g_idx").data<std::int32_t>()[5] = 2;  // K/gs = 2
  expect_rejected(*c, "g_idx[5]", "=2 (must be in [0, K/group_size=2))");
}

TEST(FusedQkvPagedValidation, GptqGidxNegative) {
  auto c = make(kGptq);
  c->b.at("g_idx").data<std::int32_t>()[0] = -1;
  expect_rejected(*c, "g_idx[0]", "=-1");
}

TEST(FusedQkvPagedValidation, GptqGidxMustBeOnTheHost) {
  auto c = make(kGptq);
  c->a.g_idx.memory = MemorySpace::device;
  expect_rejected(*c, "g_idx", "device memory");
}

// ---- output, memory spaces, aliasing ---------------------------------------------------------

TEST(FusedQkvPagedValidation, OutputMissing) {
  auto c = make();
  c->a.output.data = nullptr;
  expect_rejected(*c, "output", "missing");
}

TEST(FusedQkvPagedValidation, OutputDtype) {
  auto c = make();
  c->a.output.dtype = DType::f32;
  expect_rejected(*c, "output.dtype", "=f32 (expected bf16)");
}

TEST(FusedQkvPagedValidation, OutputShape) {
  auto c = make();
  c->a.output.shape[1] = 95;
  c->a.output.strides[0] = 95;
  expect_rejected(*c, "output.shape", "=[7, 95] (expected [7, 96])");
}

TEST(FusedQkvPagedValidation, OneMemorySpace) {
  auto c = make();
  c->a.output.memory = MemorySpace::device;
  expect_rejected(*c, "output", "device memory but hidden_state is in host memory");
}

// Moves `input` alone into a buffer with room for the whole output and points the output into it, so
// the output view overlaps that input and nothing else whatever the heap layout.
void point_output_into(Call& c, TensorView& input, std::int64_t offset) {
  Tensor& room = c.extra.emplace_back();
  c.a.output.data = test_support::move_alone(input, room, c.a.output.size_bytes() + offset) + offset;
}

TEST(FusedQkvPagedValidation, OutputMustNotOverlapInputs) {
  struct Case {
    const char* field;
    TensorView FusedQkvPagedArgs::*member;
  };
  for (const Case& k : {Case{"hidden_state", &FusedQkvPagedArgs::hidden_state},
                        Case{"input_row_offsets", &FusedQkvPagedArgs::input_row_offsets},
                        Case{"weight", &FusedQkvPagedArgs::weight}}) {
    SCOPED_TRACE(k.field);
    auto c = make();
    point_output_into(*c, c->a.*k.member, 0);
    expect_rejected(*c, "output", std::string("overlaps ") + k.field);
  }
  for (const Case& k : {Case{"qweight", &FusedQkvPagedArgs::qweight}, Case{"scales", &FusedQkvPagedArgs::scales},
                        Case{"qzeros", &FusedQkvPagedArgs::qzeros}, Case{"g_idx", &FusedQkvPagedArgs::g_idx}}) {
    SCOPED_TRACE(k.field);
    auto c = make(kGptq);
    point_output_into(*c, c->a.*k.member, 0);
    expect_rejected(*c, "output", std::string("overlaps ") + k.field);
  }
  auto c = make(kFp8);
  point_output_into(*c, c->a.weight_scale, 4);
  expect_rejected(*c, "output", "overlaps weight_scale");
}

TEST(FusedQkvPagedValidation, OutputMustNotOverlapTheCache) {
  auto c = make();
  c->a.output.data = static_cast<char*>(c->a.kv_cache.blocks.data) + 64;
  expect_rejected(*c, "output", "overlaps kv_cache.blocks");
}

TEST(FusedQkvPagedValidation, OutputMustNotOverlapThePageTable) {
  auto c = make();
  point_output_into(*c, c->a.kv_cache.lookup_table, 0);
  expect_rejected(*c, "output", "overlaps kv_cache.lookup_table");
}

// Puts the cache and `victim` into one fresh buffer, the victim `offset` bytes after the cache's
// start, so they overlap each other and nothing else whatever the heap layout.
void share_bytes_with_cache(Call& c, TensorView& victim, std::int64_t offset) {
  TensorView& blocks = c.a.kv_cache.blocks;
  Tensor& arena = c.add(DType::u8, {blocks.size_bytes() + victim.size_bytes() + offset});
  std::memcpy(arena.bytes(), blocks.data, static_cast<std::size_t>(blocks.size_bytes()));
  blocks.data = arena.bytes();
  victim.data = arena.bytes() + offset;
}

TEST(FusedQkvPagedValidation, CacheMustNotOverlapInputs) {
  {
    auto c = make();  // the activations inside the cache's bytes
    share_bytes_with_cache(*c, c->a.hidden_state, 0);
    expect_rejected(*c, "kv_cache.blocks", "overlaps hidden_state");
  }
  {
    auto c = make();
    share_bytes_with_cache(*c, c->a.weight, 2);
    expect_rejected(*c, "kv_cache.blocks", "overlaps weight");
  }
  {
    auto c = make(kGptq);
    share_bytes_with_cache(*c, c->a.qweight, 0);
    expect_rejected(*c, "kv_cache.blocks", "overlaps qweight");
  }
  {
    auto c = make(kGptq);
    share_bytes_with_cache(*c, c->a.scales, 0);
    expect_rejected(*c, "kv_cache.blocks", "overlaps scales");
  }
  {
    auto c = make();
    share_bytes_with_cache(*c, c->a.kv_cache.cache_lengths, 0);
    expect_rejected(*c, "kv_cache.blocks", "overlaps kv_cache.cache_lengths");
  }
}

// ---- packed weights ----------------------------------------------------------------------------------

FusedQkvPackedWeights packed(Call& c) {
  FusedQkvPackedWeights w;
  const Status s = pack_weights(c.d, c.a, &w);
  EXPECT_TRUE(s.ok()) << s.message;
  return w;
}

TEST(FusedQkvPagedValidation, PackedWeightsOfTheCallAreAccepted) {
  for (const json& k : {json::object(), kFp8, kGptq, kGptqNoZp}) {
    auto c = make(k);
    const FusedQkvPackedWeights w = packed(*c);
    EXPECT_TRUE(w.valid());
    EXPECT_FALSE(w.layout().empty());
    c->a.packed_weights = &w;
    const Status s = fused_qkv_paged(c->d, c->a);
    EXPECT_TRUE(s.ok()) << s.message;
  }
}

TEST(FusedQkvPagedValidation, PackedWeightsMustBeMade) {
  auto c = make();
  const FusedQkvPackedWeights empty;
  c->a.packed_weights = &empty;
  expect_rejected(*c, "packed_weights", "is empty");
}

// A pack serves the tensors it was made from: another layer's weights of the same shape are refused.
TEST(FusedQkvPagedValidation, PackedWeightsOfOtherTensorsAreRefused) {
  for (const json& k : {json::object(), kFp8, kGptq}) {
    auto c = make(k);
    auto other = make(k);
    const FusedQkvPackedWeights w = packed(*other);
    c->a.packed_weights = &w;
    const bool gptq = c->d.weight_format == WeightFormat::gptq;
    expect_rejected(*c, "packed_weights", std::string(gptq ? "qweight" : "weight") + ".data differs");
  }
  {  // the same weight, a scale tensor of its own
    auto c = make(kFp8);
    const FusedQkvPackedWeights w = packed(*c);
    Tensor& sc = c->add(DType::f32, c->b.at("weight_scale").shape());
    c->a.weight_scale = sc.view();
    c->a.packed_weights = &w;
    expect_rejected(*c, "packed_weights", "weight_scale.data differs");
  }
}

TEST(FusedQkvPagedValidation, PackedWeightsMustMatchTheDesc) {
  {
    auto c = make(kGptq);
    auto g64 = make({{"weight_format", "gptq"}, {"has_zp", true}, {"g_idx", true}, {"group_size", 64}});
    const FusedQkvPackedWeights w = packed(*g64);
    c->a.packed_weights = &w;
    expect_rejected(*c, "packed_weights.group_size", "=64 (the pack was made for 64; this call has 128)");
  }
  {
    auto c = make(kGptq);
    c->d.zero_format = ZeroFormat::v1;
    const FusedQkvPackedWeights w = packed(*c);
    c->a.packed_weights = &w;
    c->d.zero_format = ZeroFormat::v2;
    expect_rejected(*c, "packed_weights.zero_format", "=v1");
  }
  {
    auto c = make(kGptqNoZp);
    auto zp = make(kGptq);
    const FusedQkvPackedWeights w = packed(*zp);
    c->a.packed_weights = &w;
    expect_rejected(*c, "packed_weights.has_zp", "=true");
  }
  {
    auto c = make();
    auto fp8 = make(kFp8);
    const FusedQkvPackedWeights w = packed(*fp8);
    c->a.packed_weights = &w;
    expect_rejected(*c, "packed_weights.weight_format", "=fp8_block (the pack was made for fp8_block; this call has dense)");
  }
  {  // fp8 weights packed for f32 activations, called with bf16 ones
    auto c = make(kFp8);
    auto f32 = make({{"weight_format", "fp8_block"}, {"K", 200}, {"q_dim", 72}, {"dtype", "f32"}});
    const FusedQkvPackedWeights w = packed(*f32);
    c->a.packed_weights = &w;
    expect_rejected(*c, "packed_weights.activations", "=f32");
  }
  {
    auto c = make(kFp8);
    auto wide = make({{"weight_format", "fp8_block"}, {"K", 320}, {"q_dim", 72}});
    const FusedQkvPackedWeights w = packed(*wide);
    c->a.packed_weights = &w;
    expect_rejected(*c, "packed_weights.K", "=320");
  }
  {
    auto c = make(kFp8);
    auto tall = make({{"weight_format", "fp8_block"}, {"K", 200}, {"q_dim", 80}});
    const FusedQkvPackedWeights w = packed(*tall);
    c->a.packed_weights = &w;
    expect_rejected(*c, "packed_weights.N", "=208");
  }
  {
    auto c = make({{"weight_format", "gptq"}, {"scales_dtype", "bf16"}});
    const FusedQkvPackedWeights w = packed(*c);
    c->a.packed_weights = &w;
    c->a.scales.dtype = DType::f16;
    expect_rejected(*c, "packed_weights.scales_dtype", "=bf16");
  }
}

// pack_weights validates what it reads, names its entry and leaves `out` as it was.
void expect_pack_rejected(Call& c, const std::string& field, const std::string& value) {
  FusedQkvPackedWeights w = packed(*make());
  const std::string layout = w.layout();
  const Status s = pack_weights(c.d, c.a, &w);
  EXPECT_EQ(s.code, StatusCode::invalid_argument) << s.message;
  EXPECT_EQ(s.op, "fused_qkv_paged.pack_weights");
  EXPECT_EQ(s.field, field) << s.message;
  EXPECT_EQ(s.message.rfind("fused_qkv_paged.pack_weights: " + field, 0), 0u) << s.message;
  EXPECT_NE(s.message.find(value), std::string::npos) << "value '" << value << "' not in: " << s.message;
  EXPECT_TRUE(w.valid());
  EXPECT_EQ(w.layout(), layout);
}

TEST(FusedQkvPagedValidation, PackWeightsValidatesItsInput) {
  {
    auto c = make();
    const Status s = pack_weights(c->d, c->a, nullptr);
    EXPECT_EQ(s.code, StatusCode::invalid_argument);
    EXPECT_EQ(s.field, "out");
  }
  {
    auto c = make();
    c->d.weight_format = static_cast<WeightFormat>(9);
    expect_pack_rejected(*c, "weight_format", "=9");
  }
  {
    auto c = make();
    c->a.hidden_state.dtype = DType::f16;
    expect_pack_rejected(*c, "hidden_state.dtype", "=f16");
  }
  {
    auto c = make();
    c->a.hidden_state.rank = 3;
    expect_pack_rejected(*c, "hidden_state.rank", "=3");
  }
  {
    auto c = make();
    c->a.hidden_state.shape[1] = 0;
    expect_pack_rejected(*c, "hidden_state.shape[1]", "=0 (K must be >= 1)");
  }
  {  // K from hidden_state: the weight's rows must have it
    auto c = make();
    c->a.hidden_state.shape[1] = 128;
    expect_pack_rejected(*c, "weight.shape", "=[224, 256] (expected [*, 128])");
  }
  {
    auto c = make(kFp8);
    c->a.weight_scale = TensorView{};
    expect_pack_rejected(*c, "weight_scale", "is missing");
  }
  {
    auto c = make(kGptq);
    c->a.g_idx.data = c->b.at("g_idx").data<std::int32_t>();
    c->b.at("g_idx").data<std::int32_t>()[5] = 99;
    expect_pack_rejected(*c, "g_idx[5]", "=99");
  }
  {
    auto c = make();
    c->a.weight.shape[0] = 0;
    expect_pack_rejected(*c, "weight.shape[0]", "=0 (expected N >= 1)");
  }
  {
    auto c = make();
    c->a.weight.memory = MemorySpace::device;
    expect_pack_rejected(*c, "weight", "device memory");
  }
  {  // rows are not read: an empty hidden_state with the call's K packs
    auto c = make();
    c->a.hidden_state = TensorView::contiguous(nullptr, DType::bf16, {0, 256});
    FusedQkvPackedWeights w;
    const Status s = pack_weights(c->d, c->a, &w);
    EXPECT_TRUE(s.ok()) << s.message;
    EXPECT_TRUE(w.valid());
  }
}

}  // namespace
}  // namespace mlakit
