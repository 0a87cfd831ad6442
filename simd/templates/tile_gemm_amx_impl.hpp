// The gemm family's tile GEMM on AMX (simd/gemm.hpp, "Tile GEMM"): TDPBF16PS products of bf16
// activation rows against weights packed once into the pair layout the B operand reads. Written
// once against a tile-operations policy (simd/vec/amx_tiles.hpp): simd/amx/gemm.cpp instantiates
// it over the real instructions, the tests over an emulation of them.
//
// Tiles (every one 16 rows x 64 bytes), for a block of 32 rows x 32 columns of C:
//   A (tmm4, tmm5)   16 rows x 32 k, bf16: the block's rows copied once per pass of 512 k into
//                    the tile layout (contiguous 64-byte rows, zero past the last row or k), so
//                    that every column block reads them from L1 (rows of a large lda, read in
//                    place, would fall into one cache set).
//   B (tmm6, tmm7)   16 k pairs x 16 columns x 2 bf16: two strips of the packed weights (64 bytes
//                    a pair row), or of rows zipped by pairs (a pair row every ldq elements), read
//                    in place.
//   C (tmm0..tmm3)   16 rows x 16 columns f32: C[a][b] += A[a] . B[b], k 32 at a time.
// Without scales the C tiles stay in their registers over a pass and are loaded from / stored to
// C in place (through an L1 copy at the edges of C). With block scales each block of k is
// summed in the tiles from zero, stored, and added times its scale to f32 sums kept in L1 (one
// FMA per element and block): the scale never touches an operand.
//
// Packing is a 16 x 16 transpose of 32-bit words: a column's pair (k = 2p, 2p + 1) is one word of
// its source row, and the pair layout wants the words of 16 columns side by side.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "simd/gemm.hpp"
#include "simd/templates/gemm_impl.hpp"
#include "simd/vec/amx_tiles.hpp"
#include "simd/vec/fp8_bf16_vbmi.hpp"

#if !defined(MLAKIT_SIMD_HAS_BF16_DOT)
#error "simd/templates/tile_gemm_amx_impl.hpp needs the avx512bf16 vector wrappers (levels avx512bf16 and amx)"
#endif

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {
namespace amx_gemm {

constexpr std::size_t kStripCols = kTileRows;              // columns of one B tile (16 f32 of a C row)
constexpr std::size_t kStepK = kChunkDims;                 // k per tile product: 16 pairs
constexpr std::size_t kBlockRows = kATiles * kTileRows;    // 32
constexpr std::size_t kBlockCols = kBTiles * kStripCols;   // 32
static_assert(kStepK == 32 && kStripCols == 16, "one B tile row: 16 columns x one bf16 pair");

// ---- packing ----------------------------------------------------------------------------------------

// Words 0..15 of rows r[0..15] transposed: out[p] holds word p of every row, row j at lane j.
inline void transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // r[4q + e], 128-bit lane L: word 4L + e of rows 4q..4q+3. Word p = 4L + e of all rows is
  // lane L of r[e], r[4 + e], r[8 + e], r[12 + e], in that order: two lane shuffles.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);        // lanes 0, 2 of r[i], then of r[i+4]
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xDD);    // lanes 1, 3
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
    r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xDD);
  }
}

// k elements [k0, k0 + n) of one weight row (n <= 32) as 32 bf16 words, the rest zero.
inline __m512i row_words(const std::uint16_t* row, std::size_t n) {
  return _mm512_maskz_loadu_epi16(mask32_of(n), row);
}
inline __m512i row_words(const std::uint8_t* row, std::size_t n) {
  __m512i w0, w1;
  fp8x64_to_bf16(_mm512_castsi256_si512(_mm256_maskz_loadu_epi8(mask32_of(n), row)), &w0, &w1);
  return w0;
}

// The packed layout (simd/gemm.hpp): strip s of columns [16s, 16s + 16) at packed + s * ldp; in
// it, pair row p (k = 2p, 2p + 1) at 32p, column j's pair at 2j, k = 2p in the low half. Columns
// past cols and k past k (to the next multiple of 32) are zero.
template <class T>
void pack_tiles(const T* b, std::size_t ldb, std::size_t cols, std::size_t k, std::uint16_t* packed, std::size_t ldp) {
  const std::size_t strips = (cols + kStripCols - 1) / kStripCols;
  for (std::size_t s = 0; s < strips; ++s) {
    std::uint16_t* dst = packed + s * ldp;
    const std::size_t c0 = s * kStripCols, live = std::min(kStripCols, cols - c0);
    for (std::size_t k0 = 0; k0 < k; k0 += kStepK) {
      const std::size_t n = std::min(kStepK, k - k0);
      __m512i r[16];
      for (std::size_t j = 0; j < 16; ++j) r[j] = j < live ? row_words(b + (c0 + j) * ldb + k0, n) : _mm512_setzero_si512();
      transpose16x16(r);
      for (std::size_t p = 0; p < 16; ++p) _mm512_storeu_si512(dst + (k0 / 2 + p) * 2 * kStripCols, r[p]);
    }
  }
}

