// Exact f8e4m3 -> bf16 decode of 64 codes with AVX-512 VBMI byte permutes: the high and the low
// byte of each bf16 pattern come from two 128-entry tables (vpermi2b reads 7 index bits, so the
// sign bit is or-ed in separately). Levels whose flags include VBMI (avx512bf16, amx) only.
#pragma once

#if !defined(__AVX512VBMI__)
#error "simd/vec/fp8_bf16_vbmi.hpp needs -mavx512vbmi"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "simd/templates/fp8_decode_impl.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

struct Fp8ByteTables {
  alignas(64) std::uint8_t hi[128];
  alignas(64) std::uint8_t lo[128];
  // vpermb indices that order 64 codes so that the in-lane byte unpacks below produce words in
  // code order: position 16L+j takes code 8L+j, position 16L+8+j takes code 32+8L+j (j < 8).
  alignas(64) std::uint8_t order[64];
  // vpermt2b indices over two keys' codes a[0..32) (bytes 0..31) and b[0..32) (bytes 64..95) that
  // give the words a0 a1 b0 b1 a2 a3 b2 b3 ... after the unpacks: the two-keys-per-vector zip of
  // block_score, folded into the ordering permute.
  alignas(64) std::uint8_t zip[64];
  constexpr Fp8ByteTables() : hi(), lo(), order(), zip() {
    for (unsigned c = 0; c < 128; ++c) {
      const std::uint32_t bf = kFp8Table.f32[c] >> 16;
      hi[c] = static_cast<std::uint8_t>(bf >> 8);
      lo[c] = static_cast<std::uint8_t>(bf & 0xFF);
    }
    for (unsigned lane = 0; lane < 4; ++lane)
      for (unsigned j = 0; j < 8; ++j) {
        order[16 * lane + j] = static_cast<std::uint8_t>(8 * lane + j);
        order[16 * lane + 8 + j] = static_cast<std::uint8_t>(32 + 8 * lane + j);
      }
    for (unsigned j = 0; j < 64; ++j) {
      const unsigned z = order[j];                      // zipped word z: pair z/4, key (z/2)%2, element z%2
      const unsigned key = (z / 2) % 2, code = 2 * (z / 4) + z % 2;
      zip[j] = static_cast<std::uint8_t>(64 * key + code);
    }
  }
};
constexpr Fp8ByteTables kFp8Bytes{};

// The first min(n, 32) of 32 lanes.
inline __mmask32 mask32_of(std::size_t n) { return n >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << n) - 1u); }

