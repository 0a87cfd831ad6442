// FP8 group quantization kernels (simd/fp8_quant.hpp), written once on the level's vector
// vocabulary; compiled per level by simd/<level>/fp8_quant.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "simd/vec/level.hpp"
#include "simd/fp8_quant.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

float amax_bf16(const std::uint16_t* x, std::size_t n) {
  const I magnitude = isplat(0x7FFFFFFF);
  F m = fzero();
  std::size_t p = 0;
  for (; p + kLanes <= n; p += kLanes) {
    const F a = floats(bits(fload_bf16(x + p)) & magnitude);
    m = select(flt(m, a), a, m);  // false for NaN: NaN never enters
  }
  if (p < n) {
    const F a = floats(bits(fload_bf16_n(x + p, n - p)) & magnitude);
    m = select(flt(m, a), a, m);
  }
  alignas(64) float lanes[kLanes];
  fstore(lanes, m);
  float r = 0.0f;
  for (float v : lanes) r = v > r ? v : r;
  return r;
}

// f32_to_f8e4m3 on every lane (mlakit/dtype.hpp), branch for branch.
inline I fp8_codes(F y) {
  const I u = bits(y);
  const I a = u & isplat(0x7FFFFFFF);
  const I sign = shr<24>(u) & isplat(0x80);
  // |y| < 2^-6: in units of 2^-9, rounded to the nearest even integer by an add whose ulp is 1
  // (1.5·2^23 + m has the bits 0x4B400000 + m).
  const I sub = bits(floats(a) * fsplat(512.0f) + fsplat(12582912.0f)) + isplat(-0x4B400000);
  // Otherwise the exponent rebiased (127 -> 7) and the mantissa rounded to 3 bits.
  I v = a + isplat(-0x3C000000);
  v = v + isplat(0x7FFFF) + (shr<20>(v) & isplat(1));
  // (Below 448 this rounds to at most 448, 0x7E: the scalar's clamp after rounding never acts.)
  I code = shr<20>(v);
  code = select(cmpgt(isplat(0x3C800000), a), sub, code);
  code = select(cmpgt(a, isplat(0x43DFFFFF)), isplat(0x7E), code);  // |y| >= 448, inf too
  return select(cmpgt(a, isplat(0x7F800000)), isplat(0x7F), code | sign);
}

void encode_bf16(const std::uint16_t* x, std::size_t n, float inv, std::uint8_t* codes) {
  const F s = fsplat(inv);
  std::size_t p = 0;
  for (; p + kLanes <= n; p += kLanes) istore_u8(codes + p, fp8_codes(fload_bf16(x + p) * s));
  if (p < n) istore_u8_n(codes + p, fp8_codes(fload_bf16_n(x + p, n - p) * s), n - p);
}

void encode_div_bf16(const std::uint16_t* x, std::size_t n, float sa, std::uint8_t* codes) {
  const F s = fsplat(sa);
  std::size_t p = 0;
  for (; p + kLanes <= n; p += kLanes) istore_u8(codes + p, fp8_codes(fload_bf16(x + p) / s));
  if (p < n) istore_u8_n(codes + p, fp8_codes(fload_bf16_n(x + p, n - p) / s), n - p);
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