// ---- the product ------------------------------------------------------------------------------------

// Rows [i0, i0 + rows) of A for k in [k0, k0 + n) into a 32 x 32 bf16 block, zeros elsewhere.
inline void copy_a_block(const std::uint16_t* a, std::size_t lda, std::size_t rows, std::size_t n, std::uint16_t* dst) {
  for (std::size_t r = 0; r < kBlockRows; ++r)
    _mm512_store_si512(dst + r * kStepK, r < rows ? row_words(a + r * lda, n) : _mm512_setzero_si512());
}

// The first `cols` f32 of each of `rows` rows between C (stride ldc) and a 32 x 32 block.
// The lanes of the first `cols` columns in a block row's two vectors.
inline __mmask16 lanes_below(std::size_t cols) {
  return static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1u);
}

inline void block_from_c(const float* c, std::size_t ldc, std::size_t rows, std::size_t cols, float* blk) {
  const __mmask16 m0 = lanes_below(cols), m1 = lanes_below(cols > 16 ? cols - 16 : 0);
  for (std::size_t r = 0; r < kBlockRows; ++r) {
    const bool live = r < rows;
    _mm512_store_ps(blk + r * kBlockCols, live ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps());
    _mm512_store_ps(blk + r * kBlockCols + 16, live ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps());
  }
}
inline void block_to_c(const float* blk, std::size_t rows, std::size_t cols, float* c, std::size_t ldc) {
  const __mmask16 m0 = lanes_below(cols), m1 = lanes_below(cols > 16 ? cols - 16 : 0);
  for (std::size_t r = 0; r < rows; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, _mm512_load_ps(blk + r * kBlockCols));
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, _mm512_load_ps(blk + r * kBlockCols + 16));
  }
}

template <class Tiles>
inline void store_c_tiles(Tiles& tiles, float* p, std::size_t stride_bytes) {
  unroll<kATiles>([&](auto ai) {
    unroll<kBTiles>([&](auto bi) {
      tiles.template store<c_tile(ai, bi)>(p + ai * kTileRows * (stride_bytes / 4) + bi * kStripCols, stride_bytes);
    });
  });
}
template <class Tiles>
inline void load_c_tiles(Tiles& tiles, const float* p, std::size_t stride_bytes) {
  unroll<kATiles>([&](auto ai) {
    unroll<kBTiles>([&](auto bi) {
      tiles.template load<c_tile(ai, bi)>(p + ai * kTileRows * (stride_bytes / 4) + bi * kStripCols, stride_bytes);
    });
  });
}
template <class Tiles>
inline void zero_c_tiles(Tiles& tiles) {
  unroll<kATiles * kBTiles>([&](auto t) { tiles.template zero<static_cast<int>(t)>(); });
}

// The lines of the B tiles (and of the C block) that the kernel loads next, asked into L1 while the
// tiles work. Tile loads do not set off the hardware prefetchers (bench/HISTORY.md, op 2 on amx: a
// sweep without software prefetch took 1.5x the time), so a B tile nobody asked for waits on L2 at
// every step, and a C block loaded in place waits on it at every block. The B tiles of a row block
// are one sequence, column block by column block, each block's steps in order; the next row block
// reads the same sequence again, so the look-ahead runs on into its start.
struct Lookahead {
  static constexpr std::size_t kSteps = 2;  // B tiles asked for this many steps ahead
  const std::uint16_t* b;  // the strips (strip s at b + s * ldp)
  std::size_t ldp, ldq, n, s0, pass_steps;
  std::size_t steps = (n + kBlockCols - 1) / kBlockCols * pass_steps;  // of the row block's sequence
  // Step t of the sequence (past its end: the next row block's, the same tiles): its first
  // strip's B tile, and the second strip's in *second (null where the block has one strip).
  const std::uint16_t* tile_at(std::size_t t, const std::uint16_t** second) const {
    t %= steps;
    const std::size_t jb = t / pass_steps;
    const std::uint16_t* b0 = b + jb * kBTiles * ldp + (s0 + t % pass_steps) * (kStepK / 2) * ldq;
    *second = n - jb * kBlockCols > kStripCols ? b0 + ldp : nullptr;
    return b0;
  }
  // Rows [r0, r0 + 8) of a B tile (a pair row every ldq elements, 64 bytes each).
  void half_tile(const std::uint16_t* tile, std::size_t r0) const {
    if (tile == nullptr) return;
    for (std::size_t r = r0; r < r0 + kTileRows / 2; ++r) __builtin_prefetch(tile + r * ldq, 0, 3);
  }
};

