// Vector wrappers for the avx2 level (AVX2 + FMA + F16C + BMI2): 8 f32 / i32 lanes.
//
// The vocabulary every level provides (the kernel bodies use nothing else):
//   kLanes, kLevelName; F (kLanes f32), I (kLanes i32), M (lane mask)
//   fzero fsplat fload fload_n fload_bf16 fload_bf16_n fstore fstore_n  (_n: first n < kLanes
//     lanes, the rest zero on load / untouched on store)
//   F+F F-F F*F fmadd(a,b,c)=a*b+c  fmax fmin (NaN: either operand may come out)  is_nan flt bits floats
//     reduce_add reduce_add4
//   isplat iload istore istore_n iload_u8 iload_u8_n istore_u16 istore_u16_pair istore_u16_n
//     istore_u8 istore_u8_n (lanes holding 0 .. 255)
//   I&I I|I I^I I+I shl<S> shr<S> (logical) sar<S>  cmpeq cmpgt (signed) M|M select(m,a,b) (I or F)
//     any(m) movemask
//   igather(table, idx) (levels with a gather instruction: avx2 and above)
//   H (kLanes i16): hsplat hload_s8 hload_s8_n (bytes sign extended) H&H H|H H^H H+H shl<S>
//     hcmpeq (all-ones lanes) any_set f16_to_f32 (exact for every f16, subnormals included)
//   fsplat_two fzip (vector levels, avx2 and above: two keys per vector in block_score)
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__) || !defined(__BMI2__)
#error "simd/vec/vec_avx2.hpp needs -mavx2 -mfma -mf16c -mbmi2: include it only from simd/<level>/ files of level avx2 or above"
#endif
#if !defined(MLAKIT_SIMD_NS)
#error "include simd/vec/level.hpp, not this header"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mlakit::simd::MLAKIT_SIMD_NS {

constexpr std::size_t kLanes = 8;
constexpr const char* kLevelName = "avx2";

struct F { __m256 v; };
struct I { __m256i v; };
struct M { __m256i v; };  // all-ones / all-zeros lanes
struct H { __m128i v; };  // kLanes i16 lanes

