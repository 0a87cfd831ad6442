// Panel GEMM (simd/gemm.hpp, "Panel GEMM"): outer-product register tiles over a packed panel of
// B, written once; every level compiles it through simd/<level>/gemm.cpp.
//
// Why a second f32 GEMM beside the dot tiles: a dot tile keeps kLanes partial sums per output and
// pays a horizontal reduction per tile; its operands are rows along k, so every step loads from
// kMr + kNr strided rows. Here each step loads two vectors of a packed panel row (kPanelCols
// columns of B at one p) and broadcasts one element of each of kPanelRows rows of A: 2·kPanelRows
// FMAs per 2 + kPanelRows loads, no reduction, the accumulators kept in registers across k (one
// chain per output). This is the register blocking of the BLAS libraries' sgemm kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "simd/gemm.hpp"
#include "simd/templates/tile_out.hpp"
#include "simd/vec/bf16_round.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// Register budget: 2·kPanelRows accumulators + 2 panel vectors + 1 broadcast within 16 registers
// (generic, avx2: 12 + 3) or 32 (AVX-512: 24 + 3).
#if defined(MLAKIT_SIMD_LEVEL_generic) || defined(MLAKIT_SIMD_LEVEL_avx2)
constexpr std::size_t kPanelRows = 6;
#else
constexpr std::size_t kPanelRows = 12;
#endif
constexpr std::size_t kPanelCols = 2 * kLanes;

inline float widen_element(float x) { return x; }
inline float widen_element(std::uint16_t x) { return f32_of_bf16(x); }

#if !defined(MLAKIT_SIMD_LEVEL_generic)
// Eight elements of a row of B as f32 lanes (bf16 widened exactly).
inline __m256 row8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 row8(const std::uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

// Columns [j0, j0 + 8) of the panel for p in [p0, p0 + 8): eight rows of B (missing ones zero)
// transposed in registers. (Inlined by force: as a call, each block paid a vzeroupper.)
template <class T>
[[gnu::always_inline]] inline void pack_block8(const T* b, std::size_t ldb, std::size_t j0, std::size_t cols, std::size_t p0, float* panel) {
  __m256 r[8];
  for (std::size_t i = 0; i < 8; ++i) r[i] = j0 + i < cols ? row8(b + (j0 + i) * ldb + p0) : _mm256_setzero_ps();
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  const __m256 o[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                       _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                       _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                       _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
  for (std::size_t q = 0; q < 8; ++q) _mm256_storeu_ps(panel + (p0 + q) * kPanelCols + j0, o[q]);
}
#endif

// panel[p*kPanelCols + j] = B[j*ldb + p] widened to f32, columns cols.. zero. On the vector
// levels eight columns by eight elements at a time, transposed in 256-bit registers; on generic
// (and for the last k % 8 elements) column by column: each read a contiguous row of B, the writes
// staying in the panel (L1-sized for the callers' k).
template <class T>
void pack_panel(const T* b, std::size_t ldb, std::size_t cols, std::size_t k, float* panel) {
  std::size_t p0 = 0;
#if !defined(MLAKIT_SIMD_LEVEL_generic)
  // The rows of B are usually weights read from memory for the first time in the call, 32 rows a
  // line at a time each: too many short streams for the hardware prefetcher, so the loads stalled
  // (7 % of a projection's time); each row's line kAhead lines on is asked for as a line begins.
  constexpr std::size_t kLine = 64 / sizeof(T), kAhead = 4 * kLine;
  for (; p0 + 8 <= k; p0 += 8) {
    if (p0 % kLine == 0 && p0 + kAhead < k)
      for (std::size_t j = 0; j < cols; ++j) _mm_prefetch(reinterpret_cast<const char*>(b + j * ldb + p0 + kAhead), _MM_HINT_T0);
    for (std::size_t j0 = 0; j0 < kPanelCols; j0 += 8) pack_block8(b, ldb, j0, cols, p0, panel);
  }
#endif
  if (p0 == k) return;
  for (std::size_t j = 0; j < kPanelCols; ++j) {
    float* dst = panel + j;
    if (j < cols) {
      const T* src = b + j * ldb;
      for (std::size_t p = p0; p < k; ++p) dst[p * kPanelCols] = widen_element(src[p]);
    } else {
      for (std::size_t p = p0; p < k; ++p) dst[p * kPanelCols] = 0.0f;
    }
  }
}

inline F load_part(const float* p, std::size_t n) { return n >= kLanes ? fload(p) : n == 0 ? fzero() : fload_n(p, n); }
inline void store_part(float* p, F v, std::size_t n) {
  if (n >= kLanes) fstore(p, v);
  else if (n) fstore_n(p, v, n);
}

// R rows of A against one panel: C[r][j] (+)= sum_p A[r][p] * panel[p][j], j < n.
// (The unroll pragmas matter: without them GCC keeps the accumulator arrays in memory and stores
// them on every step.)
template <std::size_t R>
void panel_tile(std::size_t k, const float* a, std::size_t lda, const float* panel, TileOut out, std::size_t n) {
  const std::size_t n0 = n < kLanes ? n : kLanes, n1 = n - n0;
  float* const c = out.c;
  const std::size_t ldc = out.ldc;
  const bool chain_from_c = out.accumulate && !out.rs;
  F s0[R], s1[R];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r) {
    s0[r] = chain_from_c ? load_part(c + r * ldc, n0) : fzero();
    s1[r] = chain_from_c ? load_part(c + r * ldc + kLanes, n1) : fzero();
  }
#pragma GCC unroll 4
  for (std::size_t p = 0; p < k; ++p) {
    const F v0 = fload(panel + p * kPanelCols), v1 = fload(panel + p * kPanelCols + kLanes);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) {
      const F x = fsplat(a[r * lda + p]);
      s0[r] = fmadd(x, v0, s0[r]);
      s1[r] = fmadd(x, v1, s1[r]);
    }
  }
  if (out.rs) {
    const F cs0 = load_part(out.cs, n0), cs1 = load_part(out.cs + kLanes, n1);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) {
      const F rs = fsplat(out.rs[r]);
      s0[r] = out.accumulate ? fmadd(rs * cs0, s0[r], load_part(c + r * ldc, n0)) : rs * cs0 * s0[r];
      s1[r] = out.accumulate ? fmadd(rs * cs1, s1[r], load_part(c + r * ldc + kLanes, n1)) : rs * cs1 * s1[r];
    }
  }
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r) {
    store_part(c + r * ldc, s0[r], n0);
    store_part(c + r * ldc + kLanes, s1[r], n1);
  }
}

