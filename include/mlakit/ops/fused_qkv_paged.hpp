// Op 5 — fused QKV matmul into the paged KV cache
// (`generic_fused_qkv_matmul_kv_cache_paged_ragged`), docs/fused_qkv_paged.md.
//
// Y = X·Wᵀ for the new tokens; columns [0, q_dim) go to `output`, the rest are written into the
// cache at each token's position (K then V heads for an ordinary cache, the single latent head
// for an MLA cache). Weight formats: dense (dtype of X), FP8 block-scaled (128×128 scale blocks),
// GPTQ int4 with optional zero points and act-order g_idx.
//
// Placement. Row t of sequence b (local index i) has position pos = cache_lengths[b] + i and is
// written at (LUT[b, pos / page_size], kv, layer_idx, pos % page_size, h, d). Ordinary cache
// (kv_dim 2): column q_dim + j goes to kv = j / (Hkv·hd), h = (j / hd) % Hkv, d = j % hd, so
// N = q_dim + 2·Hkv·hd. MLA cache (kv_dim 1): num_kv_heads must be 1 and column q_dim + d goes to
// the latent head, so N = q_dim + head_size. The cache dtype equals hidden_state's dtype (bf16 or
// f32); quantized caches (kv_cache.scales present) are refused.
//
// Arithmetic. The reference decodes every weight exactly (fp8: code·scale in f64; GPTQ:
// bf16((q − z)·scale) with the product formed exactly and rounded once to bf16, ties to even),
// accumulates x·w in f64 and rounds once to the dtype. Optimized back-ends accumulate in f32 at
// least; the golden tolerance is |err| <= 4·K·2^-24·Σ_k|x_k·w_k| + u_out·(|ref| + |out|), u_out
// 2^-8 (bf16) or 2^-24 (f32): the last term counts the rounding of both results, so that two
// correct roundings on either side of a tie are not reported as an error. NaN weights (fp8 codes
// 0x7F/0xFF) make their output column NaN.
//
// Choices where the spec is silent (all checked by validation, nothing is written on failure):
// * q_dim >= 1; K >= 1; T = 0 is valid and writes nothing.
// * Tensors belonging to another weight format must be absent (null data), e.g. qweight with the
//   dense format, or weight_scale with GPTQ. has_zp = true is refused for dense and fp8_block;
//   group_size is ignored by them.
// * GPTQ: group_size is 32, 64 or 128 (the sizes GPU kernels tile for); K % 8 == 0 and
//   K % group_size == 0; has_zp needs N % 8 == 0; g_idx (host memory, it is read during
//   validation) holds values in [0, K / group_size). Act-order maps need not be balanced.
// * Scale tensors may hold any f32/f16/bf16 value (NaN/inf propagate); they are not inspected.
// * Every page a new token needs must exist (LUT entry < num_blocks), and no two new tokens may
//   map to the same cache row (two sequences sharing a page at a written position, or a LUT that
//   names the same block twice): such a write would race and its result would depend on the
//   back-end.
// * output must not overlap any input or the cache; the cache must not overlap hidden_state,
//   input_row_offsets, the weight tensors, the lookup table or cache_lengths. All tensors live in
//   one memory space.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mlakit/backend.hpp"
#include "mlakit/paged_kv_cache.hpp"
#include "mlakit/plan.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit {

enum class WeightFormat { dense, fp8_block, gptq };
// How a GPTQ checkpoint stores its zero points (with has_zp): v2 stores the zero z itself; v1 (the
// layout of AutoGPTQ and most published checkpoints) stores z - 1, so the zero is nibble + 1 (1..16).
enum class ZeroFormat { v2, v1 };

struct FusedQkvPagedDesc {
  std::int64_t q_dim = 4096;
  WeightFormat weight_format = WeightFormat::dense;
  std::int64_t group_size = 128;  // GPTQ only: 32, 64 or 128
  bool has_zp = false;            // GPTQ only
  ZeroFormat zero_format = ZeroFormat::v2;  // GPTQ with has_zp: how qzeros stores the zero points
};

// What the stored zero nibble is short of the zero point: 1 for v1 checkpoints, 0 for v2.
inline int zero_bias(const FusedQkvPagedDesc& d) { return d.zero_format == ZeroFormat::v1 ? 1 : 0; }

namespace detail {
struct FusedQkvPackedState;
struct FusedQkvPackedAccess;
}  // namespace detail

