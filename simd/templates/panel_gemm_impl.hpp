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

#include <type_traits>

#include "simd/gemm.hpp"
#include "simd/templates/fp8_decode_impl.hpp"
#include "simd/templates/int4_lookup8.hpp"
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
// How far ahead (in k) a register tile asks for its packed activations, 0: not at all. A tile's
// 12 rows stream 48 bytes a k step from L2 (the packed row groups are read once per panel); asked
// for 48 steps (about 600 cycles) ahead, op 5's prefills ran 0.94-0.97x the time on an AVX-512 Xeon
// (24 and 96 steps in between and level). The avx2 tile's 6 rows (24 bytes a step) gained nothing
// from it on the same Xeon, so it is not taken there.
#if defined(MLAKIT_SIMD_LEVEL_generic) || defined(MLAKIT_SIMD_LEVEL_avx2)
constexpr std::size_t kPackedAheadK = 0;
#else
constexpr std::size_t kPackedAheadK = 48;
#endif
constexpr std::size_t kPanelCols = 2 * kLanes;
// The AVX-512 levels pack the strips of rows with kRow16 (fp8) 16 k at a time (pack_block8x16).
#if !defined(MLAKIT_SIMD_LEVEL_generic) && !defined(MLAKIT_SIMD_LEVEL_avx2)
#define MLAKIT_PANEL_ROW16 1
#endif

// Element p of rows [0, cols), ldb apart, asked for ahead of the packing.
template <class T>
void prefetch_rows(const T* b, std::size_t ldb, std::size_t cols, std::size_t p) {
  for (std::size_t j = 0; j < cols; ++j) __builtin_prefetch(b + j * ldb + p);
}

// The rows a strip is packed from (panels of B from weight rows, groups of A from activation
// rows): row j's element p widened to f32, eight of them at a time on the vector levels.
template <class T>
struct PlainRows {
  const T* b;
  std::size_t ldb;
  static constexpr std::size_t kLine = 64 / sizeof(T);  // k per cache line of a row
  float element(std::size_t j, std::size_t p) const {
    if constexpr (std::is_same_v<T, float>) return b[j * ldb + p];
    else return f32_of_bf16(b[j * ldb + p]);
  }
  void prefetch(std::size_t cols, std::size_t p) const { prefetch_rows(b, ldb, cols, p); }
  bool vector_ok() const { return true; }
#if !defined(MLAKIT_SIMD_LEVEL_generic)
  __m256 row8(std::size_t j, std::size_t p0) const {
    const T* p = b + j * ldb + p0;
    if constexpr (std::is_same_v<T, float>) {
      return _mm256_loadu_ps(p);
    } else {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
  }
#endif
  // No 16-k blocks: widening is two instructions, so the shuffles dominate, and the 8-k blocks'
  // 256-bit shuffles issue on two ports where 512-bit ones issue on one (bf16 panels packed 1.1x
  // faster that way on an AVX-512 Xeon).
  static constexpr bool kRow16 = false;
};

// fp8 (e4m3) weight rows times one scale per `block` elements of k, shared by the strip's rows:
// each element decoded exactly and multiplied by its scale, one f32 rounding (the reference's
// code·scale). The vector path takes eight elements under one scale, so block is a multiple of 8
// (pack_strip checks).
struct Fp8ScaledRows {
  const std::uint8_t* b;
  std::size_t ldb;
  const float* scales;
  std::size_t block;
  static constexpr std::size_t kLine = 64;
  float element(std::size_t j, std::size_t p) const {
    return __builtin_bit_cast(float, kFp8Table.f32[b[j * ldb + p]]) * scales[p / block];
  }
  void prefetch(std::size_t cols, std::size_t p) const { prefetch_rows(b, ldb, cols, p); }
#if !defined(MLAKIT_SIMD_LEVEL_generic)
  // The via-f16 decode of simd/templates/fp8_decode_impl.hpp on eight codes: fields shifted into
  // f16's (value times 2^-8), the NaN codes patched to f16 NaN, widened exactly, times 2^8.
  __m256 row8(std::size_t j, std::size_t p0) const {
    const __m128i code = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + j * ldb + p0)));
    __m128i h = _mm_and_si128(_mm_slli_epi16(code, 7), _mm_set1_epi16(static_cast<short>(0xBF80)));
    const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x3F80)), _mm_set1_epi16(0x3F80));
    h = _mm_xor_si128(h, _mm_and_si128(nan, _mm_set1_epi16(0x4180)));
    const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
    return _mm256_mul_ps(v, _mm256_set1_ps(scales[p0 / block]));
  }
