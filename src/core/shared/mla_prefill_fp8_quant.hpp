// Step 4 of mla_prefill_fp8 (docs/mla_prefill_fp8.md §3): dynamic FP8 quantization of one bk-column group of a
// gathered latent row. The spec defines this step bit for bit, so every back-end (reference, cpu,
// cuda) calls these functions and the FP8 codes and group scales agree exactly.
//
//   amax = max |x|                      (f32; NaN elements do not take part)
//   sa   = min(amax, 1200) / 448        (f32, IEEE division)
//   inv  = 1 / sa                       (f32, IEEE division); 0 when sa is 0 or 1/sa is not finite
//   code = f8e4m3(clamp(x · inv, -448, 448))   (one f32 multiply, round to nearest even; NaN -> 0x7F)
//
// Every operation is a single correctly rounded f32 operation, so the result does not depend on
// evaluation order. CUDA builds must keep IEEE division (no --use_fast_math, no -prec-div=false):
// an approximate reciprocal changes `inv` and with it the codes.
#pragma once

#include <cstdint>

#include "mlakit/dtype.hpp"

namespace mlakit::mla_prefill_fp8_quant {

inline constexpr float kAmaxCap = 1200.0f;
inline constexpr float kFp8Max = 448.0f;

// max |x| over n values; NaN is skipped (a comparison with NaN is false), +-inf counts as inf.
MLAKIT_HD float group_amax(const float* x, std::int64_t n) {
  float amax = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    if (a > amax) amax = a;
  }
  return amax;
}

// The group's scale sa (what the GEMM multiplies back in).
MLAKIT_HD float group_scale(float amax) { return (amax < kAmaxCap ? amax : kAmaxCap) / kFp8Max; }

// The multiplier applied before rounding: 1/sa, or 0 when sa is 0 or its reciprocal overflows.
MLAKIT_HD float group_inverse(float sa) {
  if (sa == 0.0f) return 0.0f;
  const float inv = 1.0f / sa;
  const float d = inv - inv;  // 0 for finite inv, NaN for inf/NaN
  return d == 0.0f ? inv : 0.0f;
}

// One element: f8e4m3(clamp(x·inv, -448, 448)). A NaN product passes the clamp and becomes 0x7F.
MLAKIT_HD std::uint8_t quantize_value(float x, float inv) {
  float y = x * inv;
  if (y < -kFp8Max) y = -kFp8Max;
  if (y > kFp8Max) y = kFp8Max;
  return f32_to_f8e4m3(y);
}

// A whole group: n values -> n codes; returns sa.
MLAKIT_HD float quantize_group(const float* x, std::int64_t n, std::uint8_t* codes) {
  const float sa = group_scale(group_amax(x, n));
  const float inv = group_inverse(sa);
  for (std::int64_t i = 0; i < n; ++i) codes[i] = quantize_value(x[i], inv);
  return sa;
}

}  // namespace mlakit::mla_prefill_fp8_quant
