// Operand tiles of the tensor-core GEMMs (op 3's KV projection, op 5's fused QKV): a 64 x 32 tile of
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

// 16 fp8 codes decoded through `table` (the bf16 bits of each code: exact) to 16 bf16 at dst.
__device__ __forceinline__ void decode_fp8x16(std::uint16_t* dst, const uint4& codes, const std::uint16_t* table) {
  reinterpret_cast<uint4*>(dst)[0] = decode_fp8x8(codes.x, codes.y, table);
  reinterpret_cast<uint4*>(dst)[1] = decode_fp8x8(codes.z, codes.w, table);
}

// Rows [r0, r0 + 64) and columns [k0, k0 + 32) of a matrix of fp8 codes (kElemBytes = 1) or bf16
// (2) with row stride `ld` elements; rows at or past `rows` and columns at or past `k_end` read as
// zero. The caller guarantees that every row starts 16-byte aligned and that k_end is a multiple of
// a vector's elements (16 / kElemBytes), so no vector straddles it.
template <int kElemBytes, int kThreads>
struct VectorTile {
  static constexpr int kPerVec = 16 / kElemBytes;
  static constexpr int kVecsPerRow = kTileK / kPerVec;
  static constexpr int kCount = kTileRows * kVecsPerRow / kThreads;
  static_assert(kCount >= 1 && (kTileRows * kVecsPerRow) % kThreads == 0, "threads must split the tile evenly");
  uint4 v[kCount];

  __device__ __forceinline__ void fetch(const void* base, std::int64_t ld, std::int64_t r0, std::int64_t rows,
                                        std::int64_t k0, std::int64_t k_end) {
    const auto* b = static_cast<const std::uint8_t*>(base);
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kThreads, r = e / kVecsPerRow, col = (e % kVecsPerRow) * kPerVec;
      const std::int64_t row = r0 + r, k = k0 + col;
      v[i] = make_uint4(0, 0, 0, 0);
      if (row < rows && k < k_end) v[i] = *reinterpret_cast<const uint4*>(b + (row * ld + k) * kElemBytes);
    }
  }

  __device__ __forceinline__ void commit(std::uint16_t* tile, const std::uint16_t* table) const {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kThreads, r = e / kVecsPerRow, col = (e % kVecsPerRow) * kPerVec;
      std::uint16_t* dst = tile + r * kTileLd + col;
      if constexpr (kElemBytes == 2) {
        (void)table;
        *reinterpret_cast<uint4*>(dst) = v[i];
      } else {
        decode_fp8x16(dst, v[i], table);
      }
    }
  }
};

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
constexpr std::uint32_t kCoreLbo = 128, kCoreSbo = 256;      // bytes: wgmma.cuh's layout, below

// Element (r, k) (k < kTileK) of a tile of `rows` rows: 16-k step k / 16 (rows x 16 elements), in
// it row group r / 8 (two core matrices, kCoreSbo apart), k half (k % 16) / 8 (kCoreLbo apart),
// then row r % 8 of the core matrix (16 bytes) and k % 8.
__device__ __forceinline__ int core_offset(int rows, int r, int k) {
  return (k / 16) * rows * 16 + (r / 8) * 128 + ((k % 16) / 8) * 64 + (r % 8) * 8 + k % 8;
}

// VectorTile's loads of rows [r0, r0 + kRows) x k [k0, k0 + kTileK), committed in the layout above
// (fp8 codes decoded to bf16 through the table), by the kCoreTileThreads threads of a block.
template <int kRows, int kElemBytes>
struct CoreTile {
  static constexpr int kPerVec = 16 / kElemBytes;
  static constexpr int kVecsPerRow = kTileK / kPerVec;
  static constexpr int kCount = kRows * kVecsPerRow / kCoreTileThreads;
  static_assert(kCount >= 1 && (kRows * kVecsPerRow) % kCoreTileThreads == 0, "threads must split the tile evenly");
  uint4 v[kCount];

  __device__ __forceinline__ void fetch(const void* base, std::int64_t ld, std::int64_t r0, std::int64_t rows,
                                        std::int64_t k0, std::int64_t k_end) {
    const auto* b = static_cast<const std::uint8_t*>(base);
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kCoreTileThreads, r = e / kVecsPerRow;
      const int col = (e % kVecsPerRow) * kPerVec;
      const std::int64_t row = r0 + r, k = k0 + col;
      v[i] = make_uint4(0, 0, 0, 0);
      if (row < rows && k < k_end) v[i] = *reinterpret_cast<const uint4*>(b + (row * ld + k) * kElemBytes);
    }
  }

  __device__ __forceinline__ void commit(std::uint16_t* tile, const std::uint16_t* table) const {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kCoreTileThreads, r = e / kVecsPerRow;
      const int col = (e % kVecsPerRow) * kPerVec;
      if constexpr (kElemBytes == 2) {
        (void)table;
        *reinterpret_cast<uint4*>(tile + core_offset(kRows, r, col)) = v[i];
      } else {
        *reinterpret_cast<uint4*>(tile + core_offset(kRows, r, col)) = decode_fp8x8(v[i].x, v[i].y, table);
        *reinterpret_cast<uint4*>(tile + core_offset(kRows, r, col + 8)) = decode_fp8x8(v[i].z, v[i].w, table);
      }
    }
  }
};

// acc (64 rows x 128 columns, wgmma.cuh's fragment) += the tiles' product over their 32 k: two
// m64n128k16 products (the caller fences, commits and waits).
__device__ __forceinline__ void core_tile_products(float (&acc)[64], const std::uint16_t* xs, const std::uint16_t* ws) {
  wgmma_m64n128k16(acc, xs, ws, kCoreLbo, kCoreSbo, true);
  wgmma_m64n128k16(acc, xs + kTileRows * 16, ws + kCoreTileCols * 16, kCoreLbo, kCoreSbo, true);
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