// A layer's weights laid out once for this CPU's prefill GEMM, and GPTQ's codes in rows that do
// not alias in the caches (sorted by group for act-order; pack_weights), kept by the caller beside the weights and named by every call of that
// layer (FusedQkvPagedArgs::packed_weights), so that calls stop laying out the weights each time
// (docs/fused_qkv_paged.md §9 has what it saves where). Copies share one immutable state: many
// threads may use one pack at once.
class FusedQkvPackedWeights {
 public:
  bool valid() const { return state_ != nullptr; }
  std::size_t bytes() const;          // memory held: 0 where nothing is laid out
  const std::string& layout() const;  // what it holds, for which kernels (empty when not valid)
  const detail::FusedQkvPackedState* state() const { return state_.get(); }

 private:
  friend struct detail::FusedQkvPackedAccess;
  std::shared_ptr<const detail::FusedQkvPackedState> state_;
};

struct FusedQkvPagedArgs {
  TensorView hidden_state;       // bf16 or f32 [T, K]
  TensorView input_row_offsets;  // u32 [B+1]
  // dense:     weight = dtype [N, K]
  // fp8_block: weight = f8e4m3 [N, K], weight_scale = f32 [ceil(N/128), ceil(K/128)]
  // gptq:      qweight = i32 [K/8, N], scales = f16|bf16 [K/gs, N], qzeros = i32 [K/gs, N/8] (has_zp),
  //            g_idx = i32 [K] (optional)
  // Tensors of the other formats must be absent.
  TensorView weight;
  TensorView weight_scale;
  TensorView qweight;
  TensorView scales;
  TensorView qzeros;
  TensorView g_idx;
  PagedKVCacheView kv_cache;     // same dtype as hidden_state; kv_dim 2 (ordinary) or 1 (MLA); written
  std::uint32_t layer_idx = 0;
  TensorView output;             // dtype [T, q_dim] (written)
  // Optional: this layer's weights packed by pack_weights (the weight tensors above stay required).
  const FusedQkvPackedWeights* packed_weights = nullptr;
};

Status fused_qkv_paged(const FusedQkvPagedDesc& desc, const FusedQkvPagedArgs& args,
                       const RunOptions& options = {});

// Packs the weights of `weights` (the weight tensors of one layer as a call takes them, and
// hidden_state for the activations' dtype and K: its rows are not read, T may be 0; host memory)
// into the layout the prefill GEMM of this CPU and ISA level reads (the tile GEMM's bf16 pair strips
// on the amx level with bf16 activations, about 2·N·K bytes; the panel GEMM's f32 panels elsewhere,
// 4·N·K bytes, fp8 as code·scale and GPTQ as its bf16 values, both exact in f32), formed by the very
// code that forms them in a call. Where this CPU's prefills read the weights in place (bf16
// activations on the bf16 pair dot of AMD CPUs) the pack holds no panels. GPTQ: the pack also
// holds the codes (about N·K/2 bytes, rows padded so that they do not lie a multiple of 4 KiB
// apart; in the map's group order with an act-order g_idx of whole groups) and, on the avx2 level,
// the decode row's value tables (N·K/4 bytes for groups of 128) and the codes again in the decode
// row's layout (N·K/2 bytes), which every cpu call naming it reads, decode calls included. A call
// that names the pack checks it against its own desc and weight tensors (the same tensors, by data
// pointer, shape and dtype): a pack of other weights is an error. Prefills on the route the pack was made for read it
// instead of laying out the weights; every other call (rows below the route's threshold, another
// ISA level, the reference or cuda back-end) reads the weight tensors (but for the GPTQ codes on
// the cpu back-end). Either way the results are
// bit for bit those of the call without the pack. The weights must not change while a pack made
// from them is used (the pack is a copy and cannot tell).
// What pack_weights lays out.
struct FusedQkvPackOptions {
  // The prefill GEMM's layout (the strips or panels above). false: only what every call reads
  // (GPTQ's codes; nothing for the other formats), for callers that keep decode-sized memory per
  // layer: prefills then lay out their weights per call.
  bool prefill_layout = true;
};
Status pack_weights(const FusedQkvPagedDesc& desc, const FusedQkvPagedArgs& weights, FusedQkvPackedWeights* out,
                    const FusedQkvPackOptions& options = {});

// Plan once per step, run per layer (mlakit/plan.hpp): `step` is a call of the step (any layer);
// its metadata is checked once, here.
using FusedQkvPagedPlan = Plan<FusedQkvPagedDesc, FusedQkvPagedArgs>;
Status plan(const FusedQkvPagedDesc& desc, const FusedQkvPagedArgs& step, const PlanOptions& options, FusedQkvPagedPlan* out);
Status run(const FusedQkvPagedPlan& plan, const FusedQkvPagedArgs& args, const RunContext& context = {});

}  // namespace mlakit
