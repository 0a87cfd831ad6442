// Reference back-end of mla_prefill_fp8 (docs/mla_prefill_fp8.md): scalar, exact decode, f64 arithmetic, one
// rounding to bf16 per stored value; step 4 (FP8 quantization) in f32 exactly as the spec writes it.
// The arguments are assumed valid (core::validate_mla_prefill_fp8 ran).
#pragma once

#include "mlakit/ops/mla_prefill_fp8.hpp"

namespace mlakit::reference {

// Steps 1-7.
void mla_prefill_fp8(const MlaPrefillFp8Desc& desc, const MlaPrefillFp8Args& args);

// How far an optimized back-end's output may be from the reference's when both start from the same
// q and cache after steps 1-2 (same FP8 codes, then): the relative accuracy of its arithmetic.
//   kv_eps:              |KV' - KV| <= kv_eps · Σ_k |x_k·W_nk| before KV is rounded to bf16
//   score_eps:           |s' - s|   <= score_eps · (|scale|·Σ_d |q_d·k_d| + the row's largest such sum)
//   softmax_eps_per_key, softmax_eps_fixed:
//                        the softmax-weighted sum of V is computed to within
//                        (per_key · visible_keys + fixed) · Σ_j p_j |V_jd|
struct MlaPrefillFp8BoundModel {
  double kv_eps = 0;
  double score_eps = 0;
  double softmax_eps_per_key = 0;
  double softmax_eps_fixed = 0;
};

// Steps 3-7 only: reads q and the cache as they are (already rotated and normalized) and writes
// args.output. With `model` and `bound` given, bound[t·H·v + h·v + d] receives the largest
// |output' - output| (before output' is rounded to bf16) of a back-end that follows `model`:
// KV elements whose rounding such a back-end may resolve differently count one bf16 step each,
// score errors move the softmax weights by at most a factor exp(±2Δ).
void mla_prefill_fp8_attention(const MlaPrefillFp8Desc& desc, const MlaPrefillFp8Args& args,
                               const MlaPrefillFp8BoundModel* model = nullptr, double* bound = nullptr);

}  // namespace mlakit::reference
