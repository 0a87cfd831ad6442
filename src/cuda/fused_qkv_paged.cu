// Op 5 (docs/fused_qkv_paged.md) on the GPU: Y = X·Wᵀ with the weight decoded tile by tile, Q columns to `output`,
// K/V columns scattered into the paged cache at each token's position.
//
// bf16 activations: BF16 tensor cores. Block tile 64 rows x 64 columns, k tiles of 32, 4 warps of
// 32x32. The weight tile is decoded into shared memory as bf16, which is exact for every format:
// dense bf16 as is; fp8 codes (every e4m3 value is a bf16 value), with the 128x128 block scale
// applied to each 128-wide k block's partial sums (a 64-column tile lies in one scale row);
// GPTQ as the spec's bf16((q - z)·scale) (the f32 product is exact, one rounding to bf16).
// f32 activations: the same tiling with f32 FMA (16 k per tile, 256 threads, 4x4 per thread); the
// weight is decoded to f32 (fp8: code·scale rounded once to f32; GPTQ: its bf16 value).
// Both accumulate in f32 and round once to the dtype in the epilogue, which writes each row's Q
// part to `output` and its K/V part to (LUT[b, pos / page], kv, layer, pos % page, head, d).
// GPTQ with bf16 activations and more than one row tile (MLAKIT_CUDA_GPTQ_DECODE_ONCE): a first
// kernel decodes the weight once into a bf16 workspace ([columns x K], in column groups within
// kDecodeBudgetBytes), then the dense kernel with 16-byte loads runs on it. Decoding inside the
// GEMM repeats the work for every row tile (8 times at T = 512) in the k loop's critical path; the
// values, the tiles and the products are the same, so are the bits.
// On sm_90a builds running on an sm_90 GPU (MLAKIT_CUDA_WGMMA=on; "auto" keeps it off until a GPU
// has measured it: the two-stage wgmma kernel before it ran DeepSeek-V3's fp8 projection at T 2048
// in 1.03 ms on an H200 against 0.67 on mma.sync): the dense and fp8 bf16 GEMMs (the decode-once
// route's second kernel too) on the pipelined warpgroup GEMM (gemm_pipeline.cuh): block tile
// 128 x 128 on two warpgroups, k tiles of 64 in a four-stage cp.async ring loaded two tiles
// ahead, fp8 codes decoded in shared memory by the block while the previous tile's products run.
// TODO(perf): decode (T <= 32) reads the weight with ceil(N/64) blocks only; a deterministic split-K
// (fixed-order reduction of partial tiles) would spread the weight stream over every SM.
#include <algorithm>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/fused_qkv_paged.hpp"
#include "cuda/gemm_pipeline.cuh"
#include "cuda/gemm_tile.cuh"
#include "cuda/mma.cuh"
#include "cuda/wgmma_route.hpp"

