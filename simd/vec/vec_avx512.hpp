// Vector wrappers for the avx512 level (AVX-512 F/BW/VL/DQ on top of avx2): 16 f32 / i32 lanes,
// masks in k registers. Same vocabulary as vec_avx2.hpp.
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__) || \
    !defined(__AVX2__) || !defined(__FMA__)
#error "simd/vec/vec_avx512.hpp needs -mavx512f -mavx512bw -mavx512vl -mavx512dq: include it only from simd/<level>/ files of level avx512 or above"
#endif
#if !defined(MLAKIT_SIMD_NS)
#error "include simd/vec/level.hpp, not this header"
#endif

#include <immintrin.h>

// GCC 12's AVX-512 intrinsics build their "undefined" operands as `__m512 __Y = __Y;`, which
// -W(maybe-)uninitialized report wherever they are inlined. Off for the rest of this (simd-only)
// translation unit.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <cstddef>
#include <cstdint>

namespace mlakit::simd::MLAKIT_SIMD_NS {

constexpr std::size_t kLanes = 16;

struct F { __m512 v; };
struct I { __m512i v; };
struct M { __mmask16 v; };
struct H { __m256i v; };  // kLanes i16 lanes

namespace detail {
inline __mmask16 first_n(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }  // n < 16
}  // namespace detail

inline F fzero() { return {_mm512_setzero_ps()}; }
inline F fsplat(float x) { return {_mm512_set1_ps(x)}; }
inline F fload(const float* p) { return {_mm512_loadu_ps(p)}; }
inline F fload_n(const float* p, std::size_t n) { return {_mm512_maskz_loadu_ps(detail::first_n(n), p)}; }
inline F fload_bf16(const std::uint16_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(w, 16))};
}
inline F fload_bf16_n(const std::uint16_t* p, std::size_t n) {
  const __m256i raw = _mm256_maskz_loadu_epi16(detail::first_n(n), p);
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16))};
}
inline void fstore(float* p, F a) { _mm512_storeu_ps(p, a.v); }
inline void fstore_n(float* p, F a, std::size_t n) { _mm512_mask_storeu_ps(p, detail::first_n(n), a.v); }
// p[0] in the even lanes, p[1] in the odd ones (one load-port broadcast of 64 bits).
inline F fsplat_two(const float* p) {
  std::int64_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return {_mm512_castsi512_ps(_mm512_set1_epi64(v))};
}
// Interleaves a and b: lo = a0 b0 a1 b1 .. a7 b7, hi = a8 b8 .. a15 b15.
inline void fzip(F a, F b, F* lo, F* hi) {
  const __m512i il = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i ih = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  lo->v = _mm512_permutex2var_ps(a.v, il, b.v);
  hi->v = _mm512_permutex2var_ps(a.v, ih, b.v);
}
inline F operator+(F a, F b) { return {_mm512_add_ps(a.v, b.v)}; }
inline F operator*(F a, F b) { return {_mm512_mul_ps(a.v, b.v)}; }
// IEEE division, correctly rounded (the FP8 quantizer of the deepseek profiles divides).
inline F operator/(F a, F b) { return {_mm512_div_ps(a.v, b.v)}; }
inline F fmadd(F a, F b, F c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline F fmax(F a, F b) { return {_mm512_max_ps(a.v, b.v)}; }
inline F fmin(F a, F b) { return {_mm512_min_ps(a.v, b.v)}; }
inline F operator-(F a, F b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline M flt(F a, F b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)}; }  // false for NaN
inline M is_nan(F a) { return {_mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q)}; }
inline I bits(F a) { return {_mm512_castps_si512(a.v)}; }
inline F floats(I a) { return {_mm512_castsi512_ps(a.v)}; }
namespace detail {
inline __m256 fold(__m512 a) {
  return _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}
}  // namespace detail
inline float reduce_add(F a) {
  const __m256 h = detail::fold(a.v);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline void reduce_add4(F a, F b, F c, F d, float* out) {
  const __m256 ab = _mm256_hadd_ps(detail::fold(a.v), detail::fold(b.v));
  const __m256 cd = _mm256_hadd_ps(detail::fold(c.v), detail::fold(d.v));
  const __m256 abcd = _mm256_hadd_ps(ab, cd);
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}

inline I isplat(std::int32_t x) { return {_mm512_set1_epi32(x)}; }
inline I iload(const std::int32_t* p) { return {_mm512_loadu_si512(p)}; }
inline void istore(std::int32_t* p, I a) { _mm512_storeu_si512(p, a.v); }
inline void istore_n(std::int32_t* p, I a, std::size_t n) { _mm512_mask_storeu_epi32(p, detail::first_n(n), a.v); }
inline I iload_u8(const std::uint8_t* p) {
  return {_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}
// Lane l: table[idx[l]] (vpgatherdd).
inline I igather(const std::uint32_t* table, I idx) { return {_mm512_i32gather_epi32(idx.v, table, 4)}; }
inline I iload_u8_n(const std::uint8_t* p, std::size_t n) {
  return {_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(detail::first_n(n), p))};
}
// Lanes must hold values in [0, 65535] (truncating narrow).
inline void istore_u16(std::uint16_t* p, I a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(a.v));
}
inline void istore_u16_pair(std::uint16_t* p, I a, I b) {
  istore_u16(p, a);
  istore_u16(p + kLanes, b);
}
inline void istore_u16_n(std::uint16_t* p, I a, std::size_t n) {
  _mm256_mask_storeu_epi16(p, detail::first_n(n), _mm512_cvtepi32_epi16(a.v));
}
inline void istore_u8(std::uint8_t* p, I a) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(a.v)); }
inline void istore_u8_n(std::uint8_t* p, I a, std::size_t n) {
  _mm_mask_storeu_epi8(p, detail::first_n(n), _mm512_cvtepi32_epi8(a.v));
}
inline I operator&(I a, I b) { return {_mm512_and_si512(a.v, b.v)}; }
inline I operator|(I a, I b) { return {_mm512_or_si512(a.v, b.v)}; }
inline I operator^(I a, I b) { return {_mm512_xor_si512(a.v, b.v)}; }
inline I operator+(I a, I b) { return {_mm512_add_epi32(a.v, b.v)}; }
template <int S> inline I shl(I a) { return {_mm512_slli_epi32(a.v, S)}; }
template <int S> inline I shr(I a) { return {_mm512_srli_epi32(a.v, S)}; }
template <int S> inline I sar(I a) { return {_mm512_srai_epi32(a.v, S)}; }
inline M cmpeq(I a, I b) { return {_mm512_cmpeq_epi32_mask(a.v, b.v)}; }
inline M cmpgt(I a, I b) { return {_mm512_cmpgt_epi32_mask(a.v, b.v)}; }
inline M operator|(M a, M b) { return {static_cast<__mmask16>(a.v | b.v)}; }
inline I select(M m, I a, I b) { return {_mm512_mask_blend_epi32(m.v, b.v, a.v)}; }
inline F select(M m, F a, F b) { return {_mm512_mask_blend_ps(m.v, b.v, a.v)}; }
inline bool any(M m) { return m.v != 0; }