namespace detail {
inline __m256i first_n_mask(std::size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
}  // namespace detail

inline F fzero() { return {_mm256_setzero_ps()}; }
inline F fsplat(float x) { return {_mm256_set1_ps(x)}; }
inline F fload(const float* p) { return {_mm256_loadu_ps(p)}; }
inline F fload_n(const float* p, std::size_t n) { return {_mm256_maskload_ps(p, detail::first_n_mask(n))}; }
inline F fload_bf16(const std::uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(w, 16))};
}
inline F fload_bf16_n(const std::uint16_t* p, std::size_t n) {
  std::uint16_t tmp[8] = {};
  std::memcpy(tmp, p, n * 2);
  return fload_bf16(tmp);
}
inline void fstore(float* p, F a) { _mm256_storeu_ps(p, a.v); }
inline void fstore_n(float* p, F a, std::size_t n) { _mm256_maskstore_ps(p, detail::first_n_mask(n), a.v); }
// p[0] in the even lanes, p[1] in the odd ones (one load-port broadcast of 64 bits).
inline F fsplat_two(const float* p) {
  return {_mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(p)))};
}
// Interleaves a and b: lo = a0 b0 a1 b1 a2 b2 a3 b3, hi = a4 b4 .. a7 b7.
inline void fzip(F a, F b, F* lo, F* hi) {
  const __m256 l = _mm256_unpacklo_ps(a.v, b.v);  // a0 b0 a1 b1 | a4 b4 a5 b5
  const __m256 h = _mm256_unpackhi_ps(a.v, b.v);  // a2 b2 a3 b3 | a6 b6 a7 b7
  lo->v = _mm256_permute2f128_ps(l, h, 0x20);
  hi->v = _mm256_permute2f128_ps(l, h, 0x31);
}
inline F operator+(F a, F b) { return {_mm256_add_ps(a.v, b.v)}; }
inline F operator*(F a, F b) { return {_mm256_mul_ps(a.v, b.v)}; }
// IEEE division, correctly rounded (the FP8 quantizer of the deepseek profiles divides).
inline F operator/(F a, F b) { return {_mm256_div_ps(a.v, b.v)}; }
inline F fmadd(F a, F b, F c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
inline F fmax(F a, F b) { return {_mm256_max_ps(a.v, b.v)}; }
inline F fmin(F a, F b) { return {_mm256_min_ps(a.v, b.v)}; }
inline F operator-(F a, F b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline M flt(F a, F b) { return {_mm256_castps_si256(_mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ))}; }  // false for NaN
inline M is_nan(F a) { return {_mm256_castps_si256(_mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q))}; }
inline I bits(F a) { return {_mm256_castps_si256(a.v)}; }
inline F floats(I a) { return {_mm256_castsi256_ps(a.v)}; }
inline float reduce_add(F a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline void reduce_add4(F a, F b, F c, F d, float* out) {
  const __m256 ab = _mm256_hadd_ps(a.v, b.v);
  const __m256 cd = _mm256_hadd_ps(c.v, d.v);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // [a b c d | a b c d] per 128-bit half
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}

inline I isplat(std::int32_t x) { return {_mm256_set1_epi32(x)}; }
inline I iload(const std::int32_t* p) { return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))}; }
inline void istore(std::int32_t* p, I a) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), a.v); }
inline void istore_n(std::int32_t* p, I a, std::size_t n) { _mm256_maskstore_epi32(p, detail::first_n_mask(n), a.v); }
inline I iload_u8(const std::uint8_t* p) {
  return {_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))};
}
// Lane l: table[idx[l]] (vpgatherdd).
inline I igather(const std::uint32_t* table, I idx) {
  return {_mm256_i32gather_epi32(reinterpret_cast<const int*>(table), idx.v, 4)};
}
inline I iload_u8_n(const std::uint8_t* p, std::size_t n) {
  std::uint8_t tmp[8] = {};
  std::memcpy(tmp, p, n);
  return iload_u8(tmp);
}
// Lanes must hold values in [0, 65535] (packus saturates).
inline void istore_u16(std::uint16_t* p, I a) {
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a.v, a.v), 0xD8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}
// 2*kLanes values: a's lanes then b's.
inline void istore_u16_pair(std::uint16_t* p, I a, I b) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(_mm256_packus_epi32(a.v, b.v), 0xD8));
}
inline void istore_u16_n(std::uint16_t* p, I a, std::size_t n) {
  std::uint16_t tmp[8];
  istore_u16(tmp, a);
  std::memcpy(p, tmp, n * 2);
}
// Lanes holding 0 .. 255, stored as bytes.
inline void istore_u8(std::uint8_t* p, I a) {
  const __m256i w = _mm256_packus_epi32(a.v, a.v);  // per 128-bit half: lanes 0-3 twice as words
  const __m256i b = _mm256_packus_epi16(w, w);      // ... and as bytes
  const __m128i lo = _mm256_castsi256_si128(b), hi = _mm256_extracti128_si256(b, 1);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_unpacklo_epi32(lo, hi));
}
inline void istore_u8_n(std::uint8_t* p, I a, std::size_t n) {
  std::uint8_t tmp[8];
  istore_u8(tmp, a);
  std::memcpy(p, tmp, n);
}
inline I operator&(I a, I b) { return {_mm256_and_si256(a.v, b.v)}; }
inline I operator|(I a, I b) { return {_mm256_or_si256(a.v, b.v)}; }
inline I operator^(I a, I b) { return {_mm256_xor_si256(a.v, b.v)}; }
inline I operator+(I a, I b) { return {_mm256_add_epi32(a.v, b.v)}; }
template <int S> inline I shl(I a) { return {_mm256_slli_epi32(a.v, S)}; }
template <int S> inline I shr(I a) { return {_mm256_srli_epi32(a.v, S)}; }
template <int S> inline I sar(I a) { return {_mm256_srai_epi32(a.v, S)}; }
inline M cmpeq(I a, I b) { return {_mm256_cmpeq_epi32(a.v, b.v)}; }
inline M cmpgt(I a, I b) { return {_mm256_cmpgt_epi32(a.v, b.v)}; }
inline M operator|(M a, M b) { return {_mm256_or_si256(a.v, b.v)}; }
inline I select(M m, I a, I b) { return {_mm256_blendv_epi8(b.v, a.v, m.v)}; }
inline F select(M m, F a, F b) { return {_mm256_blendv_ps(b.v, a.v, _mm256_castsi256_ps(m.v))}; }
inline bool any(M m) { return !_mm256_testz_si256(m.v, m.v); }

inline H hsplat(std::int16_t x) { return {_mm_set1_epi16(x)}; }
inline H hload_s8(const std::uint8_t* p) {
  return {_mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))};
}
inline H hload_s8_n(const std::uint8_t* p, std::size_t n) {
  std::uint8_t tmp[8] = {};
  std::memcpy(tmp, p, n);
  return hload_s8(tmp);
}
inline H operator&(H a, H b) { return {_mm_and_si128(a.v, b.v)}; }
inline H operator|(H a, H b) { return {_mm_or_si128(a.v, b.v)}; }
inline H operator^(H a, H b) { return {_mm_xor_si128(a.v, b.v)}; }
inline H operator+(H a, H b) { return {_mm_add_epi16(a.v, b.v)}; }
template <int S> inline H shl(H a) { return {_mm_slli_epi16(a.v, S)}; }
inline H hcmpeq(H a, H b) { return {_mm_cmpeq_epi16(a.v, b.v)}; }
inline bool any_set(H a) { return !_mm_testz_si128(a.v, a.v); }
// Whether any of the n bytes at p has (byte & mask) == value: 32 bytes a step.
inline bool any_byte_masked_eq(const std::uint8_t* p, std::size_t n, std::uint8_t mask, std::uint8_t value) {
  const __m256i m = _mm256_set1_epi8(static_cast<char>(mask)), v = _mm256_set1_epi8(static_cast<char>(value));
  __m256i seen = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32)
    seen = _mm256_or_si256(seen, _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)), m), v));
  bool any = !_mm256_testz_si256(seen, seen);
  for (; i < n; ++i) any |= (p[i] & mask) == value;
  return any;
}
inline F f16_to_f32(H a) { return {_mm256_cvtph_ps(a.v)}; }
inline std::uint32_t movemask(M m) {
  return static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(m.v)));
}

}  // namespace mlakit::simd::MLAKIT_SIMD_NS