namespace mlakit::cuda {
namespace {

constexpr const char* kOp = "fused_qkv_paged";
constexpr int kBM = 64, kBN = 64;
constexpr int kBK = 32, kLdT = kBK + 8;  // tensor-core path: k tile and shared row stride (bf16)
constexpr int kFK = 16, kLdF = kBM + 4;  // f32 path: k tile and shared row stride (f32)
constexpr int kMmaThreads = 128, kFmaThreads = 256;
constexpr std::int64_t kDecodeOnceMinRows = kBM + 1;     // two row tiles: each would decode the weight
constexpr std::int64_t kDecodeBudgetBytes = 256ll << 20;  // the decoded weight of a column group
constexpr int kDecodeThreads = 256;
static_assert(kBM == kTileRows && kBN == kTileRows && kBK == kTileK && kLdT == kTileLd, "gemm_tile.cuh's tile");

enum Format : int { kDense = 0, kFp8 = 1, kGptq = 2 };

struct Params {
  const void* x;
  std::int64_t T, K, N, q_dim;
  int format;
  const void* w;              // dense: dtype [N, K]; fp8: codes [N, K]
  const float* wscale;        // fp8: [ceil(N/128), ceil(K/128)]
  const std::uint32_t* qweight;  // gptq: [K/8, N]
  const std::uint16_t* gscales;  // gptq: f16 or bf16 [K/gs, N]
  bool scales_f16;
  const std::uint32_t* qzeros;   // gptq with zero points: [K/gs, N/8]
  int zero_bias;                 // added to each stored zero nibble: 1 for v1 checkpoints
  const std::int32_t* g_idx;     // gptq, optional: [K]
  std::uint32_t* error_flag;     // null: not checked (g_idx validated on the host)
  std::int64_t group_size;
  const std::uint32_t* iro;
  int B;
  DevPagedCache cache;
  int layer;
  void* out;
  // The launch's columns [n_begin, n_end); weight row n lies at row n - w_row0 of w (w_row0: the
  // first column of a decoded group, else 0).
  std::int64_t n_begin, n_end, w_row0;
};

__device__ __forceinline__ std::uint32_t nibble(std::uint32_t word, std::int64_t i) { return (word >> (4 * i)) & 0xFu; }

// The GPTQ weight W[n, k] as bf16 bits: bf16((q - z)·scale), the product exact in f32.
__device__ __forceinline__ std::uint16_t gptq_weight(const Params& p, std::uint32_t word, std::int64_t n, std::int64_t k) {
  const std::int64_t q = nibble(word, k % 8);
  std::int64_t g = k / p.group_size;
  if (p.g_idx != nullptr) {
    // A group the host could not check (a run on device memory): clamped, and the flag raised.
    const std::int64_t given = p.g_idx[k], groups = p.K / p.group_size;
    g = given < 0 ? 0 : given >= groups ? groups - 1 : given;
    if (g != given && p.error_flag != nullptr) atomicOr(p.error_flag, core::kDeviceErrorGIdx);
  }
  std::int64_t z = 8;
  if (p.qzeros != nullptr) z = nibble(p.qzeros[g * (p.N / 8) + n / 8], n % 8) + p.zero_bias;
  const std::uint16_t sb = p.gscales[g * p.N + n];
  const float s = p.scales_f16 ? f16_to_f32(sb) : bf16_to_f32(sb);
  return f32_to_bf16(static_cast<float>(q - z) * s);
}

// Cache element offsets of rows [m0, m0 + rows) (row base of kv = 0, head 0), -1 past T.
__device__ void row_bases(const Params& p, std::int64_t m0, std::int64_t* base, int rows = kBM) {
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    const std::int64_t t = m0 + r;
    if (t >= p.T) {
      base[r] = -1;
      continue;
    }
    const int b = find_sequence(p.iro, p.B, t);
    const std::int64_t pos = static_cast<std::int64_t>(p.cache.cache_lengths[b]) + (t - p.iro[b]);
    base[r] = p.cache.row_offset(p.cache.block_of(b, pos), 0, p.layer, pos % p.cache.page_size, 0);
  }
}

// Stores Y[t, n] (rounded to the dtype) to output or to the cache.
template <bool kF32>
__device__ __forceinline__ void store(const Params& p, const std::int64_t* base, int r, std::int64_t t, std::int64_t n,
                                      float v) {
  if (t >= p.T || n >= p.n_end) return;  // n_end: N, or the end of a decoded group
  std::int64_t at;
  void* dst;
  if (n < p.q_dim) {
    at = t * p.q_dim + n;
    dst = p.out;
  } else {
    // Column j of the cache part: (kv, head, element), each through the cache's strides.
    const std::int64_t j = n - p.q_dim, hs = p.cache.head_size, plane = p.cache.heads * hs;
    at = base[r] + (j / plane) * p.cache.stride[1] + ((j % plane) / hs) * p.cache.stride[4] + j % hs;
    dst = p.cache.blocks_rw;
  }
  if (kF32)
    static_cast<float*>(dst)[at] = v;
  else
    static_cast<std::uint16_t*>(dst)[at] = f32_to_bf16(v);
}

// ---- bf16 activations: tensor cores ------------------------------------------------------------
// kWVec: 0 = element loads (any shape, GPTQ); 1 = fp8 weight codes and 2 = bf16 weight with 16-byte
// loads of X and W fetched one k tile ahead (K a multiple of 16, 16-byte aligned bases).
template <int kWVec>
__global__ void __launch_bounds__(kMmaThreads) gemm_bf16_kernel(Params p) {
  __shared__ __align__(16) std::uint16_t xs[kBM * kLdT];
  __shared__ __align__(16) std::uint16_t ws[kBN * kLdT];
  __shared__ std::uint16_t table[256];
  __shared__ std::int64_t base[kBM];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  const std::int64_t n0 = p.n_begin + static_cast<std::int64_t>(blockIdx.x) * kBN;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * kBM;
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;  // the warp's 32x32 sub-tile
  if (p.format == kFp8) build_fp8_table(table);
  row_bases(p, m0, base);

  float acc[2][4][4], total[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = total[i][j][e] = 0.0f;

  const auto* x = static_cast<const std::uint16_t*>(p.x);
  const std::int64_t kblocks = (p.K + 127) / 128;
  VectorTile<2, kMmaThreads> xt;
  VectorTile<kWVec == 1 ? 1 : 2, kMmaThreads> wt;
  if constexpr (kWVec != 0) {
    xt.fetch(x, p.K, m0, p.T, 0, p.K);
    wt.fetch(p.w, p.K, n0 - p.w_row0, p.n_end - p.w_row0, 0, p.K);
  }
  for (std::int64_t k0 = 0; k0 < p.K; k0 += kBK) {
    __syncthreads();  // the previous tile is consumed (and the table built)
    if constexpr (kWVec != 0) {
      xt.commit(xs, table);
      wt.commit(ws, table);
      if (k0 + kBK < p.K) {  // in flight while this tile is multiplied
        xt.fetch(x, p.K, m0, p.T, k0 + kBK, p.K);
        wt.fetch(p.w, p.K, n0 - p.w_row0, p.n_end - p.w_row0, k0 + kBK, p.K);
      }
    } else {
      for (int e = tid; e < kBM * kBK; e += kMmaThreads) {
        const int r = e / kBK, kk = e % kBK;
        const std::int64_t t = m0 + r, k = k0 + kk;
        xs[r * kLdT + kk] = (t < p.T && k < p.K) ? x[t * p.K + k] : std::uint16_t{0};
      }
      if (p.format == kGptq) {
        // 4 packed rows of 8 k each, 64 columns: one word per (k row, column).
        for (int e = tid; e < (kBK / 8) * kBN; e += kMmaThreads) {
          const int kr = e / kBN, nn = e % kBN;
          const std::int64_t n = n0 + nn, kbase = k0 + kr * 8;
          const bool in = n < p.N && kbase < p.K;
          const std::uint32_t word = in ? p.qweight[(kbase / 8) * p.N + n] : 0u;
#pragma unroll
          for (int i = 0; i < 8; ++i) ws[nn * kLdT + kr * 8 + i] = in ? gptq_weight(p, word, n, kbase + i) : std::uint16_t{0};
        }
      } else {
        for (int e = tid; e < kBN * kBK; e += kMmaThreads) {
          const int nn = e / kBK, kk = e % kBK;
          const std::int64_t n = n0 + nn, k = k0 + kk, at = (n - p.w_row0) * p.K + k;
          std::uint16_t v = 0;
          if (n < p.n_end && k < p.K)
            v = p.format == kFp8 ? table[static_cast<const std::uint8_t*>(p.w)[at]]
                                 : static_cast<const std::uint16_t*>(p.w)[at];
          ws[nn * kLdT + kk] = v;
        }
      }
    }
    __syncthreads();
    mma_tile_64x64(acc, xs, ws, wm, wn);
    if (p.format == kFp8 && ((k0 + kBK) % 128 == 0 || k0 + kBK >= p.K)) {
      // End of a 128-wide k block: apply its scale (one per 64-column tile) and start over.
      const float s = p.wscale[(n0 / 128) * kblocks + k0 / 128];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            total[i][j][e] = fmaf(s, acc[i][j][e], total[i][j][e]);
            acc[i][j][e] = 0.0f;
          }
    }
  }
  if (p.format == kFp8) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = total[i][j][e];
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = wm + 16 * i + g, col = wn + 8 * j + 2 * c;
      store<false>(p, base, r, m0 + r, n0 + col, acc[i][j][0]);
      store<false>(p, base, r, m0 + r, n0 + col + 1, acc[i][j][1]);
      store<false>(p, base, r + 8, m0 + r + 8, n0 + col, acc[i][j][2]);
      store<false>(p, base, r + 8, m0 + r + 8, n0 + col + 1, acc[i][j][3]);
    }
}