#endif
  bool vector_ok() const { return block % 8 == 0; }
#if defined(MLAKIT_PANEL_ROW16)
  // The same on sixteen codes under one scale: the decode, most of a block's work, once per
  // sixteen elements (pack_block8x16: panels formed 2.0x faster on an AVX-512 Xeon).
  static constexpr bool kRow16 = true;
  bool vector16_ok() const { return block % 16 == 0; }
  // (The level's own vectors are these sixteen lanes: fp8_decode_impl.hpp's decode as it is.)
  __m512 row16(std::size_t j, std::size_t p0) const {
    return (fp8_lanes_to_f32(hload_s8(b + j * ldb + p0)) * fsplat(scales[p0 / block])).v;
  }
#endif
};
// GPTQ int4 columns (Int4Columns: column j's codes for k = 8r .. 8r + 7 in word r, code q in
// bits 4q .. 4q + 3) as the values of their (column, group) tables: element p of column j is
// tables[(j * groups + p / group_size) * 16 + code] (exact in f32). k is a multiple of 8.
struct Int4TableRows {
  Int4Columns b;
  std::size_t groups;
  static constexpr std::size_t kLine = 8;  // k per row of words (each row of words its own lines)
  float element(std::size_t j, std::size_t p) const {
    const std::uint32_t w = b.words[(p / 8) * b.ldw + j];
    return b.tables[(j * groups + p / b.group_size) * 16 + ((w >> (4 * (p % 8))) & 0xFu)];
  }
  // A row of words (8 k of every column) is what a block of eight k reads.
  void prefetch(std::size_t cols, std::size_t p) const {
    const char* row = reinterpret_cast<const char*>(b.words + (p / 8) * b.ldw);
    for (std::size_t off = 0; off < cols * sizeof(std::uint32_t); off += 64) __builtin_prefetch(row + off);
  }
  bool vector_ok() const { return true; }  // k is a multiple of 8 and group_size of 32
  static constexpr bool kRow16 = false;  // one word is eight k: the 8-k blocks
#if !defined(MLAKIT_SIMD_LEVEL_generic)
  // One word, looked up in the column's table.
  __m256 row8(std::size_t j, std::size_t p0) const {
    return int4_lookup8(b.words[(p0 / 8) * b.ldw + j], b.tables + (j * groups + p0 / b.group_size) * 16);
  }
#endif
};

#if !defined(MLAKIT_SIMD_LEVEL_generic)
// Four rows of eight elements interleaved: u[q] holds the rows' element q in its low half and
// element q + 4 in its high half.
[[gnu::always_inline]] inline void interleave4(const __m256* r, __m256* u) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  u[0] = _mm256_shuffle_ps(t0, t2, 0x44);
  u[1] = _mm256_shuffle_ps(t0, t2, 0xEE);
  u[2] = _mm256_shuffle_ps(t1, t3, 0x44);
  u[3] = _mm256_shuffle_ps(t1, t3, 0xEE);
}

// Lanes [j0, j0 + 8) of a strip W wide for p in [p0, p0 + 8): eight rows (missing ones zero)
// transposed in registers, the lanes past W not stored. (Inlined by force: as a call, each block
// paid a vzeroupper.)
template <std::size_t W, class Src>
[[gnu::always_inline]] inline void pack_block8(const Src& src, std::size_t j0, std::size_t cols, std::size_t p0, float* out) {
  __m256 r[8], u[8];
  for (std::size_t i = 0; i < 8; ++i) r[i] = j0 + i < cols ? src.row8(j0 + i, p0) : _mm256_setzero_ps();
  interleave4(r, u);
  interleave4(r + 4, u + 4);
  __m256 o[8];
  for (std::size_t q = 0; q < 4; ++q) {
    o[q] = _mm256_permute2f128_ps(u[q], u[q + 4], 0x20);
    o[q + 4] = _mm256_permute2f128_ps(u[q], u[q + 4], 0x31);
  }
  if (j0 + 8 <= W) {
    for (std::size_t q = 0; q < 8; ++q) _mm256_storeu_ps(out + (p0 + q) * W + j0, o[q]);
  } else {
    const int lanes = static_cast<int>(W - j0);
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (std::size_t q = 0; q < 8; ++q) _mm256_maskstore_ps(out + (p0 + q) * W + j0, keep, o[q]);
  }
}

