// The fp8 decode kernels, written once; compiled per level by simd/<level>/fp8_decode.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "simd/vec/level.hpp"
#include "simd/fp8_decode.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// The via-f16 decode (why this route: simd/fp8_decode.hpp). E4M3's exponent and mantissa fields
// drop into f16's as they are (shift left by 7), so every finite code becomes the f16 of its value
// times 2^-8; subnormal codes stay subnormal there, and the converter widens those exactly.
// The NaN codes land on f16 +-1.875 (0x3F80 plus the sign), which no finite code shares.
//
// kLanes codes sign-extended into i16 lanes -> their f16 patterns times 2^-8 (NaN codes: +-1.875).
inline H fp8_as_scaled_f16(H sext_code) {
  return shl<7>(sext_code) & hsplat(static_cast<std::int16_t>(0xBF80));  // sign at 15, code bits 6..0 at 13..7
}

// kLanes codes sign-extended into i16 lanes (hload_s8) -> their f32 values times 2^-8, bit-exact
// for all 256 (the widening alone: for callers that put the 2^8 on their other factor).
inline F fp8_lanes_to_f32_scaled(H sext_code) {
  H h = fp8_as_scaled_f16(sext_code);
  const H nan = hcmpeq(h & hsplat(0x3F80), hsplat(0x3F80));
  h = h ^ (nan & hsplat(0x4180));  // 0x3F80 -> 0x7E00, the f16 quiet NaN; the converter keeps its sign
  return f16_to_f32(h);
}
// The values themselves.
inline F fp8_lanes_to_f32(H sext_code) { return fp8_lanes_to_f32_scaled(sext_code) * fsplat(256.0f); }

// The same without the NaN fix: exact for every code but the two NaNs (0x7F, 0xFF), which come out
// as +-480 and set bit 14 of `watch`. For callers that redo their work exactly when a NaN shows.
// Lane bits 13..7 hold code bits 6..0 and bit 14 is clear, so adding one at bit 7 carries into bit
// 14 for the NaN codes only.
inline F fp8_lanes_to_f32_watched(H sext_code, H& watch) {
  const H h = fp8_as_scaled_f16(sext_code);
  watch = watch | (h + hsplat(0x80));
  return f16_to_f32(h) * fsplat(256.0f);
}
inline bool fp8_watch_saw_nan(H watch) { return any_set(watch & hsplat(0x4000)); }

// The same with no watch: for callers that look for the NaN codes in the bytes instead
// (fp8_rows_have_nan: a compare per 32 or 64 codes, where the watch costs two operations per
// vector of decoded lanes).
inline F fp8_lanes_to_f32_scaled_unpatched(H sext_code) { return f16_to_f32(fp8_as_scaled_f16(sext_code)); }
// Whether any of `rows` rows of n codes, ld apart, holds a NaN code (0x7F, 0xFF).
inline bool fp8_rows_have_nan(const std::uint8_t* p, std::size_t ld, std::size_t rows, std::size_t n) {
  for (std::size_t r = 0; r < rows; ++r)
    if (any_byte_masked_eq(p + r * ld, n, 0x7F, 0x7F)) return true;
  return false;
}

inline void fp8_to_f32(const std::uint8_t* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const H c0 = hload_s8(src + i), c1 = hload_s8(src + i + kLanes);
    const H c2 = hload_s8(src + i + 2 * kLanes), c3 = hload_s8(src + i + 3 * kLanes);
    fstore(dst + i, fp8_lanes_to_f32(c0));
    fstore(dst + i + kLanes, fp8_lanes_to_f32(c1));
    fstore(dst + i + 2 * kLanes, fp8_lanes_to_f32(c2));
    fstore(dst + i + 3 * kLanes, fp8_lanes_to_f32(c3));
  }
  for (; i + kLanes <= n; i += kLanes) fstore(dst + i, fp8_lanes_to_f32(hload_s8(src + i)));
  if (i < n) fstore_n(dst + i, fp8_lanes_to_f32(hload_s8_n(src + i, n - i)), n - i);
}

// Every fp8 value has at most 4 significant bits, so its f32 pattern has 16 zero low bits and the
// bf16 pattern is the high half: no rounding happens.
inline I fp8_lanes_to_bf16_bits(H sext_code) { return shr<16>(bits(fp8_lanes_to_f32(sext_code))); }
inline void fp8_to_bf16(const std::uint8_t* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes)
    istore_u16_pair(dst + i, fp8_lanes_to_bf16_bits(hload_s8(src + i)), fp8_lanes_to_bf16_bits(hload_s8(src + i + kLanes)));
  for (; i + kLanes <= n; i += kLanes) istore_u16(dst + i, fp8_lanes_to_bf16_bits(hload_s8(src + i)));
  if (i < n) istore_u16_n(dst + i, fp8_lanes_to_bf16_bits(hload_s8_n(src + i, n - i)), n - i);
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