// ---- bf16 activations on sm_90a: the pipelined warpgroup GEMM (gemm_pipeline.cuh) ---------------
// Block tile 128 x 128, the rows' cache bases after the main loop's shared memory.
template <bool kF8>
using WgmmaLayout = pipe::Layout<pipe::Operand::bf16, kF8 ? pipe::Operand::fp8 : pipe::Operand::bf16>;
template <bool kF8>
std::size_t wgmma_shared_bytes() {
  return WgmmaLayout<kF8>(pipe::kBM * sizeof(std::int64_t)).bytes;
}

// kF8: fp8 weight codes, else bf16 weight (K a multiple of 16, 16-byte aligned rows). The products
// and the fp8 block scales as gemm_bf16_kernel's (one scale per 128-wide k block, the 128-column
// tile inside one scale row), so the results differ from it only by the tensor cores' order of
// summation within a product.
template <bool kF8>
__global__ void __launch_bounds__(pipe::kThreads, 1) gemm_bf16_wgmma_kernel(Params p) {
  MLAKIT_DYNAMIC_SHARED(smem);
  auto* base = reinterpret_cast<std::int64_t*>(smem + WgmmaLayout<kF8>(0).extra);
  const std::int64_t n0 = p.n_begin + static_cast<std::int64_t>(blockIdx.x) * pipe::kBN;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * pipe::kBM;
  row_bases(p, m0, base, pipe::kBM);  // published by the main loop's first barrier (K >= 16)
  const pipe::Source a{p.x, p.K, m0, p.T}, b{p.w, p.K, n0 - p.w_row0, p.n_end - p.w_row0};
  const std::int64_t kblocks = (p.K + 127) / 128;
  const float* scales = kF8 ? p.wscale + (n0 / 128) * kblocks : nullptr;  // this tile's scale row
  float acc[64];
  pipe::mainloop<pipe::Operand::bf16, kF8 ? pipe::Operand::fp8 : pipe::Operand::bf16, kF8 ? 2 : 0>(
      acc, smem, a, b, p.K, [scales](int, std::int64_t g) { return scales[g]; });
#pragma unroll
  for (int e = 0; e < 64; ++e) {
    const int r = pipe::acc_row(e);
    store<false>(p, base, r, m0 + r, n0 + pipe::acc_col(e), acc[e]);
  }
}

