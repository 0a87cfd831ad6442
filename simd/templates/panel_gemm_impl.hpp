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
inline float widen_element(std::uint16_t x) {
  const std::uint32_t u = std::uint32_t(x) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

// panel[p*kPanelCols + j] = B[j*ldb + p] widened to f32, columns cols.. zero. Column by column:
// each read is a contiguous row of B, the writes stay in the panel (L1-sized for the callers' k).
template <class T>
void pack_panel(const T* b, std::size_t ldb, std::size_t cols, std::size_t k, float* panel) {
  for (std::size_t j = 0; j < kPanelCols; ++j) {
    float* dst = panel + j;
    if (j < cols) {
      const T* src = b + j * ldb;
      for (std::size_t p = 0; p < k; ++p) dst[p * kPanelCols] = widen_element(src[p]);
    } else {
      for (std::size_t p = 0; p < k; ++p) dst[p * kPanelCols] = 0.0f;
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
void panel_tile(std::size_t k, const float* a, std::size_t lda, const float* panel, float* c, std::size_t ldc,
                std::size_t n, bool accumulate) {
  const std::size_t n0 = n < kLanes ? n : kLanes, n1 = n - n0;
  F s0[R], s1[R];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r) {
    s0[r] = accumulate ? load_part(c + r * ldc, n0) : fzero();
    s1[r] = accumulate ? load_part(c + r * ldc + kLanes, n1) : fzero();
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
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r) {
    store_part(c + r * ldc, s0[r], n0);
    store_part(c + r * ldc + kLanes, s1[r], n1);
  }
}

template <std::size_t R>
void panel_rows_tail(std::size_t rest, std::size_t k, const float* a, std::size_t lda, const float* panel, float* c,
                     std::size_t ldc, std::size_t n, bool accumulate) {
  if constexpr (R > 0) {
    if (rest == R) panel_tile<R>(k, a, lda, panel, c, ldc, n, accumulate);
    else panel_rows_tail<R - 1>(rest, k, a, lda, panel, c, ldc, n, accumulate);
  }
}

void gemm_panel(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* panel,
                float* c, std::size_t ldc, bool accumulate) {
  if (n == 0) return;
  if (n > kPanelCols) n = kPanelCols;  // the contract bounds n; never write past the panel's columns
  std::size_t i = 0;
  for (; i + kPanelRows <= m; i += kPanelRows) panel_tile<kPanelRows>(k, a + i * lda, lda, panel, c + i * ldc, ldc, n, accumulate);
  if (i < m) panel_rows_tail<kPanelRows - 1>(m - i, k, a + i * lda, lda, panel, c + i * ldc, ldc, n, accumulate);
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
