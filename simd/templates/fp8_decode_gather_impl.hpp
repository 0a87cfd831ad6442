// The fp8 decode through the 256-entry table and a vector gather (the `alt` method of the levels
// with vpgatherdd): written once, compiled by simd/<level>/fp8_decode.cpp of those levels.
#pragma once

#include "simd/templates/fp8_decode_impl.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

inline I gather_f32_bits(I code) { return igather(kFp8Table.f32, code); }

void fp8_to_f32_lut(const std::uint8_t* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) fstore(dst + i, floats(gather_f32_bits(iload_u8(src + i))));
  if (i < n) fstore_n(dst + i, floats(gather_f32_bits(iload_u8_n(src + i, n - i))), n - i);
}
void fp8_to_bf16_lut(const std::uint8_t* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) istore_u16(dst + i, shr<16>(gather_f32_bits(iload_u8(src + i))));
  if (i < n) istore_u16_n(dst + i, shr<16>(gather_f32_bits(iload_u8_n(src + i, n - i))), n - i);
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