// GPTQ weight columns [n_begin, n_end) decoded to bf16 rows of K: dst[(n - n_begin) * K + k] =
// gptq_weight(n, k), as the GEMM's own decode forms them. One thread per (packed row of 8 k,
// column): a column's neighbours read neighbouring words; each writes its 8 values as 16 bytes.
__global__ void __launch_bounds__(kDecodeThreads) decode_gptq_kernel(Params p, std::uint16_t* dst) {
  const std::int64_t cols = p.n_end - p.n_begin, total = (p.K / 8) * cols;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::int64_t kw = e / cols, n = p.n_begin + e % cols;
    const std::uint32_t word = p.qweight[kw * p.N + n];
    std::uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      o[i] = static_cast<std::uint32_t>(gptq_weight(p, word, n, 8 * kw + 2 * i)) |
             static_cast<std::uint32_t>(gptq_weight(p, word, n, 8 * kw + 2 * i + 1)) << 16;
    *reinterpret_cast<uint4*>(dst + (n - p.n_begin) * p.K + 8 * kw) = make_uint4(o[0], o[1], o[2], o[3]);
  }
}

// ---- f32 activations: FMA -------------------------------------------------------------------------
__global__ void __launch_bounds__(kFmaThreads) gemm_f32_kernel(Params p) {
  __shared__ __align__(16) float xs[kFK * kLdF];  // [k][m]
  __shared__ __align__(16) float ws[kFK * kLdF];  // [k][n]
  __shared__ std::int64_t base[kBM];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kBN, m0 = static_cast<std::int64_t>(blockIdx.y) * kBM;
  row_bases(p, m0, base);
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  const auto* x = static_cast<const float*>(p.x);
  const std::int64_t kblocks = (p.K + 127) / 128;
  for (std::int64_t k0 = 0; k0 < p.K; k0 += kFK) {
    __syncthreads();
    for (int e = tid; e < kBM * kFK; e += kFmaThreads) {
      const int r = e / kFK, kk = e % kFK;
      const std::int64_t t = m0 + r, k = k0 + kk;
      xs[kk * kLdF + r] = (t < p.T && k < p.K) ? x[t * p.K + k] : 0.0f;
    }
    if (p.format == kGptq) {
      for (int e = tid; e < (kFK / 8) * kBN; e += kFmaThreads) {
        const int kr = e / kBN, nn = e % kBN;
        const std::int64_t n = n0 + nn, kbase = k0 + kr * 8;
        const bool in = n < p.N && kbase < p.K;
        const std::uint32_t word = in ? p.qweight[(kbase / 8) * p.N + n] : 0u;
#pragma unroll
        for (int i = 0; i < 8; ++i) ws[(kr * 8 + i) * kLdF + nn] = in ? bf16_to_f32(gptq_weight(p, word, n, kbase + i)) : 0.0f;
      }
    } else {
      for (int e = tid; e < kBN * kFK; e += kFmaThreads) {
        const int nn = e / kFK, kk = e % kFK;
        const std::int64_t n = n0 + nn, k = k0 + kk;
        float v = 0.0f;
        if (n < p.N && k < p.K) {
          if (p.format == kFp8)
            v = f8e4m3_to_f32(static_cast<const std::uint8_t*>(p.w)[n * p.K + k]) * p.wscale[(n / 128) * kblocks + k / 128];
          else
            v = static_cast<const float*>(p.w)[n * p.K + k];
        }
        ws[kk * kLdF + nn] = v;
      }
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kFK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = xs[kk * kLdF + ty * 4 + i];
        b[i] = ws[kk * kLdF + tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = ty * 4 + i;
      store<true>(p, base, r, m0 + r, n0 + tx * 4 + j, acc[i][j]);
    }
}

core::RouteSwitch& decode_once_route() {
  static core::RouteSwitch r("MLAKIT_CUDA_GPTQ_DECODE_ONCE");
  return r;
}

}  // namespace

namespace gptq_decode_once {
core::RouteMode mode() { return decode_once_route().mode(); }
void set_mode(core::RouteMode m) { decode_once_route().set_mode(m); }
}  // namespace gptq_decode_once

Status fused_qkv_paged(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, const FusedQkvPagedArgs& host,
                       const core::DeviceLaunch& launch) {
  (void)host;
  const std::int64_t T = a.hidden_state.shape[0];
  if (T == 0) return Status::success();
  Params p;
  p.x = a.hidden_state.data;
  p.T = T;
  p.K = a.hidden_state.shape[1];
  p.q_dim = d.q_dim;
  p.N = d.q_dim + a.kv_cache.kv_dim() * a.kv_cache.num_kv_heads() * a.kv_cache.head_size();
  p.format = d.weight_format == WeightFormat::dense ? kDense : d.weight_format == WeightFormat::fp8_block ? kFp8 : kGptq;
  p.w = a.weight.data;
  p.wscale = static_cast<const float*>(a.weight_scale.data);
  p.qweight = static_cast<const std::uint32_t*>(a.qweight.data);
  p.gscales = static_cast<const std::uint16_t*>(a.scales.data);
  p.scales_f16 = a.scales.data != nullptr && a.scales.dtype == DType::f16;
  p.qzeros = d.has_zp ? static_cast<const std::uint32_t*>(a.qzeros.data) : nullptr;
  p.zero_bias = zero_bias(d);
  p.g_idx = static_cast<const std::int32_t*>(a.g_idx.data);
  p.error_flag = launch.error_flag;
  p.group_size = d.group_size;
  p.iro = static_cast<const std::uint32_t*>(a.input_row_offsets.data);
  p.B = static_cast<int>(a.input_row_offsets.shape[0] - 1);
  p.cache = DevPagedCache::from(a.kv_cache);
  p.layer = static_cast<int>(a.layer_idx);
  p.out = a.output.data;
  p.n_begin = 0;
  p.n_end = p.N;
  p.w_row0 = 0;

  const std::int64_t row_tiles = ceil_div(T, kBM), col_tiles = ceil_div(p.N, kBN);
  if (row_tiles > 65535)
    return exceeds_one_launch(kOp, "hidden_state",
                              std::to_string(T) + " rows (at most " + std::to_string(65535 * kBM) + " per launch)");
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_tiles));
  const cudaStream_t stream = as_stream(launch.stream);
  const auto aligned = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
  const bool bf16 = a.hidden_state.dtype == DType::bf16;
  // The pipelined warpgroup kernel (only when forced until a GPU has measured it), for the calls the
  // 16-byte-load kernels take, where the GPU gives a block its shared memory.
  bool wgmma = bf16 && p.K % 16 == 0 && aligned(p.x) && wgmma_route::takes(false);
  if (wgmma) {
    Status s;
    const std::size_t limit = max_shared_memory(kOp, &s);
    MLAKIT_STATUS_TRY(s);
    wgmma = (p.format == kFp8 ? wgmma_shared_bytes<true>() : wgmma_shared_bytes<false>()) <= limit;
  }
  // The dense or fp8 GEMM over columns [n_begin, n_end) of p on the 16-byte-load kernels.
  bool counted = false;  // runs() counts calls, not launches (one per decoded column group)
  const auto vector_gemm = [&](const Params& q, bool fp8) -> Status {
    if (wgmma) {
      if (!counted) wgmma_route::count();
      counted = true;
      const dim3 wg_grid(static_cast<unsigned>(ceil_div(q.n_end - q.n_begin, pipe::kBN)),
                         static_cast<unsigned>(ceil_div(T, pipe::kBM)));
      return fp8 ? launch_kernel(kOp, "gemm_bf16_wgmma_kernel", gemm_bf16_wgmma_kernel<true>, wg_grid, pipe::kThreads,
                                 wgmma_shared_bytes<true>(), stream, q)
                 : launch_kernel(kOp, "gemm_bf16_wgmma_kernel", gemm_bf16_wgmma_kernel<false>, wg_grid, pipe::kThreads,
                                 wgmma_shared_bytes<false>(), stream, q);
    }
    const dim3 mma_grid(static_cast<unsigned>(ceil_div(q.n_end - q.n_begin, kBN)), static_cast<unsigned>(row_tiles));
    return fp8 ? launch_kernel(kOp, "gemm_bf16_kernel", gemm_bf16_kernel<1>, mma_grid, kMmaThreads, 0, stream, q)
               : launch_kernel(kOp, "gemm_bf16_kernel", gemm_bf16_kernel<2>, mma_grid, kMmaThreads, 0, stream, q);
  };
  // The decode-once route: the decoded rows are 16-byte aligned (K a multiple of 8), the dense
  // kernel's 16-byte loads need K a multiple of 16 and aligned activations.
  const bool decode_once = bf16 && p.format == kGptq && p.K % 16 == 0 && aligned(p.x) &&
                           decode_once_route().use_for(true, static_cast<std::size_t>(T), kDecodeOnceMinRows);
  if (decode_once) {
    const std::int64_t group = std::max<std::int64_t>(kBN, kDecodeBudgetBytes / (p.K * 2) / kBN * kBN);
    const std::int64_t cols = std::min(group, col_tiles * kBN);
    Temporaries tmp;
    const std::size_t decoded = tmp.add(static_cast<std::size_t>(cols * p.K) * sizeof(std::uint16_t));
    if (launch.workspace_query != nullptr) {
      *launch.workspace_query = tmp.total();
      return Status::success();
    }
    MLAKIT_STATUS_TRY(tmp.acquire(kOp, launch, stream));
    Params dp = p;
    dp.format = kDense;
    dp.w = tmp.at<std::uint16_t>(decoded);
    for (std::int64_t g0 = 0; g0 < p.N; g0 += group) {
      p.n_begin = dp.n_begin = dp.w_row0 = g0;
      p.n_end = dp.n_end = std::min(p.N, g0 + group);
      const std::int64_t words = (p.K / 8) * (p.n_end - p.n_begin);
      const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(words, kDecodeThreads), 65535));
      MLAKIT_STATUS_TRY(launch_kernel(kOp, "decode_gptq_kernel", decode_gptq_kernel, dim3(blocks), kDecodeThreads, 0,
                                      stream, p, tmp.at<std::uint16_t>(decoded)));
      MLAKIT_STATUS_TRY(vector_gemm(dp, false));
    }
    return Status::success();
  }
  if (launch.workspace_query != nullptr) return Status::success();  // no temporaries
  if (bf16) {
    const bool vector = p.format != kGptq && p.K % 16 == 0 && aligned(p.x) && aligned(p.w);
    if (vector) return vector_gemm(p, p.format == kFp8);
    return launch_kernel(kOp, "gemm_bf16_kernel", gemm_bf16_kernel<0>, grid, kMmaThreads, 0, stream, p);
  }
  return launch_kernel(kOp, "gemm_f32_kernel", gemm_f32_kernel, grid, kFmaThreads, 0, stream, p);
}

}  // namespace mlakit::cuda
