// RoPE and RMSNorm on bf16 rows (simd/rope_norm.hpp), written once; compiled per level by
// simd/<level>/rope_norm.cpp. AVX-512 runs 8 f64 lanes; other levels the scalar loop, which is
// also every vector loop's definition.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "simd/vec/bf16_round.hpp"
#include "simd/vec/level.hpp"
#include "simd/rope_norm.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// f32 bits to bf16: nearest, ties to even; NaN quiet, sign kept (bf16_round_bits, one lane).
inline std::uint16_t bf16_of_f32_bits(std::uint32_t u) {
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

inline double f64_of_bf16(std::uint16_t b) { return static_cast<double>(f32_of_bf16(b)); }

// bf16(d), one rounding: toward zero to f32 (the nearest f32, stepped back when it rounded away;
// an overflow to inf steps back to the largest finite value), odd when inexact, then to bf16.
inline std::uint16_t bf16_of_f64(double d) {
  const float f = static_cast<float>(d);
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) --u;
  float t;
  std::memcpy(&t, &u, sizeof t);
  if (static_cast<double>(t) != d) u |= 1u;  // also for NaN: bf16_of_f32_bits drops the low bits
  return bf16_of_f32_bits(u);
}

inline void rope_pair(std::uint16_t* x, double c, double s) {
  const double x0 = f64_of_bf16(x[0]), x1 = f64_of_bf16(x[1]);
  x[0] = bf16_of_f64(x0 * c - x1 * s);
  x[1] = bf16_of_f64(x0 * s + x1 * c);
}

inline std::uint16_t norm_value(std::uint16_t x, double r, std::uint16_t gamma) {
  const double y = f64_of_bf16(bf16_of_f64(f64_of_bf16(x) * r));
  return bf16_of_f64(y * f64_of_bf16(gamma));
}

#if defined(__AVX512F__)
// 8 lanes of bf16_of_f64, in lanes 0-7 of the result: the conversion rounds toward zero itself (an
// overflow gives the largest finite value), then the same odd bit and bf16 rounding.
inline I bf16_of_f64(__m512d d) {
  const __m256 f = _mm512_cvt_roundpd_ps(d, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvtps_pd(f), d, _CMP_NEQ_UQ);
  const __m256i u = _mm256_mask_or_epi32(_mm256_castps_si256(f), inexact, _mm256_castps_si256(f), _mm256_set1_epi32(1));
  return bf16_round_bits(I{_mm512_castsi256_si512(u)});  // lanes 8-15 unused
}

inline __m512d f64_of_bf16(__m128i b) {
  return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16)));
}
inline __m512d f64_of_bf16(I low8) { return _mm512_cvtps_pd(_mm512_castps512_ps256(floats(shl<16>(low8)).v)); }
// Lanes 0-7 (those in m) as bf16. A 16-byte store: a wider masked one stalls the next step's load
// of the words beside it (rms_norm_bf16 measured 1.0 -> 2.3 us per 512).
inline void store_bf16x8(std::uint16_t* p, __mmask8 m, I low8) {
  _mm_mask_storeu_epi16(p, m, _mm256_castsi256_si128(_mm512_cvtepi32_epi16(low8.v)));
}
#endif

void rope_bf16(std::uint16_t* x, std::size_t stride, std::size_t rows, const float* cs, std::size_t pairs) {
  std::size_t p = 0;
#if defined(__AVX512F__)
  // Four pairs per step; the step's (c, s) serve every row. Even lanes take x·c − x'·s, odd lanes
  // x·c + x'·s, where x' is the pair's other element: x'·s is exact, so the fused form rounds once.
  for (; p < pairs; p += 4) {
    const std::size_t here = pairs - p < 4 ? pairs - p : 4;
    const __mmask8 m = static_cast<__mmask8>((1u << (2 * here)) - 1u);
    const __m512d f = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, cs + 2 * p));
    const __m512d c = _mm512_movedup_pd(f), s = _mm512_permute_pd(f, 0xFF);
    for (std::size_t r = 0; r < rows; ++r) {
      std::uint16_t* v = x + r * stride + 2 * p;
      const __m512d a = f64_of_bf16(_mm_maskz_loadu_epi16(m, v));
      const __m512d y = _mm512_fmaddsub_pd(a, c, _mm512_mul_pd(_mm512_permute_pd(a, 0x55), s));
      store_bf16x8(v, m, bf16_of_f64(y));
    }
  }
#endif
  for (; p < pairs; ++p)
    for (std::size_t r = 0; r < rows; ++r) rope_pair(x + r * stride + 2 * p, cs[2 * p], cs[2 * p + 1]);
}

void rms_norm_bf16(std::uint16_t* x, std::size_t n, const std::uint16_t* gamma, float eps) {
  if (n == 0) return;
  // One chain in index order: the sum's bits are the reference's (a vector of partial sums could
  // round differently).
  double sum_sq = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = f64_of_bf16(x[i]);
    sum_sq += v * v;
  }
  const double r = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + static_cast<double>(eps));
  std::size_t i = 0;
#if defined(__AVX512F__)
  const __m512d rv = _mm512_set1_pd(r);
  for (; i < n; i += 8) {
    const std::size_t here = n - i < 8 ? n - i : 8;
    const __mmask8 m = static_cast<__mmask8>((1u << here) - 1u);
    const __m512d y = f64_of_bf16(bf16_of_f64(_mm512_mul_pd(f64_of_bf16(_mm_maskz_loadu_epi16(m, x + i)), rv)));
    store_bf16x8(x + i, m, bf16_of_f64(_mm512_mul_pd(y, f64_of_bf16(_mm_maskz_loadu_epi16(m, gamma + i)))));
  }
#endif
  for (; i < n; ++i) x[i] = norm_value(x[i], r, gamma[i]);
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