inline H hsplat(std::int16_t x) { return {_mm256_set1_epi16(x)}; }
inline H hload_s8(const std::uint8_t* p) {
  return {_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}
inline H hload_s8_n(const std::uint8_t* p, std::size_t n) {
  return {_mm256_cvtepi8_epi16(_mm_maskz_loadu_epi8(detail::first_n(n), p))};
}
inline H operator&(H a, H b) { return {_mm256_and_si256(a.v, b.v)}; }
inline H operator|(H a, H b) { return {_mm256_or_si256(a.v, b.v)}; }
inline H operator^(H a, H b) { return {_mm256_xor_si256(a.v, b.v)}; }
inline H operator+(H a, H b) { return {_mm256_add_epi16(a.v, b.v)}; }
template <int S> inline H shl(H a) { return {_mm256_slli_epi16(a.v, S)}; }
inline H hcmpeq(H a, H b) { return {_mm256_cmpeq_epi16(a.v, b.v)}; }
inline bool any_set(H a) { return !_mm256_testz_si256(a.v, a.v); }
// Whether any of the n bytes at p has (byte & mask) == value: 64 bytes a step.
inline bool any_byte_masked_eq(const std::uint8_t* p, std::size_t n, std::uint8_t mask, std::uint8_t value) {
  const __m512i m = _mm512_set1_epi8(static_cast<char>(mask)), v = _mm512_set1_epi8(static_cast<char>(value));
  __mmask64 seen = 0;
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) seen |= _mm512_cmpeq_epi8_mask(_mm512_and_si512(_mm512_loadu_si512(p + i), m), v);
  if (i < n) {
    const __mmask64 rest = ~__mmask64{0} >> (64 - (n - i));
    seen |= _mm512_mask_cmpeq_epi8_mask(rest, _mm512_and_si512(_mm512_maskz_loadu_epi8(rest, p + i), m), v);
  }
  return seen != 0;
}
inline F f16_to_f32(H a) { return {_mm512_cvtph_ps(a.v)}; }
inline std::uint32_t movemask(M m) { return static_cast<std::uint32_t>(m.v); }

// The lanes l of `a` whose bit is set in `mask`, in lane order, as 32-bit pairs (a[l], first + l)
// at out; returns how many. Writes exactly those pairs (masked stores, never a whole vector past
// them), and compresses in registers: a compressing store to memory is slow on some AVX-512 CPUs.
#define MLAKIT_SIMD_HAS_COMPRESS 1
inline std::size_t store_lane_pairs(I a, std::int32_t first, std::uint32_t mask, void* out) {
  const auto m = static_cast<__mmask16>(mask);
  const __m512i lanes = _mm512_add_epi32(_mm512_set1_epi32(first),
                                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m512i va = _mm512_maskz_compress_epi32(m, a.v), vb = _mm512_maskz_compress_epi32(m, lanes);
  const __m512i lo = _mm512_permutex2var_epi32(
      va, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), vb);
  const __m512i hi = _mm512_permutex2var_epi32(
      va, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31), vb);
  const auto n = static_cast<unsigned>(__builtin_popcount(mask & 0xFFFFu));
  auto* o = static_cast<long long*>(out);
  _mm512_mask_storeu_epi64(o, static_cast<__mmask8>((1u << (n < 8 ? n : 8)) - 1u), lo);
  if (n > 8) _mm512_mask_storeu_epi64(o + 8, static_cast<__mmask8>((1u << (n - 8)) - 1u), hi);
  return n;
}

}  // namespace mlakit::simd::MLAKIT_SIMD_NS

#if !defined(MLAKIT_SIMD_LEVEL_NAME_SET)
namespace mlakit::simd::MLAKIT_SIMD_NS {
constexpr const char* kLevelName = "avx512";
}
#endif