template <std::size_t R>
void panel_rows_tail(std::size_t rest, std::size_t k, const float* a, std::size_t lda, const float* panel,
                     TileOut out, std::size_t n) {
  if constexpr (R > 0) {
    if (rest == R) panel_tile<R>(k, a, lda, panel, out, n);
    else panel_rows_tail<R - 1>(rest, k, a, lda, panel, out, n);
  }
}

void panel_rows(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* panel,
                TileOut out) {
  if (n == 0) return;
  if (n > kPanelCols) n = kPanelCols;  // the contract bounds n; never write past the panel's columns
  const auto at = [&](std::size_t i) {
    TileOut o = out;
    o.c = out.c + i * out.ldc;
    if (out.rs) o.rs = out.rs + i;
    return o;
  };
  std::size_t i = 0;
  for (; i + kPanelRows <= m; i += kPanelRows) panel_tile<kPanelRows>(k, a + i * lda, lda, panel, at(i), n);
  if (i < m) panel_rows_tail<kPanelRows - 1>(m - i, k, a + i * lda, lda, panel, at(i), n);
}

void gemm_panel(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* panel,
                float* c, std::size_t ldc, bool accumulate) {
  panel_rows(m, n, k, a, lda, panel, TileOut{c, ldc, accumulate});
}

void gemm_panel_scaled(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda,
                       const float* panel, const float* rs, const float* cs, float* c, std::size_t ldc,
                       bool accumulate) {
  panel_rows(m, n, k, a, lda, panel, TileOut{c, ldc, accumulate, rs, cs});
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
