// Operand tiles of the tensor-core GEMMs (op 3's KV projection, op 5's fused QKV): a tile of 32 k of
// a row-major matrix (rows along M or N, columns along k) read with 16-byte loads into registers
// (fetch) and written to shared memory as bf16 (commit). A kernel fetches tile i+1 right after
// committing tile i, so that its global loads are in flight while tile i is multiplied. The
// mma.sync kernels keep a tile as padded rows (VectorTile, mma_tile_64x64); the wgmma kernels as
// core matrices (CoreTile, core_tile_products), 64 rows of A and 128 of B a block.
#pragma once

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/mma.cuh"
#include "cuda/wgmma.cuh"

namespace mlakit::cuda {

constexpr int kTileRows = 64, kTileK = 32, kTileLd = kTileK + 8;  // shared rows of 80 bytes: 16-byte aligned

// Where an operand tile keeps element (r, k), k < kTileK: padded rows (kTileLd apart) for the
// mma.sync kernels' ldmatrix, or core matrices for the wgmma kernels (core_offset, below).
enum class TileLayout { padded_rows, core_matrices };

// Element (r, k) (k < kTileK) of a core-matrix tile of `rows` rows: 16-k step k / 16 (rows x 16
// elements), in it row group r / 8 (two core matrices, kCoreSbo apart), k half (k % 16) / 8
// (kCoreLbo apart), then row r % 8 of the core matrix (16 bytes) and k % 8 (wgmma.cuh's layout).
constexpr std::uint32_t kCoreLbo = 128, kCoreSbo = 256;  // bytes
__host__ __device__ __forceinline__ int core_offset(int rows, int r, int k) {
  return (k / 16) * rows * 16 + (r / 8) * 128 + ((k % 16) / 8) * 64 + (r % 8) * 8 + k % 8;
}

// Rows [r0, r0 + kRows) and columns [k0, k0 + 32) of a matrix of fp8 codes (kElemBytes = 1) or bf16
// (2) with row stride `ld` elements, loaded by kThreads threads; rows at or past `rows` and columns
// at or past `k_end` read as zero. The caller guarantees that every row starts 16-byte aligned and
// that k_end is a multiple of a vector's elements (16 / kElemBytes), so no vector straddles it.
// commit writes it to shared memory as bf16 (fp8 codes decoded through the table) in kLayout.
template <int kRows, int kElemBytes, int kThreads, TileLayout kLayout>
struct OperandTile {
  static constexpr int kPerVec = 16 / kElemBytes;
  static constexpr int kVecsPerRow = kTileK / kPerVec;
  static constexpr int kCount = kRows * kVecsPerRow / kThreads;
  static_assert(kCount >= 1 && (kRows * kVecsPerRow) % kThreads == 0, "threads must split the tile evenly");
  uint4 v[kCount];

  __device__ __forceinline__ void fetch(const void* base, std::int64_t ld, std::int64_t r0, std::int64_t rows,
                                        std::int64_t k0, std::int64_t k_end) {
    const auto* b = static_cast<const std::uint8_t*>(base);
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kThreads, r = e / kVecsPerRow;
      const int col = (e % kVecsPerRow) * kPerVec;
      const std::int64_t row = r0 + r, k = k0 + col;
      v[i] = make_uint4(0, 0, 0, 0);
      if (row < rows && k < k_end) v[i] = *reinterpret_cast<const uint4*>(b + (row * ld + k) * kElemBytes);
    }
  }

  __device__ __forceinline__ void commit(std::uint16_t* tile, const std::uint16_t* table) const {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kThreads, r = e / kVecsPerRow;
      const int col = (e % kVecsPerRow) * kPerVec;
      // 8 consecutive k of one row: one 16-byte store in either layout.
      const auto at = [&](int k) {
        return tile + (kLayout == TileLayout::padded_rows ? r * kTileLd + k : core_offset(kRows, r, k));
      };
      if constexpr (kElemBytes == 2) {
        (void)table;
        *reinterpret_cast<uint4*>(at(col)) = v[i];
      } else {
        *reinterpret_cast<uint4*>(at(col)) = decode_fp8x8(v[i].x, v[i].y, table);
        *reinterpret_cast<uint4*>(at(col + 8)) = decode_fp8x8(v[i].z, v[i].w, table);
      }
    }
  }
};

