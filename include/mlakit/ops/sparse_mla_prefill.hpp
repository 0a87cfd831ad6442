// Op 4 — sparse MLA prefill (DeepSeek-V3.2 `mla_sm100_prefill_sparse`), docs/sparse_mla_prefill.md.
//
// Each query row attends to the cache rows listed in its `indices` row (encoded physical rows
// blk·page_size + off of layer `layer_idx`); K is the whole row, V its first v_depth columns.
// Invalid slots (p >= topk_lengths[t], index < 0 or >= num_rows) are skipped; duplicates count.
// A row with no valid slot gives output 0 and lse +inf. The optional sink adds exp(sink[h] - m)
// to the denominator only.
//
// Math, for query row t and head h, over the valid slots p (row = the cache row indices[t, p];
// for the FP8 cache row[d] = f32(code[d]) · scale[row], used for both Q·K and P·V):
//   s_p = scale · Σ_d q[t,h,d] · row[d]                   (d < qk_depth)
//   m   = max_p s_p,   l = Σ_p exp(s_p − m)
//   den = l + (attn_sink given ? exp(attn_sink[h] − m) : 0)
//   output[t,h,:] = Σ_p exp(s_p − m) · row[0 : v_depth] / den
//   lse[t,h]      = m + log(l)                             (natural log, without the sink)
//   max_logits[t,h] = m                                    (optional; FlashMLA returns it beside lse)
// Back-ends may round exp(s_p − m) to bf16 before the P·V product (as FlashMLA does); the
// denominator is summed from the unrounded values.
//
// Choices where the spec is silent:
// * Index encoding: indices are i32 values; a u32 tensor is read as the same bit pattern (so
//   0xFFFFFFFF is -1 and every value >= 2^31 is negative, hence invalid). An index is valid iff
//   0 <= index < num_blocks·page_size; invalid values are skipped, never an error.
// * kv_cache.lookup_table and kv_cache.cache_lengths are optional: the op addresses physical rows
//   and never reads them. When present they are checked for dtype and rank only (u32
//   [B, max_pages] and u32 [B]); their contents are not inspected.
// * topk_lengths (when present) must satisfy topk_lengths[t] <= indices_stride. Host calls check
//   every value before anything is written, and so does a one-shot device call (on a host copy).
//   A run of a plan on device memory reads nothing back: the kernel uses indices_stride for a
//   larger value and raises the device error flag, which check_device_errors() reports
//   (mlakit/plan.hpp).
// * Non-finite data follow IEEE arithmetic: a selected row holding a NaN (FP8 codes 0x7F / 0xFF, or
//   a NaN scale) makes the whole output row and lse of that query token NaN, for every head
//   (the NaN enters every score through Q·K). NaN in q makes that head's row NaN. A NaN or +inf
//   attention sink likewise propagates through the denominator; -inf means "no sink".
// * A row with no valid slot writes output 0, lse +inf and max_logits -inf whether or not a sink is
//   given. max_logits is NaN where a score is NaN (as m is), -inf where every score is -inf.
// * Scores that are all -inf (only with infinite inputs) give NaN, as exp(-inf - (-inf)) does.
// * T = 0 is a valid call that writes nothing.
// * The cpu back-end rounds exp(s_p - m) to bf16 where the CPU has a bf16 dot (AVX512-BF16) and
//   keeps it in f32 elsewhere; its exponentials are within 2 ulp and flush to 0 below e^-86.5
//   (a weight under 2^-124 of the largest one); it accumulates in f32 in a fixed order, so
//   results do not depend on the thread count.
// * Validation (docs/sparse_mla_prefill.md §7) happens before anything is written: descriptor fields positive,
//   v_depth <= qk_depth, scale finite; q bf16 [T, Hq, qk_depth]; cache bf16 without scales or
//   f8e4m3 with f32 or e8m0 scales (one per quant_granularity columns), optionally split rows
//   with a bf16 tail (the granularity dividing the codes), kv_dim 1, one head,
//   head_size = qk_depth (codes + tail), layer_idx < num_layers; indices i32/u32 [T, indices_stride];
//   topk_lengths u32 [T]; attn_sink f32 [Hq]; output bf16 [T, Hq, v_depth]; lse and max_logits f32
//   [T, Hq]; output, lse and max_logits overlap no input and not each other; every tensor in one memory space.
#pragma once

#include <cstdint>
#include <limits>

#include "mlakit/backend.hpp"
#include "mlakit/paged_kv_cache.hpp"
#include "mlakit/plan.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit {

struct SparseMlaPrefillDesc {
  std::int64_t num_q_heads = 128;    // Hq
  std::int64_t qk_depth = 576;
  std::int64_t v_depth = 512;        // <= qk_depth
  std::int64_t indices_stride = 2048;
  // Softmax scale; finite. No default: a model's scale (DeepSeek-V3.2's is 1/sqrt(192), from its
  // 128 + 64 query-key head width) must be set, and an unset one is refused by validation.
  float scale = std::numeric_limits<float>::quiet_NaN();
};

struct SparseMlaPrefillArgs {
  TensorView q;               // bf16 [T, Hq, qk_depth]
  PagedKVCacheView kv_cache;  // bf16 MLA cache, or f8e4m3 with f32 / e8m0 scales per quant_granularity columns,
                              // optionally split rows (FlashMLA V32 / MODEL1: codes, then kv_cache.tail in bf16;
                              // engine_layouts.hpp); lookup_table / cache_lengths optional and unread (see above)
  std::uint32_t layer_idx = 0;
  TensorView indices;         // i32 or u32 [T, indices_stride]
  TensorView topk_lengths;    // u32 [T], optional (absent: indices_stride)
  TensorView attn_sink;       // f32 [Hq], optional
  TensorView output;          // bf16 [T, Hq, v_depth] (written)
  TensorView lse;             // f32 [T, Hq], optional (written)
  TensorView max_logits;      // f32 [T, Hq], optional (written): m, the scaled maximum score
};

Status sparse_mla_prefill(const SparseMlaPrefillDesc& desc, const SparseMlaPrefillArgs& args,
                          const RunOptions& options = {});

// Plan once per step, run per layer (mlakit/plan.hpp): `step` is a call of the step (any layer);
// its metadata is checked once, here.
using SparseMlaPrefillPlan = Plan<SparseMlaPrefillDesc, SparseMlaPrefillArgs>;
Status plan(const SparseMlaPrefillDesc& desc, const SparseMlaPrefillArgs& step, const PlanOptions& options, SparseMlaPrefillPlan* out);
Status run(const SparseMlaPrefillPlan& plan, const SparseMlaPrefillArgs& args, const RunContext& context = {});

}  // namespace mlakit