// Lanes [j0, j0 + 4) of a strip W wide for p in [p0, p0 + 8): four rows transposed in registers,
// each p's four lanes one 16-byte store (for widths that are not whole 8-lane blocks: the 8-lane
// block's masked stores and zero rows took 14 % of a packed-rows chunk's time).
template <std::size_t W, class Src>
[[gnu::always_inline]] inline void pack_block4(const Src& src, std::size_t j0, std::size_t cols, std::size_t p0, float* out) {
  __m256 r[4], u[4];
  for (std::size_t i = 0; i < 4; ++i) r[i] = j0 + i < cols ? src.row8(j0 + i, p0) : _mm256_setzero_ps();
  interleave4(r, u);
  for (std::size_t q = 0; q < 4; ++q) {
    _mm_storeu_ps(out + (p0 + q) * W + j0, _mm256_castps256_ps128(u[q]));
    _mm_storeu_ps(out + (p0 + q + 4) * W + j0, _mm256_extractf128_ps(u[q], 1));
  }
}
#endif

#if defined(MLAKIT_PANEL_ROW16)
// Lanes [j0, j0 + 8) of a strip W wide (W a multiple of 8) for p in [p0, p0 + 16): eight rows of
// sixteen elements transposed in 512-bit registers. Within each 128-bit lane L the 8 x 8 block's
// first two stages leave u[q] holding rows 0-3 (u[q + 4]: rows 4-7) of element 4L + q; one
// two-source permute per pair of lanes then joins the halves of two elements' eight lanes: half the
// decodes and shuffles of two 8 x 8 blocks.
template <std::size_t W, class Src>
[[gnu::always_inline]] inline void pack_block8x16(const Src& src, std::size_t j0, std::size_t cols, std::size_t p0,
                                                  float* out) {
  __m512 r[8], u[8];
  for (std::size_t i = 0; i < 8; ++i) r[i] = j0 + i < cols ? src.row16(j0 + i, p0) : _mm512_setzero_ps();
  for (std::size_t h = 0; h < 8; h += 4) {
    const __m512 t0 = _mm512_unpacklo_ps(r[h], r[h + 1]), t1 = _mm512_unpackhi_ps(r[h], r[h + 1]);
    const __m512 t2 = _mm512_unpacklo_ps(r[h + 2], r[h + 3]), t3 = _mm512_unpackhi_ps(r[h + 2], r[h + 3]);
    u[h] = _mm512_shuffle_ps(t0, t2, 0x44);
    u[h + 1] = _mm512_shuffle_ps(t0, t2, 0xEE);
    u[h + 2] = _mm512_shuffle_ps(t1, t3, 0x44);
    u[h + 3] = _mm512_shuffle_ps(t1, t3, 0xEE);
  }
  // Lanes L and L + 1 of u[q] and u[q + 4]: [rows 0-3, rows 4-7] of element 4L + q, then of 4L + 4 + q.
  const __m512i lanes01 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i lanes23 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (std::size_t q = 0; q < 4; ++q) {
    const __m512 lo = _mm512_permutex2var_ps(u[q], lanes01, u[q + 4]);
    const __m512 hi = _mm512_permutex2var_ps(u[q], lanes23, u[q + 4]);
    _mm256_storeu_ps(out + (p0 + q) * W + j0, _mm512_castps512_ps256(lo));
    _mm256_storeu_ps(out + (p0 + q + 4) * W + j0, _mm512_extractf32x8_ps(lo, 1));
    _mm256_storeu_ps(out + (p0 + q + 8) * W + j0, _mm512_castps512_ps256(hi));
    _mm256_storeu_ps(out + (p0 + q + 12) * W + j0, _mm512_extractf32x8_ps(hi, 1));
  }
}
#endif

