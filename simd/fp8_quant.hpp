// FP8 (f8e4m3) quantization of bf16 values with a group scale: ISA-neutral declarations.
//
// The two halves of a dynamic per-group quantizer (the caller forms the group's scale and its
// inverse from the amax): both bit for bit what the scalar definitions give.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlakit::simd {

struct Fp8QuantKernels {
  const char* level;
  // max |x| over n bf16 values: NaN takes no part, ±inf counts as inf; 0 when n is 0 or every
  // value is NaN. (A maximum is exact, so the order of the comparisons does not matter.)
  float (*amax_bf16)(const std::uint16_t* x, std::size_t n);
  // codes[i] = mlakit::f32_to_f8e4m3(x[i] · inv): one f32 multiply (nearest even), then the
  // saturating conversion (nearest even; |y| >= 448 and ±inf to ±448, NaN to 0x7F). Saturation
  // makes this the same as converting the product clamped to [-448, 448] first.
  void (*encode_bf16)(const std::uint16_t* x, std::size_t n, float inv, std::uint8_t* codes);
  // codes[i] = mlakit::f32_to_f8e4m3(x[i] / sa): one f32 division (nearest even), then the same
  // saturating conversion (the deepseek profile's quantizer).
  void (*encode_div_bf16)(const std::uint16_t* x, std::size_t n, float sa, std::uint8_t* codes);
};

}  // namespace mlakit::simd