// Lines [first, first + count) of a C block's 2 lines a row (rows rows, ldc apart).
inline void prefetch_c_lines(const float* cb, std::size_t ldc, std::size_t rows, std::size_t first, std::size_t count) {
  for (std::size_t l = first; l < first + count && l < 2 * rows; ++l)
    __builtin_prefetch(cb + (l / 2) * ldc + (l % 2) * kStripCols, 0, 3);
}

// k per pass over the blocks of C: the A block of a pass (32 rows x 512 bf16, 32 KiB) is copied
// once into the tile layout and stays in L1 while every column block reads it; the C tiles go back
// to C between passes (which the unit's accumulator flush makes exact).
constexpr std::size_t kPassSteps = 16;
constexpr std::size_t kMaxPassSteps = 32;  // a pass with block scales is whole blocks (up to 1024 k)
constexpr std::size_t kStepWords = kBlockRows * kStepK;  // one step of the A block: 2 KiB

// C (+)= A·Bᵀ over B in the pair layout (simd/gemm.hpp, gemm_tiles).
template <class Tiles>
void gemm_tiles(std::size_t m, std::size_t n, std::size_t k, const std::uint16_t* a, std::size_t lda,
                const std::uint16_t* packed, std::size_t ldp, std::size_t ldq, const TileScales* scales, float* c,
                std::size_t ldc, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (std::size_t i = 0; i < m; ++i) std::memset(c + i * ldc, 0, n * sizeof(float));
    return;
  }
  // The A block of a pass, in the tile layout: step s at s * kStepWords, row r at r * kStepK.
  alignas(64) static thread_local std::uint16_t ablock[kMaxPassSteps * kStepWords];
  alignas(64) float cblk[kBlockRows * kBlockCols];
  alignas(64) float sums[kBlockRows * kBlockCols];
  const std::size_t steps = (k + kStepK - 1) / kStepK, step_elems = kStepK / 2 * ldq;
  // With block scales a pass is whole blocks, so that each block's chain runs in the tiles from 0.
  std::size_t pass_steps = kPassSteps;
  if (scales) {
    const std::size_t bs = scales->block / kStepK;
    pass_steps = bs >= kPassSteps ? std::min(bs, kMaxPassSteps) : kPassSteps / bs * bs;
  }
  Tiles tiles(&kTileConfig);
  for (std::size_t s0 = 0; s0 < steps; s0 += pass_steps) {
    const std::size_t s1 = std::min(steps, s0 + pass_steps);
    // C holds the sums so far: from the second pass on, or when accumulating.
    const bool c_in = s0 > 0 || accumulate;
    for (std::size_t i0 = 0; i0 < m; i0 += kBlockRows) {
      const std::size_t rows = std::min(kBlockRows, m - i0);
      for (std::size_t s = s0; s < s1; ++s)
        copy_a_block(a + i0 * lda + s * kStepK, lda, rows, std::min(kStepK, k - s * kStepK),
                     ablock + (s - s0) * kStepWords);
      const std::size_t ps = s1 - s0;
      const Lookahead ahead{packed, ldp, ldq, n, s0, ps};
      for (std::size_t j0 = 0; j0 < n; j0 += kBlockCols) {
        const std::size_t cols = std::min(kBlockCols, n - j0);
        // The block after this one (the next row block's first, at the end of a row), whose C the
        // look-ahead asks for when it will load it: a few lines a step.
        const bool last_col = j0 + kBlockCols >= n;
        const std::size_t ni0 = last_col ? i0 + kBlockRows : i0, nj0 = last_col ? 0 : j0 + kBlockCols;
        const float* next_c = c_in && ni0 < m ? c + ni0 * ldc + nj0 : nullptr;
        const std::size_t next_rows = next_c ? std::min(kBlockRows, m - ni0) : 0;
        const std::size_t c_lines_step = (2 * next_rows + ps - 1) / ps;
        const std::uint16_t* b0 = packed + (j0 / kStripCols) * ldp;
        // A block of at most 16 columns has one strip: its second B tile repeats the first, and
        // the C tiles it feeds are never stored.
        const std::uint16_t* b1 = cols > kStripCols ? b0 + ldp : b0;
        const bool whole = rows == kBlockRows && cols == kBlockCols;
        float* cb = c + i0 * ldc + j0;
        if (scales) {
          if (c_in) block_from_c(cb, ldc, rows, cols, sums);
          else std::memset(sums, 0, sizeof sums);
          zero_c_tiles(tiles);
        } else if (!c_in) {
          zero_c_tiles(tiles);
        } else if (whole) {
          load_c_tiles(tiles, cb, ldc * sizeof(float));
        } else {
          block_from_c(cb, ldc, rows, cols, cblk);
          load_c_tiles(tiles, cblk, kBlockCols * sizeof(float));
        }
        for (std::size_t s = s0; s < s1; ++s) {
          const std::uint16_t* as = ablock + (s - s0) * kStepWords;
          // The B tiles kSteps ahead, half a tile after each product; the next block's C lines.
          const std::uint16_t* pf1;
          const std::uint16_t* pf0 = ahead.tile_at((j0 / kBlockCols) * ps + (s - s0) + Lookahead::kSteps, &pf1);
          if (next_c) prefetch_c_lines(next_c, ldc, next_rows, (s - s0) * c_lines_step, c_lines_step);
          // Each load just before the first product that needs it, so that an operand is fetched
          // while the product before it runs (the order of Intel's AMX guidance; with all four
          // loads first the kernel measured 25-27 % of the tile peak, this order is not measured
          // yet). Each C tile's chain of products is the same either way, so are the bits.
          tiles.template load<a_tile(0)>(as, kRowBytes);
          tiles.template load<b_tile(0)>(b0 + s * step_elems, ldq * 2);
          tiles.template dp_bf16<c_tile(0, 0), a_tile(0), b_tile(0)>();
          ahead.half_tile(pf0, 0);
          tiles.template load<b_tile(1)>(b1 + s * step_elems, ldq * 2);
          tiles.template dp_bf16<c_tile(0, 1), a_tile(0), b_tile(1)>();
          ahead.half_tile(pf0, kTileRows / 2);
          tiles.template load<a_tile(1)>(as + kTileRows * kStepK, kRowBytes);
          tiles.template dp_bf16<c_tile(1, 0), a_tile(1), b_tile(0)>();
          ahead.half_tile(pf1, 0);
          tiles.template dp_bf16<c_tile(1, 1), a_tile(1), b_tile(1)>();
          ahead.half_tile(pf1, kTileRows / 2);
          const std::size_t k0 = s * kStepK;
          if (scales && ((k0 + kStepK) % scales->block == 0 || s + 1 == steps)) {
            // One block of k done: its sums times the block's scale into the running sums.
            store_c_tiles(tiles, cblk, kBlockCols * sizeof(float));
            zero_c_tiles(tiles);
            const __m512 sc = _mm512_set1_ps(scales->s[(j0 / scales->cols) * scales->lds + k0 / scales->block]);
            for (std::size_t e = 0; e < kBlockRows * kBlockCols; e += 16)
              _mm512_store_ps(sums + e, _mm512_fmadd_ps(sc, _mm512_load_ps(cblk + e), _mm512_load_ps(sums + e)));
          }
        }
        if (scales) {
          block_to_c(sums, rows, cols, cb, ldc);
        } else if (whole) {
          store_c_tiles(tiles, cb, ldc * sizeof(float));
        } else {
          store_c_tiles(tiles, cblk, kBlockCols * sizeof(float));
          block_to_c(cblk, rows, cols, cb, ldc);
        }
      }
    }
  }
}

}  // namespace amx_gemm

// The gemm table of the amx level: the avx512bf16 level's kernels (the same templates, compiled
// with the amx flags) and the tile GEMM over `Tiles`.
template <class Tiles>
constexpr GemmKernels make_gemm_amx_kernels(const char* level) {
  GemmKernels g = make_gemm_kernels();
  g.level = level;
  g.tile_rows = static_cast<unsigned>(amx_gemm::kBlockRows);
  g.tile_cols = static_cast<unsigned>(amx_gemm::kBlockCols);
  g.tile_k = static_cast<unsigned>(amx_gemm::kStepK);
  g.pack_tiles_bf16 = &amx_gemm::pack_tiles<std::uint16_t>;
  g.pack_tiles_f8 = &amx_gemm::pack_tiles<std::uint8_t>;
  g.gemm_tiles = &amx_gemm::gemm_tiles<Tiles>;
  return g;
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
