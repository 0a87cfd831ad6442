// The fp8 decode kernels, written once; compiled per level by simd/<level>/fp8_decode.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "simd/common/level.hpp"
#include "simd/fp8_decode.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// kLanes fp8 codes (zero-extended into i32 lanes) -> f32 bit patterns.
inline I fp8_lanes_to_f32_bits(I code) {
  const I mag = code & isplat(0x7F);
  I v = bits(floats(shl<20>(mag)) * fsplat(0x1p120f));
  v = select(cmpeq(mag, isplat(0x7F)), isplat(0x7FC00000), v);
  return v | (shl<24>(code) & isplat(static_cast<std::int32_t>(0x80000000u)));
}

// kLanes codes, sign-extended into i32 lanes (iload_s8) -> their f32 values, exact for every code
// but the two NaNs (0x7F, 0xFF), which come out as +-480 and set bit 27 of `watch`: 5 vector ops
// where the exact form above takes 8, for callers that redo their work exactly when a NaN shows.
// After the shift and mask, lane bits are sign | code bits 6..0 at 26..20, whose largest value
// (0x7F, the NaN) is the only one that carries into bit 27 when one more is added.
inline F fp8_lanes_to_f32_watched(I sext_code, I& watch) {
  const I w = shl<20>(sext_code) & isplat(static_cast<std::int32_t>(0x87F00000u));
  watch = watch | (w + isplat(1 << 20));
  return floats(w) * fsplat(0x1p120f);
}
inline bool fp8_watch_saw_nan(I watch) {
  const I bit = isplat(1 << 27);
  return any(cmpeq(watch & bit, bit));
}

void fp8_to_f32(const std::uint8_t* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const I c0 = iload_u8(src + i), c1 = iload_u8(src + i + kLanes);
    const I c2 = iload_u8(src + i + 2 * kLanes), c3 = iload_u8(src + i + 3 * kLanes);
    fstore(dst + i, floats(fp8_lanes_to_f32_bits(c0)));
    fstore(dst + i + kLanes, floats(fp8_lanes_to_f32_bits(c1)));
    fstore(dst + i + 2 * kLanes, floats(fp8_lanes_to_f32_bits(c2)));
    fstore(dst + i + 3 * kLanes, floats(fp8_lanes_to_f32_bits(c3)));
  }
  for (; i + kLanes <= n; i += kLanes) fstore(dst + i, floats(fp8_lanes_to_f32_bits(iload_u8(src + i))));
  if (i < n) fstore_n(dst + i, floats(fp8_lanes_to_f32_bits(iload_u8_n(src + i, n - i))), n - i);
}

// Every fp8 value has at most 4 significant bits, so its f32 pattern has 16 zero low bits and the
// bf16 pattern is the high half: no rounding happens.
void fp8_to_bf16(const std::uint8_t* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const I c0 = iload_u8(src + i), c1 = iload_u8(src + i + kLanes);
    istore_u16_pair(dst + i, shr<16>(fp8_lanes_to_f32_bits(c0)), shr<16>(fp8_lanes_to_f32_bits(c1)));
  }
  for (; i + kLanes <= n; i += kLanes) istore_u16(dst + i, shr<16>(fp8_lanes_to_f32_bits(iload_u8(src + i))));
  if (i < n) istore_u16_n(dst + i, shr<16>(fp8_lanes_to_f32_bits(iload_u8_n(src + i, n - i))), n - i);
}

// The 256 f32 patterns, computed without floating point (used by the table variants).
constexpr std::uint32_t fp8_f32_pattern(unsigned c) {
  const std::uint32_t sign = std::uint32_t(c & 0x80u) << 24;
  const unsigned e = (c >> 3) & 0xFu, m = c & 0x7u;
  if (e == 0xF && m == 0x7) return sign | 0x7FC00000u;
  if (e != 0) return sign | ((e + 120u) << 23) | (m << 20);
  if (m == 0) return sign;
  // m * 2^-9 with m in 1..7: normalise the leading one of m.
  unsigned p = 2;
  while (!(m >> p)) --p;  // p = floor(log2 m)
  const std::uint32_t exp = 127u - 9u + p;
  const std::uint32_t frac = (std::uint32_t(m) << (23 - p)) & 0x7FFFFFu;
  return sign | (exp << 23) | frac;
}

struct Fp8Table {
  std::uint32_t f32[256];
  constexpr Fp8Table() : f32() {
    for (unsigned c = 0; c < 256; ++c) f32[c] = fp8_f32_pattern(c);
  }
};
constexpr Fp8Table kFp8Table{};

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
