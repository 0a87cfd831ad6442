// Op 3 — fused MLA prefill branch, FP8 (`mla_prefill_branch_fp8`), docs/mla_prefill_fp8.md.
//
// Seven steps: RoPE on q's rope part and on the new cache rows' rope part (in place), RMSNorm of
// the new cache rows' latent part (in place), gather of latent rows into a contiguous buffer,
// dynamic per-(row, bk-group) FP8 quantization (f32, bit-exact on every back-end), block-scaled
// GEMM with kv_b_proj, split into K_nope / V per head, causal attention -> output bf16 [T, H, v].
//
// Choices where the spec is silent:
// * Phases: steps 1-2 finish for every new token of the call before any row is gathered, so a window
//   always sees the rotated, normalized rows. Two new tokens may not map to the same physical cache
//   row (a page shared between sequences, or listed twice): such a call is rejected.
// * A query whose position is below cache_offsets[b], or whose window is empty, or whose
//   topk_indices row selects no visible key, has no visible key: its output row is 0 (not NaN). New tokens outside their window are still rotated and normalized.
// * Window rows at positions past cache_lengths[b] + seq_len[b] - 1 are never attended; their contents
//   (NaN or inf included) never reach the output. Their KV need not be computed.
// * NaN codes (0x7F/0xFF) in kv_b_proj propagate: a NaN in head h's K rows makes every output of h
//   NaN, one in its V rows makes that output column NaN (for queries with at least one visible key).
// * scale: any finite value. epsilon: finite and > 0 (0 would turn an all-zero latent row into NaN).
//   Every dimension is in [1, 2^24]; rope is even.
// * freqs_cis needs a row for every new token's position; positions are not bounded otherwise.
// * The offsets, page table, cache lengths and cache_offsets are read on the host during validation.
// * Accuracy of other back-ends against the reference: see the mla_prefill_fp8 driver's tolerance.
// * The cpu back-end computes steps 1-2 with the reference's f64 arithmetic (the same bf16 values,
//   bit for bit, in simd kernels over the new tokens in parallel), keeps the
//   softmax weights in f32 under `max` (nothing there allows rounding them) and accumulates in f32 in a fixed
//   order: its results depend neither on the thread count nor on the workspace budget. The call's
//   keys, values and laid-out weights live in buffers that the calling thread keeps for its next
//   calls (their size follows MLAKIT_WORKSPACE_MB: head groups are sized to fit it).
#pragma once

#include <cstdint>

#include "mlakit/backend.hpp"
#include "mlakit/paged_kv_cache.hpp"
#include "mlakit/plan.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit {

// Numerics of steps 2, 4 and 7 (docs/mla_prefill_fp8.md §9). `max`: the spec's two-rounding
// RMSNorm, the capped amax/448 quantizer, f32 softmax weights. `deepseek` / `deepseek_ue8m0`:
// DeepSeek's released inference code: one-rounding RMSNorm (bf16 or f32 gamma), the act_quant
// quantizer (amax floored at 1e-4, sa = amax·f32(1/448), rounded up to a power of two for ue8m0,
// codes from an f32 division), softmax weights normalized in f32 then rounded to bf16 before P·V.
enum class MlaNumerics : std::uint8_t { max, deepseek, deepseek_ue8m0 };

struct MlaPrefillFp8Desc {
  std::int64_t num_heads = 128;  // H
  std::int64_t nope = 128;
  std::int64_t rope = 64;
  std::int64_t v = 128;
  std::int64_t latent = 512;     // kv_lora_rank
  std::int64_t bn = 128;         // weight-scale block rows
  std::int64_t bk = 128;         // weight-scale block columns = activation group
  float scale = 1.0f;            // softmax scale
  float epsilon = 1e-6f;         // RMSNorm epsilon (> 0)
  MlaNumerics numerics = MlaNumerics::max;
};

struct MlaPrefillFp8Args {
  TensorView q;                   // bf16 [T, H, nope + rope]; rope part rotated in place
  TensorView input_row_offsets;   // u32 [B+1]
  TensorView freqs_cis;           // bf16 or f32 [max_pos, rope], interleaved (cos, sin) pairs
  TensorView kv_norm_gamma;       // bf16 [latent]; bf16 or f32 with a deepseek numerics profile
  PagedKVCacheView kv_cache;      // bf16 MLA cache, kv_dim 1, 1 head, head_size latent + rope; new rows updated in place
  std::uint32_t layer_idx = 0;
  TensorView buffer_row_offsets;  // u32 [B+1]
  TensorView cache_offsets;       // u32 [B] or [B+1] (last entry ignored)
  std::int64_t buffer_length = 0; // must equal buffer_row_offsets[B]
  TensorView kv_b_proj;           // f8e4m3 [H·(nope+v), latent]
  TensorView kv_b_proj_scale;     // f32 [ceil(H·(nope+v)/bn), ceil(latent/bk)]
  // Optional (DeepSeek-V3.2 prefill): i32 [T, top_k], the logical key positions each query may
  // attend (op 1's output), -1 = none. Key j of query t is then visible iff it is causally visible
  // and cache_offsets[b] + j appears in row t; any other value selects nothing.
  TensorView topk_indices;
  TensorView output;              // bf16 [T, H, v] (written)
};

Status mla_prefill_fp8(const MlaPrefillFp8Desc& desc, const MlaPrefillFp8Args& args,
                       const RunOptions& options = {});

// Plan once per step, run per layer (mlakit/plan.hpp): `step` is a call of the step (any layer);
// its metadata is checked once, here.
using MlaPrefillFp8Plan = Plan<MlaPrefillFp8Desc, MlaPrefillFp8Args>;
Status plan(const MlaPrefillFp8Desc& desc, const MlaPrefillFp8Args& step, const PlanOptions& options, MlaPrefillFp8Plan* out);
Status run(const MlaPrefillFp8Plan& plan, const MlaPrefillFp8Args& args, const RunContext& context = {});

}  // namespace mlakit
