// The pipelined warpgroup GEMM main loop (sm_90a) shared by op 5's projection and op 3's KV
// projection: a block tile of 128 rows x 128 columns on two warpgroups (64 rows each against all
// 128 columns), k tiles of 64 (four m64n128k16 products a warpgroup), the operands in shared memory
// as core matrices (gemm_tile.cuh's core_offset).
//
// bf16 operands are copied by cp.async straight into a ring of kStages stages, two tiles ahead;
// fp8 operands (e4m3 codes) land in a ring of their own one tile further ahead and are decoded to
// bf16 (every e4m3 value is a bf16 value) by the whole block while the previous tile's products
// run, into kDecoded stages. One batch of products stays in flight over the next tile's barrier.
// Where sums are scaled per group of k (kGroupTiles tiles: fp8 block scales), the loop is
// unrolled by the group so that every wait is fixed (a wait chosen at run time makes ptxas
// serialize the products, C7514); a group's products are drained at its end, its sums scaled and
// added to the totals. The sums of each output run over 16-k products in k order, as the mma.sync
// kernels' do.
//
// Stage reuse: a tile's stage (or decoded stage) is written at iteration i after the barrier that
// every thread reaches only once its own products of tile i - 2 are complete; fp8 codes are
// decoded after that barrier, from a stage the copies of group i filled (waited for by each
// thread, published by the barrier), into the stage tile i - 2 used.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/async_copy.cuh"
#include "cuda/common.cuh"
#include "cuda/gemm_tile.cuh"
#include "cuda/wgmma.cuh"

