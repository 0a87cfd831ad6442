// bf16 <-> f32 inside the kernels: f32 lanes rounded to bf16 on the level's vector vocabulary, as
// mlakit::f32_to_bf16 does it (to nearest even, NaN quieted with its sign and top payload), and one
// bf16 element widened exactly. (simd/ never calls the element-type functions themselves: see
// level.hpp.)
#pragma once

#include <cstdint>

#include "simd/vec/level.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// One bf16 element as f32 (exact: its bits are the f32's upper half).
inline float f32_of_bf16(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

// Lanes of f32 bits -> the bf16 bits in the low half of each lane.
inline I bf16_round_bits(I u) {
  const I rounded = shr<16>(u + isplat(0x7FFF) + (shr<16>(u) & isplat(1)));
  const I quiet_nan = shr<16>(u | isplat(0x00400000));
  return select(cmpgt(u & isplat(0x7FFFFFFF), isplat(0x7F800000)), quiet_nan, rounded);
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
