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

// ---- the deepseek / deepseek_ue8m0 profiles (DeepSeek-V3.2 inference/kernel.py act_quant) --------
//
//   amax = max(max |x|, 1e-4)           (f32; NaN elements do not take part, as above)
//   sa   = amax · f32(1/448)            (one f32 multiply)
//   ue8m0: sa = 2^e, e = exponent_field(sa) − 127 + (mantissa(sa) ≠ 0)   (sa rounded up to 2^k)
//   code = f8e4m3(clamp(x / sa, -448, 448))   (one f32 division, round to nearest even)
//
// For ue8m0 the division by 2^e equals the multiply by the exact 2^-e (also for sa = inf, where
// both give 0, or NaN for an infinite x), so those codes come from quantize_value(x, 1 / sa).

inline constexpr float kDeepseekAmaxFloor = 1e-4f;
inline constexpr float kInvFp8Max = 1.0f / 448.0f;  // f32(1/448), rounded once

MLAKIT_HD float deepseek_scale(float amax, bool ue8m0) {
  const float a = amax > kDeepseekAmaxFloor ? amax : kDeepseekAmaxFloor;
  const float sa = a * kInvFp8Max;
  if (!ue8m0) return sa;
  const std::uint32_t b = f32_to_bits(sa);
  const std::int32_t e = static_cast<std::int32_t>((b >> 23) & 0xFFu) - 127 + ((b & 0x7FFFFFu) != 0 ? 1 : 0);
  // sa >= 1e-4/448 > 2^-23 keeps e far above the subnormal range; e = 128 (sa = inf) stays inf.
  return e > 127 ? bits_to_f32(0x7F800000u) : bits_to_f32(static_cast<std::uint32_t>(e + 127) << 23);
}

// One element of the deepseek profile: f8e4m3(clamp(x / sa, -448, 448)).
MLAKIT_HD std::uint8_t quantize_value_div(float x, float sa) {
  float y = x / sa;
  if (y < -kFp8Max) y = -kFp8Max;
  if (y > kFp8Max) y = kFp8Max;
  return f32_to_f8e4m3(y);
}

// A whole group under a deepseek profile: n values -> n codes; returns sa.
MLAKIT_HD float quantize_group_deepseek(const float* x, std::int64_t n, bool ue8m0, std::uint8_t* codes) {
  const float sa = deepseek_scale(group_amax(x, n), ue8m0);
  if (ue8m0) {
    const float inv = 1.0f / sa;  // exact: a power of two (0 for sa = inf)
    for (std::int64_t i = 0; i < n; ++i) codes[i] = quantize_value(x[i], inv);
  } else {
    for (std::int64_t i = 0; i < n; ++i) codes[i] = quantize_value_div(x[i], sa);
  }
  return sa;
}

}  // namespace mlakit::mla_prefill_fp8_quant