// transpose_f32 (simd/gemm.hpp): blocks of 8 rows by 8 columns transposed in registers as the
// panel packer's (a strided 16-lane gather ran no faster than plain element copies); the rows and
// columns past whole blocks element by element.
void transpose_f32(const float* x, std::size_t ldx, std::size_t rows, std::size_t n, float* dst, std::size_t ldd) {
  std::size_t i0 = 0;
#if !defined(MLAKIT_SIMD_LEVEL_generic)
  const PlainRows<float> src{x, ldx};
  for (; i0 + 8 <= rows; i0 += 8) {
    std::size_t j0 = 0;
    for (; j0 + 8 <= n; j0 += 8) {
      __m256 r[8], u[8];
      for (std::size_t q = 0; q < 8; ++q) r[q] = src.row8(i0 + q, j0);
      interleave4(r, u);
      interleave4(r + 4, u + 4);
      for (std::size_t q = 0; q < 4; ++q) {
        _mm256_storeu_ps(dst + (j0 + q) * ldd + i0, _mm256_permute2f128_ps(u[q], u[q + 4], 0x20));
        _mm256_storeu_ps(dst + (j0 + q + 4) * ldd + i0, _mm256_permute2f128_ps(u[q], u[q + 4], 0x31));
      }
    }
    for (; j0 < n; ++j0)
      for (std::size_t q = 0; q < 8; ++q) dst[j0 * ldd + i0 + q] = x[(i0 + q) * ldx + j0];
  }
#endif
  for (; i0 < rows; ++i0)
    for (std::size_t j = 0; j < n; ++j) dst[j * ldd + i0] = x[i0 * ldx + j];
}

// out[p*W + j] = row j's element p as f32 for j < cols (<= W), lanes cols.. zero: a strip of W
// lanes along k. On the vector levels eight lanes by eight elements at a time, transposed in
// 256-bit registers; on generic (and for the last k % 8 elements) lane by lane: each read a
// contiguous row, the writes staying in the strip (L1-sized for the callers' k).
template <std::size_t W, class Src>
void pack_strip(const Src& src, std::size_t cols, std::size_t k, float* out) {
  std::size_t p0 = 0;
#if !defined(MLAKIT_SIMD_LEVEL_generic)
  // The rows are usually weights read from memory for the first time in the call, 32 rows a line
  // at a time each: too many short streams for the hardware prefetcher, so the loads stalled (7 %
  // of a projection's time); each row's line kAhead lines on is asked for as a line begins.
  constexpr std::size_t kLine = Src::kLine, kAhead = 4 * kLine;
#if defined(MLAKIT_PANEL_ROW16)
  if constexpr (Src::kRow16 && W % 8 == 0)  // the panels: whole 8-lane blocks
    for (; src.vector16_ok() && p0 + 16 <= k; p0 += 16) {
      if (p0 % kLine == 0 && p0 + kAhead < k) src.prefetch(cols, p0 + kAhead);
      for (std::size_t j0 = 0; j0 < W; j0 += 8) pack_block8x16<W>(src, j0, cols, p0, out);
    }
#endif
  if (src.vector_ok())
    for (; p0 + 8 <= k; p0 += 8) {
      if (p0 % kLine == 0 && p0 + kAhead < k) src.prefetch(cols, p0 + kAhead);
      std::size_t j0 = 0;
      for (; j0 + 8 <= W; j0 += 8) pack_block8<W>(src, j0, cols, p0, out);
      if constexpr (W % 4 == 0)
        for (; j0 < W; j0 += 4) pack_block4<W>(src, j0, cols, p0, out);
      else if (j0 < W)
        pack_block8<W>(src, j0, cols, p0, out);
    }
#endif
  if (p0 == k) return;
  for (std::size_t j = 0; j < W; ++j) {
    float* dst = out + j;
    if (j < cols) {
      for (std::size_t p = p0; p < k; ++p) dst[p * W] = src.element(j, p);
    } else {
      for (std::size_t p = p0; p < k; ++p) dst[p * W] = 0.0f;
    }
  }
}

// A panel of B: cols (<= kPanelCols) weight columns.
template <class T>
void pack_panel(const T* b, std::size_t ldb, std::size_t cols, std::size_t k, float* panel) {
  pack_strip<kPanelCols>(PlainRows<T>{b, ldb}, cols, k, panel);
}
void pack_panel_f8_scaled(const std::uint8_t* b, std::size_t ldb, std::size_t cols, std::size_t k, const float* scales,
                          std::size_t block, float* panel) {
  pack_strip<kPanelCols>(Fp8ScaledRows{b, ldb, scales, block}, cols, k, panel);
}

void pack_panel_int4(const Int4Columns& b, std::size_t cols, std::size_t k, float* panel) {
  pack_strip<kPanelCols>(Int4TableRows{b, (k + b.group_size - 1) / b.group_size}, cols, k, panel);
}