namespace mlakit::cuda::pipe {

constexpr int kBM = 128, kBN = kCoreTileCols, kBK = 64, kThreads = 2 * kCoreTileThreads;
constexpr int kStages = 4;      // copied stages: tile i + 2 lands while tile i - 1's products may run
constexpr int kDecoded = 3;     // decoded stages: tile i + 1 decoded while tile i - 1's may run
constexpr int kCodeStages = 3;  // code stages: tile i + 3 lands while tile i + 1 is decoded
constexpr int kChunks = kBK / 8;  // 16-byte chunks of a bf16 row of a tile

enum class Operand { bf16, fp8 };

// Rows [r0, r0 + 128) of a row-major operand (row stride ld elements); rows at or past `rows` and
// k at or past the call's K read as zero. Every row starts 16-byte aligned and K is a multiple of
// 16 (the callers check).
struct Source {
  const void* base;
  std::int64_t ld, r0, rows;
};

// Byte offsets of the main loop's shared memory, then `extra` bytes of the caller's.
template <Operand kA, Operand kB>
struct Layout {
  static constexpr std::size_t kTile = std::size_t{kBM} * kBK * 2, kCodeTile = std::size_t{kBM} * kBK;
  static constexpr bool kCodes = kA == Operand::fp8 || kB == Operand::fp8;
  std::size_t a, b, a_codes, b_codes, table, extra, bytes;
  __host__ __device__ explicit Layout(std::size_t extra_bytes) {
    a = 0;
    b = a + (kA == Operand::fp8 ? kDecoded : kStages) * kTile;
    a_codes = b + (kB == Operand::fp8 ? kDecoded : kStages) * kTile;
    b_codes = a_codes + (kA == Operand::fp8 ? kCodeStages * kCodeTile : 0);
    table = b_codes + (kB == Operand::fp8 ? kCodeStages * kCodeTile : 0);
    extra = table + (kCodes ? 256 * sizeof(std::uint16_t) : 0);
    bytes = extra + extra_bytes;
  }
};

// Tile k [k0, k0 + 64) of a bf16 operand queued by cp.async into a stage in core-matrix layout. Two
// neighbouring threads copy one row's 32 bytes of a 16-k step (a whole sector); eight such pairs
// write 512 contiguous bytes of the stage.
__device__ __forceinline__ void queue_bf16(std::uint16_t* stage, const Source& s, std::int64_t k0, std::int64_t K) {
  const auto* src = static_cast<const std::uint16_t*>(s.base);
#pragma unroll
  for (int i = 0; i < kBM * kChunks / kThreads; ++i) {
    const int e = static_cast<int>(threadIdx.x) + i * kThreads;
    const int step = e / (2 * kBM), r = (e % (2 * kBM)) / 2, k = 16 * step + 8 * (e % 2);
    const std::int64_t row = s.r0 + r, col = k0 + k;
    const bool fill = row < s.rows && col < K;
    cp_async_16(stage + core_offset(kBM, r, k), fill ? src + row * s.ld + col : src, fill);
  }
}

// The codes of tile k [k0, k0 + 64): 16-byte chunks, four a row, chunk e at byte 16·e of the stage
// (rows together: decode_codes reads them back after a barrier).
__device__ __forceinline__ void queue_codes(std::uint8_t* stage, const Source& s, std::int64_t k0, std::int64_t K) {
  const auto* src = static_cast<const std::uint8_t*>(s.base);
#pragma unroll
  for (int i = 0; i < kBM * 4 / kThreads; ++i) {
    const int e = static_cast<int>(threadIdx.x) + i * kThreads, r = e / 4, k = 16 * (e % 4);
    const std::int64_t row = s.r0 + r, col = k0 + k;
    const bool fill = row < s.rows && col < K;
    cp_async_16(stage + 16 * e, fill ? src + row * s.ld + col : src, fill);
  }
}

// A code stage decoded into a bf16 stage: each thread takes the chunks of rows f % 128 at k chunk
// f / 128, so that a phase of eight 16-byte stores (eight consecutive rows) covers every bank.
__device__ __forceinline__ void decode_codes(std::uint16_t* stage, const std::uint8_t* codes, const std::uint16_t* table) {
#pragma unroll
  for (int i = 0; i < kBM * 4 / kThreads; ++i) {
    const int f = static_cast<int>(threadIdx.x) + i * kThreads, r = f % kBM, c = f / kBM;
    const uint4 v = *reinterpret_cast<const uint4*>(codes + 16 * (4 * r + c));
    *reinterpret_cast<uint4*>(stage + core_offset(kBM, r, 16 * c)) = decode_fp8x8(v.x, v.y, table);
    *reinterpret_cast<uint4*>(stage + core_offset(kBM, r, 16 * c + 8)) = decode_fp8x8(v.z, v.w, table);
  }
}

// The warpgroup of this thread (its 64 rows of the block tile) and the block tile's row and column
// of its accumulator e.
__device__ __forceinline__ int warpgroup() { return static_cast<int>(threadIdx.x) / kCoreTileThreads; }
__device__ __forceinline__ int acc_row(int e) { return 64 * warpgroup() + core_acc_row(e); }
__device__ __forceinline__ int acc_col(int e) { return core_acc_col(e); }

// out = A[rows of a] · B[rows of b]ᵀ over k [0, K) for this thread's 64 accumulators, K > 0. With
// kGroupTiles == 0 the plain sums; otherwise groups of kGroupTiles k tiles (k [64·kGroupTiles·g,
// 64·kGroupTiles·(g + 1))), each group's sums d added as out[e] = fmaf(scale(e, g), d[e], out[e]).
// Every thread of the block calls it (256 threads); shared memory as Layout<kA, kB>.
template <Operand kA, Operand kB, int kGroupTiles, class Scale>
__device__ __forceinline__ void mainloop(float (&out)[64], unsigned char* smem, const Source& a, const Source& b,
                                         std::int64_t K, Scale scale) {
  using L = Layout<kA, kB>;
  const L layout(0);
  constexpr bool kAf8 = kA == Operand::fp8, kBf8 = kB == Operand::fp8;
  constexpr int kAStages = kAf8 ? kDecoded : kStages, kBStages = kBf8 ? kDecoded : kStages;
  constexpr int kTileElems = kBM * kBK;
  auto* as = reinterpret_cast<std::uint16_t*>(smem + layout.a);
  auto* bs = reinterpret_cast<std::uint16_t*>(smem + layout.b);
  auto* a_codes = smem + layout.a_codes;
  auto* b_codes = smem + layout.b_codes;
  auto* table = reinterpret_cast<std::uint16_t*>(smem + layout.table);
  if (L::kCodes) build_fp8_table(table);

  constexpr int kUnroll = kGroupTiles > 0 ? kGroupTiles : 1;
  const std::int64_t tiles = kGroupTiles > 0 ? kGroupTiles * ((K + kBK * kGroupTiles - 1) / (kBK * kGroupTiles))
                                             : (K + kBK - 1) / kBK;
  // Copy group j: bf16 operands' tile j, fp8 operands' codes of tile j + 1 (tiles past the end are
  // zeros: a group's last tiles may lie past K).
  const auto queue = [&](std::int64_t j) {
    if (kAf8) {
      if (j + 1 < tiles) queue_codes(a_codes + ((j + 1) % kCodeStages) * L::kCodeTile, a, (j + 1) * kBK, K);
    } else if (j < tiles) {
      queue_bf16(as + (j % kStages) * kTileElems, a, j * kBK, K);
    }
    if (kBf8) {
      if (j + 1 < tiles) queue_codes(b_codes + ((j + 1) % kCodeStages) * L::kCodeTile, b, (j + 1) * kBK, K);
    } else if (j < tiles) {
      queue_bf16(bs + (j % kStages) * kTileElems, b, j * kBK, K);
    }
    cp_async_commit();  // possibly empty: the waits count groups
  };
  const auto decode = [&](std::int64_t j) {
    if (kAf8) decode_codes(as + (j % kDecoded) * kTileElems, a_codes + (j % kCodeStages) * L::kCodeTile, table);
    if (kBf8) decode_codes(bs + (j % kDecoded) * kTileElems, b_codes + (j % kCodeStages) * L::kCodeTile, table);
  };
  if (L::kCodes) {
    if (kAf8) queue_codes(a_codes, a, 0, K);
    if (kBf8) queue_codes(b_codes, b, 0, K);
    cp_async_commit();
  }
  queue(0);
  queue(1);
  if (L::kCodes) {
    cp_async_wait<2>();
    __syncthreads();  // tile 0's codes landed everywhere; the table is built
    decode(0);
  }

  // The products' accumulators: a group's sums, or (no groups) the outputs themselves. Each group
  // (or the call) starts with a product that does not accumulate: zeros written to the registers
  // would sit inside the products' pipeline (ptxas then serializes them, C7515).
  float group_sums[64];
  float(&acc)[64] = kGroupTiles > 0 ? group_sums : out;
  if (kGroupTiles > 0) {
#pragma unroll
    for (int e = 0; e < 64; ++e) out[e] = 0.0f;  // the totals
  }
  const int wg = warpgroup();
  for (std::int64_t i0 = 0; i0 < tiles; i0 += kUnroll) {
#pragma unroll
    for (int h = 0; h < kUnroll; ++h) {
      const std::int64_t i = i0 + h;
      cp_async_wait<1>();   // group i
      fence_proxy_async();  // the decoded tiles and the copies, before the products read them
      __syncthreads();      // landed everywhere; tile i - 2's products complete everywhere
      queue(i + 2);
      const std::uint16_t* at = as + (i % kAStages) * kTileElems + wg * 64 * 16;
      const std::uint16_t* bt = bs + (i % kBStages) * kTileElems;
      const bool first = kGroupTiles > 0 ? h == 0 : i == 0;  // of its group, or of the call
      wgmma_fence(acc);
#pragma unroll
      for (int s = 0; s < kBK / 16; ++s)
        wgmma_m64n128k16(acc, at + s * kBM * 16, bt + s * kBN * 16, kCoreLbo, kCoreSbo, !first || s > 0);
      wgmma_commit();
      if (L::kCodes && i + 1 < tiles) decode(i + 1);  // overlaps the products just issued
      if (kGroupTiles > 0 && h == kUnroll - 1) {
        wgmma_wait<0>(acc);
        const std::int64_t g = i0 / kUnroll;
#pragma unroll
        for (int e = 0; e < 64; ++e) {
          out[e] = fmaf(scale(e, g), acc[e], out[e]);
        }
      } else {
        wgmma_wait<1>(acc);
      }
    }
  }
  if (kGroupTiles == 0) wgmma_wait<0>(acc);
}

}  // namespace mlakit::cuda::pipe
