// Validation and the public entry point of op 4 (sparse MLA prefill).
#include "mlakit/ops/sparse_mla_prefill.hpp"

#include <cmath>
#include <sstream>
#include <string>

#include "core/common/device_kernels.hpp"
#include "core/common/validate.hpp"
#include "ops/common/plan_run.hpp"
#include "ops/validators.hpp"
#include "cpu/sparse_mla_prefill.hpp"
#include "reference/sparse_mla_prefill.hpp"

namespace mlakit::core {

namespace {

constexpr const char* kOp = "sparse_mla_prefill";

// Message text built with a stream (GCC 12 warns falsely on `"literal" + std::string&&` at -O3).
template <class... Parts>
std::string text(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}

}  // namespace

Status validate_sparse_mla_prefill(const SparseMlaPrefillDesc& d, const SparseMlaPrefillArgs& a, MemorySpace* space,
                                  Checks checks) {
  Validator v(kOp, checks);
  // Descriptor.
  v.positive("num_q_heads", d.num_q_heads) && v.positive("qk_depth", d.qk_depth) &&
      v.positive("v_depth", d.v_depth) && v.at_most("v_depth", d.v_depth, "qk_depth", d.qk_depth) &&
      v.positive("indices_stride", d.indices_stride);
  if (v.ok() && !std::isfinite(d.scale))
    v.fail("scale", text("=", d.scale,
                         std::isnan(d.scale) ? " (must be finite; it has no default: set the model's softmax scale, "
                                               "1/sqrt(192) for DeepSeek-V3.2)"
                                             : " (must be finite)"));
  if (!v.ok()) return v.status();

  // Query rows fix T.
  if (!v.tensor("q", a.q, {DType::bf16}, {kAnyDim, d.num_q_heads, d.qk_depth})) return v.status();
  const std::int64_t T = a.q.shape[0];

  // The cache: blocks and scales are read through physical rows; the lookup table and the
  // lengths are not read, so the shared checker sees a stand-in table and they are checked
  // below for dtype and rank only.
  static const std::uint32_t kNoTable = 0;
  PagedKVCacheView rows = a.kv_cache;
  rows.lookup_table = TensorView::contiguous(&kNoTable, DType::u32, {0, 0});
  rows.cache_lengths = TensorView{};
  const bool fp8 = a.kv_cache.blocks.present() && a.kv_cache.blocks.dtype == DType::f8e4m3;
  CacheExpect expect{{DType::bf16, DType::f8e4m3}};
  expect.kv_dim = 1;
  expect.num_kv_heads = 1;
  expect.head_size = d.qk_depth;
  expect.scales = fp8;
  expect.e8m0_scales = true;  // FlashMLA's MODEL1 cache (spec 06 §B3)
  expect.split_rows = true;   // FlashMLA's V32 and MODEL1 caches: f8e4m3 part + bf16 tail (§B2, §B3)
  expect.layer_idx = a.layer_idx;
  expect.need_cache_lengths = false;
  if (!v.paged_cache("kv_cache", rows, expect, kAnyDim)) return v.status();
  const TensorView& lut = a.kv_cache.lookup_table;
  const TensorView& lens = a.kv_cache.cache_lengths;
  if (!v.optional_tensor("kv_cache.lookup_table", lut, {DType::u32}, {kAnyDim, kAnyDim})) return v.status();
  if (!v.optional_tensor("kv_cache.cache_lengths", lens, {DType::u32}, {lut.present() ? lut.shape[0] : kAnyDim}))
    return v.status();

  if (!v.tensor("indices", a.indices, {DType::i32, DType::u32}, {T, d.indices_stride})) return v.status();
  if (!v.optional_tensor("topk_lengths", a.topk_lengths, {DType::u32}, {T})) return v.status();
  if (a.topk_lengths.present() && v.reads_content()) {
    for (std::int64_t t = 0; t < T; ++t) {
      const std::uint32_t len = u32_at(a.topk_lengths, t);
      if (static_cast<std::int64_t>(len) > d.indices_stride) {
        v.fail(text("topk_lengths[", t, "]"), text("=", len, " (must be <= indices_stride=", d.indices_stride, ")"));
        return v.status();
      }
    }
  }
  if (!v.optional_tensor("attn_sink", a.attn_sink, {DType::f32}, {d.num_q_heads})) return v.status();
  if (!v.tensor("output", a.output, {DType::bf16}, {T, d.num_q_heads, d.v_depth})) return v.status();
  if (!v.optional_tensor("lse", a.lse, {DType::f32}, {T, d.num_q_heads})) return v.status();
  if (!v.optional_tensor("max_logits", a.max_logits, {DType::f32}, {T, d.num_q_heads})) return v.status();

  // Written buffers must not alias anything the call reads, nor each other; all in one memory space.
  const Validator::NamedView reads[] = {{"q", &a.q},
                                        {"kv_cache.blocks", &a.kv_cache.blocks},
                                        {"kv_cache.scales", &a.kv_cache.scales},
                                        {"kv_cache.tail", &a.kv_cache.tail},
                                        {"kv_cache.lookup_table", &lut},
                                        {"kv_cache.cache_lengths", &lens},
                                        {"indices", &a.indices},
                                        {"topk_lengths", &a.topk_lengths},
                                        {"attn_sink", &a.attn_sink}};
  const Validator::NamedView writes[] = {{"output", &a.output}, {"lse", &a.lse}, {"max_logits", &a.max_logits}};
  if (!v.written_apart(writes, reads)) return v.status();
  v.same_memory(reads, writes, space);
  return v.status();
}

namespace {

struct SparseTraits {
  using Desc = SparseMlaPrefillDesc;
  using Args = SparseMlaPrefillArgs;
  static constexpr const char* kOp = "sparse_mla_prefill";
  static FieldList fields(Args& a) {
    return {{"q", &a.q, Role::data},
            {"kv_cache.blocks", &a.kv_cache.blocks, Role::data},
            {"kv_cache.scales", &a.kv_cache.scales, Role::data},
            {"kv_cache.tail", &a.kv_cache.tail, Role::data},
            {"kv_cache.lookup_table", &a.kv_cache.lookup_table, Role::data},
            {"kv_cache.cache_lengths", &a.kv_cache.cache_lengths, Role::data},
            {"indices", &a.indices, Role::data},
            {"topk_lengths", &a.topk_lengths, Role::content},
            {"attn_sink", &a.attn_sink, Role::data},
            {"output", &a.output, Role::written},
            {"lse", &a.lse, Role::written},
            {"max_logits", &a.max_logits, Role::written}};
  }
  static Status validate(const Desc& d, const Args& a, MemorySpace* space, Checks c) {
    return validate_sparse_mla_prefill(d, a, space, c);
  }
  static Status cuda(const Desc& d, const Args& a, const Args& h, const DeviceLaunch& l) {
    return launch_device(kOp, &DeviceKernels::sparse_mla_prefill, d, a, h, l);
  }
  static Status cpu(const Desc& d, const Args& a) { return cpu::sparse_mla_prefill(d, a); }
  static void reference(const Desc& d, const Args& a) { reference::sparse_mla_prefill(d, a); }
  static Status same_step(const Args&, const Args&) { return Status::success(); }  // no batch metadata
  static cpu::CallBufferSizes cpu_buffers([[maybe_unused]] const Desc& d, [[maybe_unused]] const Args& a) {
    return cpu::CallBufferSizes{};
  }
};

}  // namespace

}  // namespace mlakit::core

namespace mlakit {

Status sparse_mla_prefill(const SparseMlaPrefillDesc& d, const SparseMlaPrefillArgs& a, const RunOptions& o) {
  return core::one_shot_call<core::SparseTraits>(d, a, o);
}

Status plan(const SparseMlaPrefillDesc& d, const SparseMlaPrefillArgs& step, const PlanOptions& o, SparseMlaPrefillPlan* out) {
  return core::plan_call<core::SparseTraits>(d, step, o, false, out);
}

Status run(const SparseMlaPrefillPlan& p, const SparseMlaPrefillArgs& a, const RunContext& c) {
  return core::run_call<core::SparseTraits>(p, a, c);
}

}  // namespace mlakit