// 64 codes already in unpack order -> bf16 patterns (w0: words 0..31, w1: words 32..63).
inline void ordered_fp8_to_bf16(__m512i p, __m512i* w0, __m512i* w1) {
  // The table holds the high bytes of the positive codes; the code's sign bit goes on top
  // (t | (p & 0x80) in one ternary-logic op).
  const __m512i t =
      _mm512_permutex2var_epi8(_mm512_load_si512(kFp8Bytes.hi), p, _mm512_load_si512(kFp8Bytes.hi + 64));
  const __m512i hi = _mm512_ternarylogic_epi32(t, p, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
  const __m512i lo =
      _mm512_permutex2var_epi8(_mm512_load_si512(kFp8Bytes.lo), p, _mm512_load_si512(kFp8Bytes.lo + 64));
  *w0 = _mm512_unpacklo_epi8(lo, hi);
  *w1 = _mm512_unpackhi_epi8(lo, hi);
}

// 64 codes -> bf16 patterns of codes 0..31 (w0) and 32..63 (w1).
inline void fp8x64_to_bf16(__m512i codes, __m512i* w0, __m512i* w1) {
  ordered_fp8_to_bf16(_mm512_permutexvar_epi8(_mm512_load_si512(kFp8Bytes.order), codes), w0, w1);
}

// Codes 0..31 of a and of b (bytes 0..31 of each; the rest is not read) -> the bf16 patterns of
// a0 a1 b0 b1 a2 a3 b2 b3 ... a30 a31 b30 b31: pair s of a then pair s of b, 16 pairs each.
inline void fp8x32x2_zip_to_bf16(__m512i a, __m512i b, __m512i* w0, __m512i* w1) {
  ordered_fp8_to_bf16(_mm512_permutex2var_epi8(a, _mm512_load_si512(kFp8Bytes.zip), b), w0, w1);
}

// Codes [0, n) of keys a and b (n <= 32; past n, and all of b when it is null, read as code 0)
// -> 64 bf16 words at dst: pair s of a then pair s of b, s < 16.
inline void fp8_zip32_to_bf16(const std::uint8_t* a, const std::uint8_t* b, std::size_t n, std::uint16_t* dst) {
  __m512i va, vb;
  if (n >= 32 && b) {
    // Plain loads on the common path: a masked byte load costs more than a plain one on Zen cores.
    va = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
    vb = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
  } else {
    const __mmask32 m = mask32_of(n);
    va = _mm512_zextsi256_si512(_mm256_maskz_loadu_epi8(m, a));
    vb = b ? _mm512_zextsi256_si512(_mm256_maskz_loadu_epi8(m, b)) : _mm512_setzero_si512();
  }
  __m512i w0, w1;
  fp8x32x2_zip_to_bf16(va, vb, &w0, &w1);
  _mm512_storeu_si512(dst, w0);
  _mm512_storeu_si512(dst + 32, w1);
}

// n codes (any n) -> n bf16 patterns.
inline void fp8_to_bf16_vbmi(const std::uint8_t* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  __m512i w0, w1;
  for (; i + 64 <= n; i += 64) {
    fp8x64_to_bf16(_mm512_loadu_si512(src + i), &w0, &w1);
    _mm512_storeu_si512(dst + i, w0);
    _mm512_storeu_si512(dst + i + 32, w1);
  }
  if (i < n) {
    const std::size_t r = n - i;  // 1..63
    fp8x64_to_bf16(_mm512_maskz_loadu_epi8(static_cast<__mmask64>((1ull << r) - 1ull), src + i), &w0, &w1);
    _mm512_mask_storeu_epi16(dst + i, mask32_of(r), w0);
    if (r > 32) _mm512_mask_storeu_epi16(dst + i + 32, mask32_of(r - 32), w1);
  }
}

// 16 bf16 patterns -> f32 (exact).
inline __m512 bf16_words_to_f32(__m256i w) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(w), 16));
}

inline __mmask16 mask16_of(std::size_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }

inline void store_f32_from_words(float* dst, __m512i w, std::size_t count) {  // count in 1..32
  _mm512_mask_storeu_ps(dst, mask16_of(count), bf16_words_to_f32(_mm512_castsi512_si256(w)));
  if (count > 16) _mm512_mask_storeu_ps(dst + 16, mask16_of(count - 16), bf16_words_to_f32(_mm512_extracti64x4_epi64(w, 1)));
}

// n codes (any n) -> n f32 values (the bf16 patterns widened).
inline void fp8_to_f32_vbmi(const std::uint8_t* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  __m512i w0, w1;
  for (; i + 64 <= n; i += 64) {
    fp8x64_to_bf16(_mm512_loadu_si512(src + i), &w0, &w1);
    _mm512_storeu_ps(dst + i, bf16_words_to_f32(_mm512_castsi512_si256(w0)));
    _mm512_storeu_ps(dst + i + 16, bf16_words_to_f32(_mm512_extracti64x4_epi64(w0, 1)));
    _mm512_storeu_ps(dst + i + 32, bf16_words_to_f32(_mm512_castsi512_si256(w1)));
    _mm512_storeu_ps(dst + i + 48, bf16_words_to_f32(_mm512_extracti64x4_epi64(w1, 1)));
  }
  if (i < n) {
    const std::size_t r = n - i;  // 1..63
    fp8x64_to_bf16(_mm512_maskz_loadu_epi8(static_cast<__mmask64>((1ull << r) - 1ull), src + i), &w0, &w1);
    store_f32_from_words(dst + i, w0, r < 32 ? r : 32);
    if (r > 32) store_f32_from_words(dst + i + 32, w1, r - 32);
  }
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
