// Vector wrappers for the avx512bf16 level: the avx512 wrappers plus a native bf16 pair dot
// product (vdpbf16ps) on 32 bf16 lanes. The level's flags also carry AVX512-VBMI and VNNI
// (cpu_features requires them for this level).
#pragma once

#if !defined(__AVX512BF16__) || !defined(__AVX512VBMI__) || !defined(__AVX512VNNI__)
#error "simd/vec/vec_avx512bf16.hpp needs -mavx512bf16 -mavx512vbmi -mavx512vnni: include it only from simd/avx512bf16/ (or amx) files"
#endif

#define MLAKIT_SIMD_LEVEL_NAME_SET 1
#include "simd/vec/vec_avx512.hpp"

#define MLAKIT_SIMD_HAS_BF16_DOT 1

namespace mlakit::simd::MLAKIT_SIMD_NS {

constexpr const char* kLevelName = "avx512bf16";

// 2*kLanes bf16 values (the bit patterns), consumed in pairs by bf16_dot.
struct B { __m512i v; };
constexpr std::size_t kBf16Lanes = 2 * kLanes;

inline B bload(const std::uint16_t* p) { return {_mm512_loadu_si512(p)}; }
inline B bload_n(const std::uint16_t* p, std::size_t n) {  // n < 32; the rest zero
  return {_mm512_maskz_loadu_epi16(static_cast<__mmask32>((1u << n) - 1u), p)};
}
// acc[i] += a[2i]*b[2i] + a[2i+1]*b[2i+1]. The products are exact in f32; vdpbf16ps treats
// bf16 denormal inputs as zero (f8e4m3 values are never bf16 denormals).
inline F bf16_dot(F acc, B a, B b) {
  return {_mm512_dpbf16_ps(acc.v, (__m512bh)a.v, (__m512bh)b.v)};
}
// One bf16 pair (p[0], p[1]) in every 32-bit lane: the broadcast operand of a pair dot (folds into
// vdpbf16ps's embedded {1to16} broadcast).
inline B bsplat_pair(const std::uint16_t* p) {
  std::int32_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return {_mm512_set1_epi32(v)};
}
inline void bstore(std::uint16_t* p, B a) { _mm512_storeu_si512(p, a.v); }
// a's 16 floats then b's, rounded to bf16 (to nearest even; exact for values with at most 8
// significant bits, such as decoded f8e4m3 codes).
inline B bf16_from_f32(F a, F b) { return {(__m512i)_mm512_cvtne2ps_pbh(b.v, a.v)}; }


// ---- block_score: two keys per vector (decode of one lane group that fills half the lanes) ----
inline B bzero() { return {_mm512_setzero_si512()}; }
// n < 32 bf16 values of a, the rest of p untouched.
inline void bstore_n(std::uint16_t* p, B a, std::size_t n) {
  _mm512_mask_storeu_epi16(p, static_cast<__mmask32>((1u << n) - 1u), a.v);
}
// Two bf16 pairs (p[0..3]) in every 64-bit lane: lanes 2i take the first pair, lanes 2i+1 the
// second (a plain load-port broadcast; vdpbf16ps only embeds 32-bit ones).
inline B bsplat_two_pairs(const std::uint16_t* p) {
  std::int64_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return {_mm512_set1_epi64(v)};
}
// Interleaves the bf16 pairs (32-bit units) of a and b: lo = a0 b0 a1 b1 .. a7 b7, hi = a8 b8 .. a15 b15.
inline void bzip_pairs(B a, B b, B* lo, B* hi) {
  F l, h;
  fzip(F{_mm512_castsi512_ps(a.v)}, F{_mm512_castsi512_ps(b.v)}, &l, &h);
  lo->v = _mm512_castps_si512(l.v);
  hi->v = _mm512_castps_si512(h.v);
}

// Interleaves the words of a and b: lo = a0 b0 a1 b1 .. a15 b15, hi = a16 b16 .. a31 b31.
inline void bzip_words(B a, B b, B* lo, B* hi) {
  alignas(64) static constexpr std::uint16_t kLo[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                        8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr std::uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                        24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  lo->v = _mm512_permutex2var_epi16(a.v, _mm512_load_si512(kLo), b.v);
  hi->v = _mm512_permutex2var_epi16(a.v, _mm512_load_si512(kHi), b.v);
}

}  // namespace mlakit::simd::MLAKIT_SIMD_NS