// m rows of A packed for gemm_panel_packed: groups of kPanelRows rows, group g at
// ap + g * kPanelRows * k with row r's element p at p * kPanelRows + r (a last group's missing
// rows zero), so that a register tile's broadcasts at one p come from one run of kPanelRows floats.
template <class T>
void pack_rows(const T* a, std::size_t lda, std::size_t m, std::size_t k, float* ap) {
  for (std::size_t i = 0; i < m; i += kPanelRows)
    pack_strip<kPanelRows>(PlainRows<T>{a + i * lda, lda}, m - i < kPanelRows ? m - i : kPanelRows, k, ap + i * k);
}

// The two layouts of A the register tiles read: rows along p (lda apart), or groups packed by
// pack_rows (a tile starts at a group).
struct RowsA {
  const float* a;
  std::size_t lda;
  float at(std::size_t r, std::size_t p) const { return a[r * lda + p]; }
  RowsA from(std::size_t i) const { return {a + i * lda, lda}; }
  void prefetch(std::size_t) const {}
};
struct PackedA {
  const float* ap;
  std::size_t k;
  float at(std::size_t r, std::size_t p) const { return ap[p * kPanelRows + r]; }
  PackedA from(std::size_t i) const { return {ap + i * k, k}; }  // i: a multiple of kPanelRows
  // Step p + kPackedAheadK's rows (past the group's k: the next group's, or no memory at all; a
  // prefetch does not fault).
  void prefetch(std::size_t p) const {
    if constexpr (kPackedAheadK > 0) __builtin_prefetch(ap + (p + kPackedAheadK) * kPanelRows);
  }
};

inline F load_part(const float* p, std::size_t n) { return n >= kLanes ? fload(p) : n == 0 ? fzero() : fload_n(p, n); }
inline void store_part(float* p, F v, std::size_t n) {
  if (n >= kLanes) fstore(p, v);
  else if (n) fstore_n(p, v, n);
}

// R rows of A against one panel: C[r][j] (+)= sum_p A[r][p] * panel[p][j], j < n.
// (The unroll pragmas matter: without them GCC keeps the accumulator arrays in memory and stores
// them on every step.)
template <std::size_t R, class A>
void panel_tile(std::size_t k, const A& a, const float* panel, TileOut out, std::size_t n) {
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
    a.prefetch(p);
    const F v0 = fload(panel + p * kPanelCols), v1 = fload(panel + p * kPanelCols + kLanes);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) {
      const F x = fsplat(a.at(r, p));
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

template <std::size_t R, class A>
void panel_rows_tail(std::size_t rest, std::size_t k, const A& a, const float* panel, TileOut out, std::size_t n) {
  if constexpr (R > 0) {
    if (rest == R) panel_tile<R>(k, a, panel, out, n);
    else panel_rows_tail<R - 1>(rest, k, a, panel, out, n);
  }
}

template <class A>
void panel_rows(std::size_t m, std::size_t n, std::size_t k, const A& a, const float* panel, TileOut out) {
  if (n == 0) return;
  if (n > kPanelCols) n = kPanelCols;  // the contract bounds n; never write past the panel's columns
  const auto at = [&](std::size_t i) {
    TileOut o = out;
    o.c = out.c + i * out.ldc;
    if (out.rs) o.rs = out.rs + i;
    return o;
  };
  std::size_t i = 0;
  for (; i + kPanelRows <= m; i += kPanelRows) panel_tile<kPanelRows>(k, a.from(i), panel, at(i), n);
  if (i < m) panel_rows_tail<kPanelRows - 1>(m - i, k, a.from(i), panel, at(i), n);
}

void gemm_panel(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* panel,
                float* c, std::size_t ldc, bool accumulate) {
  panel_rows(m, n, k, RowsA{a, lda}, panel, TileOut{c, ldc, accumulate});
}

// gemm_panel over A packed by pack_rows (the same chains, so the same bits).
void gemm_panel_packed(std::size_t m, std::size_t n, std::size_t k, const float* ap, const float* panel, float* c,
                       std::size_t ldc, bool accumulate) {
  panel_rows(m, n, k, PackedA{ap, k}, panel, TileOut{c, ldc, accumulate});
}

void gemm_panel_scaled(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda,
                       const float* panel, const float* rs, const float* cs, float* c, std::size_t ldc,
                       bool accumulate) {
  panel_rows(m, n, k, RowsA{a, lda}, panel, TileOut{c, ldc, accumulate, rs, cs});
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