// The mma.sync kernels' 64-row tiles.
template <int kElemBytes, int kThreads>
using VectorTile = OperandTile<kTileRows, kElemBytes, kThreads, TileLayout::padded_rows>;

// One 32-wide k step of a 64x64 block tile: 4 warps of 32x32, acc[2][4] m16n8 fragments per warp.
// The fragments come by ldmatrix, four per 16-wide k step instead of 16 four-byte loads (the same
// registers: 80-byte rows keep each row 16-byte aligned and the eight rows of a matrix in eight
// bank groups).
__device__ __forceinline__ void mma_tile_64x64(float (&acc)[2][4][4], const std::uint16_t* xs, const std::uint16_t* ws,
                                               int wm, int wn) {
#pragma unroll
  for (int kk = 0; kk < kTileK; kk += 16) {
    std::uint32_t af[2][4], b[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i) ldmatrix_x4(af[i], ldmatrix_a_row(xs, kTileLd, wm + 16 * i, kk));
#pragma unroll
    for (int j = 0; j < 2; ++j) ldmatrix_x4(b[j], ldmatrix_b_nmajor_row(ws, kTileLd, wn + 16 * j, kk));
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::uint32_t bf[2] = {b[j / 2][2 * (j % 2)], b[j / 2][2 * (j % 2) + 1]};
        mma_bf16_16816(acc[i][j], af[i], bf);
      }
  }
}

// ---- the wgmma kernels' tiles ---------------------------------------------------------------------
constexpr int kCoreTileCols = 128, kCoreTileThreads = 128;  // B rows (output columns) a block; one warpgroup

// A tile of kRows rows as core matrices, loaded by the block's warpgroup.
template <int kRows, int kElemBytes>
using CoreTile = OperandTile<kRows, kElemBytes, kCoreTileThreads, TileLayout::core_matrices>;

// acc (64 rows x 128 columns, wgmma.cuh's fragment) += the tiles' product over their 32 k: two
// m64n128k16 products (the caller fences, commits and waits).
__device__ __forceinline__ void core_tile_products(float (&acc)[64], const std::uint16_t* xs, const std::uint16_t* ws) {
  wgmma_m64n128k16(acc, xs, ws, kCoreLbo, kCoreSbo, true);
  wgmma_m64n128k16(acc, xs + kTileRows * 16, ws + kCoreTileCols * 16, kCoreLbo, kCoreSbo, true);
}

// One 32-k tile of a wgmma kernel's two-stage loop, after the barrier that publishes stage `now`:
// its products, the next tile (fetched by the caller into xt and wt, when `more`) committed to the
// other stage meanwhile, then the wait for the products.
template <class XT, class WT>
__device__ __forceinline__ void core_tile_step(float (&acc)[64], const std::uint16_t* xs_now, const std::uint16_t* ws_now,
                                               const XT& xt, const WT& wt, std::uint16_t* xs_next, std::uint16_t* ws_next,
                                               bool more, const std::uint16_t* table) {
  wgmma_fence(acc);
  core_tile_products(acc, xs_now, ws_now);
  wgmma_commit();
  if (more) {
    xt.commit(xs_next, table);
    wt.commit(ws_next, table);
  }
  wgmma_wait<0>(acc);
}

// Row and column (within the block tile) of accumulator e of wgmma.cuh's fragment.
__device__ __forceinline__ int core_acc_row(int e) {
  const int t = static_cast<int>(threadIdx.x) % kCoreTileThreads;
  return 16 * (t / 32) + (t % 32) / 4 + ((e % 4) >= 2 ? 8 : 0);
}
__device__ __forceinline__ int core_acc_col(int e) {
  return 8 * (e / 4) + 2 * (static_cast<int>(threadIdx.x) % 4) + (e & 1);
}

}  // namespace mlakit::cuda
