// Op 3 (docs/mla_prefill_fp8.md) on the GPU: four kernels on the call's stream.
//
// 1. rope_norm_kernel (one block per new token): RoPE (interleaved pairs, f32) on the rope part of
//    every head of q and of the token's cache row, RMSNorm of the row's latent part (sum of squares
//    in f32 with a fixed reduction tree, y = bf16(x·r), then bf16(y·gamma)), all in place.
// 2. gather_quant_kernel (one block per buffer row): the latent part of the cache row at
//    cache_offsets[b] + j, quantized per bk-column group exactly as the reference does (the same
//    functions from core/shared/mla_prefill_fp8_quant.hpp; the group's amax is a max, which does not
//    depend on the reduction order, so codes and scales are bit-identical); its rope part to a
//    rope buffer. Rows no query can see (page padding past the last query) are zeroed and skipped,
//    as the reference never computes them.
// 3. kv_gemm_kernel: KV = block-scaled xq·Wᵀ on BF16 tensor cores (fp8 codes are exact in bf16),
//    64x64 tiles, one bk group at a time: the group's partial sums are scaled by sa·w_s and added in
//    f32, then rounded to bf16. Heads are processed in chunks that bound the KV buffer. On sm_90a
//    builds on an sm_90 GPU, MLAKIT_CUDA_WGMMA=on runs it on warpgroup products instead: for bk 64
//    or 128 the pipelined GEMM (kv_gemm_pipe_kernel, gemm_pipeline.cuh), else the two-stage
//    kv_gemm_wgmma_kernel (off in "auto": the call at H 128, seq 4096 took 17.4 ms on the latter
//    against 16.0 on mma.sync on an H200; the former is not measured yet).
// 4. attention_kernel (one block per 64 query rows, head and 128 columns of v): S = Q·Kᵀ on BF16
//    tensor cores (K = [K_nope ; rope part], both bf16), online softmax in f32 registers per query
//    row over its visible keys only, O += P·V on BF16 tensor cores with P split into three bf16
//    parts: the op 3 bound allows no bf16 rounding of P, and after three parts what is left of p is
//    below 2^-24·p. Tiles past a block's last visible key are never loaded (causal skipping).
//    Under a deepseek numerics profile the key tiles are walked twice: the first pass finds each
//    row's maximum and sum, the second forms p = bf16(exp(s - m) / l) and multiplies P·V with that
//    single bf16 part. With topk_indices, mask_kernel first sets one bit per (query, window row)
//    the query's row names, and a key counts only where its bit is set. With
//    MLAKIT_CUDA_MLA_PREFETCH=on (16-byte loads) the tiles arrive by cp.async, the next tile's K
//    asked for once every warp's scores have read this one and its V once every warp's P·V has,
//    so each is in flight over other work (FlashAttention-2's order); the same bits. With
//    MLAKIT_CUDA_WGMMA=on (the same loads) attention_wgmma_kernel takes the tiles the same way and
//    runs S and P·V on warpgroup products, P's bf16 parts as the register A operand (FlashAttention-
//    3's reuse of the score accumulators); the same bits.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "cuda/async_copy.cuh"
#include "cuda/common.cuh"
#include "cuda/gemm_pipeline.cuh"
#include "cuda/gemm_tile.cuh"
#include "cuda/mla_prefill_fp8.hpp"
#include "cuda/mma.cuh"
#include "cuda/wgmma_route.hpp"
#include "core/shared/mla_prefill_fp8_quant.hpp"

namespace mlakit::cuda {
namespace {

constexpr const char* kOp = "mla_prefill_fp8";
constexpr int kNormThreads = 256;
constexpr int kQuantThreads = 128;
constexpr int kGemmThreads = 128, kBM = 64, kBN = 64, kBK = 32, kLdT = kBK + 8;
static_assert(kBM == kTileRows && kBN == kTileRows && kBK == kTileK && kLdT == kTileLd, "gemm_tile.cuh's tile");
constexpr int kAttnThreads = 128, kQRows = 64, kKeys = 64, kVCols = 128, kVTiles = kVCols / 8, kLdV = kVCols + 8;
constexpr std::int64_t kKvBudgetBytes = std::int64_t{256} << 20;

__device__ __forceinline__ float block_sum(float v, float* scratch /* [32] */) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += scratch[w];  // the same order in every thread
  __syncthreads();
  return total;
}

// max of non-negative, non-NaN partial maxima (the amax rule of the quantizer).
__device__ __forceinline__ float block_amax(float v, float* scratch /* [32] */) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = o > v ? o : v;
  }
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = 0.0f;
  for (int w = 0; w < warps; ++w) m = scratch[w] > m ? scratch[w] : m;
  __syncthreads();
  return m;
}

// ---- 1. RoPE + RMSNorm in place ------------------------------------------------------------------
struct NormParams {
  std::uint16_t* q;
  const std::uint32_t* iro;
  int B;
  const void* freqs;
  bool freqs_f32;
  const void* gamma;  // bf16, or f32 when gamma_f32
  bool gamma_f32, deepseek;
  DevPagedCache cache;
  int layer, H, nope, rope, latent;
  float eps;
};

__device__ __forceinline__ float freq(const NormParams& p, std::int64_t pos, int col) {
  const std::int64_t i = pos * p.rope + col;
  return p.freqs_f32 ? static_cast<const float*>(p.freqs)[i] : bf16_to_f32(static_cast<const std::uint16_t*>(p.freqs)[i]);
}

__device__ __forceinline__ void rotate_pair(const NormParams& p, std::uint16_t* x, std::int64_t pos, int pair) {
  const float cs = freq(p, pos, 2 * pair), sn = freq(p, pos, 2 * pair + 1);
  const float x0 = bf16_to_f32(x[2 * pair]), x1 = bf16_to_f32(x[2 * pair + 1]);
  x[2 * pair] = f32_to_bf16(x0 * cs - x1 * sn);
  x[2 * pair + 1] = f32_to_bf16(x0 * sn + x1 * cs);
}

__global__ void __launch_bounds__(kNormThreads) rope_norm_kernel(NormParams p) {
  __shared__ float scratch[32];
  const std::int64_t t = blockIdx.x;
  const int b = find_sequence(p.iro, p.B, t);
  const std::int64_t pos = static_cast<std::int64_t>(p.cache.cache_lengths[b]) + (t - p.iro[b]);
  const int pairs = p.rope / 2, qk = p.nope + p.rope;
  for (int e = threadIdx.x; e < p.H * pairs; e += kNormThreads) {
    const int h = e / pairs, pr = e % pairs;
    rotate_pair(p, p.q + (t * p.H + h) * qk + p.nope, pos, pr);
  }
  auto* row = static_cast<std::uint16_t*>(p.cache.blocks_rw) +
              p.cache.row_offset(p.cache.block_of(b, pos), 0, p.layer, pos % p.cache.page_size, 0);
  for (int pr = threadIdx.x; pr < pairs; pr += kNormThreads) rotate_pair(p, row + p.latent, pos, pr);
  float part = 0.0f;
  for (int k = threadIdx.x; k < p.latent; k += kNormThreads) {
    const float x = bf16_to_f32(row[k]);
    part = fmaf(x, x, part);
  }
  const float sum_sq = block_sum(part, scratch);  // every read of the row precedes this barrier
  const float r = 1.0f / sqrtf(sum_sq / static_cast<float>(p.latent) + p.eps);
  for (int k = threadIdx.x; k < p.latent; k += kNormThreads) {
    if (p.deepseek) {  // DeepSeek's RMSNorm: gamma · (x · r), rounded once
      const float g = p.gamma_f32 ? static_cast<const float*>(p.gamma)[k]
                                  : bf16_to_f32(static_cast<const std::uint16_t*>(p.gamma)[k]);
      row[k] = f32_to_bf16(g * (bf16_to_f32(row[k]) * r));
      continue;
    }
    const float y = round_to_bf16(bf16_to_f32(row[k]) * r);
    // a product of two bf16 values: exact in f32
    row[k] = f32_to_bf16(y * bf16_to_f32(static_cast<const std::uint16_t*>(p.gamma)[k]));
  }
}

// ---- 2. gather + FP8 quantization ---------------------------------------------------------------
struct GatherParams {
  const std::uint32_t *iro, *bro, *coff;
  int B;
  DevPagedCache cache;
  int layer, latent, rope, bk, groups;
  MlaNumerics numerics;
  std::uint8_t* xq;      // [BL, latent]
  float* sa;             // [BL, groups]
  std::uint16_t* kr;     // [BL, rope]
  std::uint8_t* needed;  // [BL]
};

// Buffer rows of sequence b that some query of the call can see: min(window, last_pos - offset + 1).
__device__ __forceinline__ std::int64_t rows_needed(const std::uint32_t* iro, const std::uint32_t* bro,
                                                    const std::uint32_t* coff, const std::uint32_t* lens, int b) {
  const std::int64_t seq = static_cast<std::int64_t>(iro[b + 1]) - iro[b];
  const std::int64_t window = static_cast<std::int64_t>(bro[b + 1]) - bro[b];
  const std::int64_t offset = coff[b];
  const std::int64_t last_pos = static_cast<std::int64_t>(lens[b]) + seq - 1;
  if (seq == 0 || last_pos < offset) return 0;
  return min(window, last_pos - offset + 1);
}

__global__ void __launch_bounds__(kQuantThreads) gather_quant_kernel(GatherParams p) {
  namespace quant = mla_prefill_fp8_quant;
  __shared__ float scratch[32];
  const std::int64_t r = blockIdx.x;
  const int b = find_sequence(p.bro, p.B, r);
  const std::int64_t j = r - p.bro[b];
  std::uint8_t* codes = p.xq + r * p.latent;
  if (j >= rows_needed(p.iro, p.bro, p.coff, p.cache.cache_lengths, b)) {
    for (int k = threadIdx.x; k < p.latent; k += kQuantThreads) codes[k] = 0;
    for (int g = threadIdx.x; g < p.groups; g += kQuantThreads) p.sa[r * p.groups + g] = 0.0f;
    for (int k = threadIdx.x; k < p.rope; k += kQuantThreads) p.kr[r * p.rope + k] = 0;
    if (threadIdx.x == 0) p.needed[r] = 0;
    return;
  }
  const std::int64_t pos = static_cast<std::int64_t>(p.coff[b]) + j;
  const auto* row = static_cast<const std::uint16_t*>(p.cache.blocks) +
                    p.cache.row_offset(p.cache.block_of(b, pos), 0, p.layer, pos % p.cache.page_size, 0);
  for (int g = 0; g < p.groups; ++g) {
    const int k0 = g * p.bk, k1 = min(k0 + p.bk, p.latent);
    float amax = 0.0f;  // group_amax's rule: |x| by sign test, NaN never compares greater
    for (int k = k0 + threadIdx.x; k < k1; k += kQuantThreads) {
      const float x = bf16_to_f32(row[k]);
      const float a = x < 0.0f ? -x : x;
      if (a > amax) amax = a;
    }
    amax = block_amax(amax, scratch);
    if (p.numerics == MlaNumerics::deepseek) {  // codes from x / sa
      const float sa = quant::deepseek_scale(amax, false);
      for (int k = k0 + threadIdx.x; k < k1; k += kQuantThreads)
        codes[k] = quant::quantize_value_div(bf16_to_f32(row[k]), sa);
      if (threadIdx.x == 0) p.sa[r * p.groups + g] = sa;
      continue;
    }
    const float sa = p.numerics == MlaNumerics::max ? quant::group_scale(amax) : quant::deepseek_scale(amax, true);
    // ue8m0: sa is a power of two, so x · (1/sa) is x / sa
    const float inv = p.numerics == MlaNumerics::max ? quant::group_inverse(sa) : 1.0f / sa;
    for (int k = k0 + threadIdx.x; k < k1; k += kQuantThreads) codes[k] = quant::quantize_value(bf16_to_f32(row[k]), inv);
    if (threadIdx.x == 0) p.sa[r * p.groups + g] = sa;
  }
  for (int k = threadIdx.x; k < p.rope; k += kQuantThreads) p.kr[r * p.rope + k] = row[p.latent + k];
  if (threadIdx.x == 0) p.needed[r] = 1;
}

// ---- 3. block-scaled GEMM -----------------------------------------------------------------------
struct GemmParams {
  const std::uint8_t* xq;
  const float* sa;
  const std::uint8_t* needed;
  const std::uint8_t* w;   // [H·(nope+v), latent]
  const float* wscale;     // [ceil(H·(nope+v)/bn), groups]
  std::int64_t BL, latent, bk, bn, groups;
  std::int64_t n_first, Nc;  // weight rows [n_first, n_first + Nc) of this head chunk
  std::uint16_t* kv;         // [BL, Nc]
};

// kVector: 16-byte loads of both operands, fetched one k tile ahead (latent and bk multiples of 16).
template <bool kVector>
__global__ void __launch_bounds__(kGemmThreads) kv_gemm_kernel(GemmParams p) {
  __shared__ __align__(16) std::uint16_t xs[kBM * kLdT];
  __shared__ __align__(16) std::uint16_t ws[kBN * kLdT];
  __shared__ std::uint16_t table[256];
  const int tid = threadIdx.x, warp = tid >> 5;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kBN, m0 = static_cast<std::int64_t>(blockIdx.y) * kBM;
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
  const int lane = tid & 31, g = lane >> 2, c = lane & 3;
  build_fp8_table(table);
  float total[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) total[i][j][e] = 0.0f;

  const std::uint8_t* w = p.w + p.n_first * p.latent;  // this head chunk's rows
  VectorTile<1, kGemmThreads> xt, wt;
  if constexpr (kVector) {
    const std::int64_t end = min(p.bk, p.latent);
    xt.fetch(p.xq, p.latent, m0, p.BL, 0, end);
    wt.fetch(w, p.latent, n0, p.Nc, 0, end);
  }
  for (std::int64_t grp = 0; grp < p.groups; ++grp) {
    const std::int64_t gk0 = grp * p.bk, gk1 = min(gk0 + p.bk, p.latent);
    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    for (std::int64_t k0 = gk0; k0 < gk1; k0 += kBK) {
      __syncthreads();  // the table is built / the previous tile is consumed
      if constexpr (kVector) {
        xt.commit(xs, table);
        wt.commit(ws, table);
        // The next tile: the rest of this group, else the next group's first (k tiles never span two
        // groups: their sums are scaled per group).
        const bool same = k0 + kBK < gk1;
        const std::int64_t nk = same ? k0 + kBK : gk1, nend = same ? gk1 : min(gk1 + p.bk, p.latent);
        if (nk < nend) {
          xt.fetch(p.xq, p.latent, m0, p.BL, nk, nend);
          wt.fetch(w, p.latent, n0, p.Nc, nk, nend);
        }
      } else {
        for (int e = tid; e < kBM * kBK; e += kGemmThreads) {
          const int r = e / kBK, kk = e % kBK;
          const std::int64_t m = m0 + r, k = k0 + kk;
          xs[r * kLdT + kk] = (m < p.BL && k < gk1) ? table[p.xq[m * p.latent + k]] : std::uint16_t{0};
        }
        for (int e = tid; e < kBN * kBK; e += kGemmThreads) {
          const int nn = e / kBK, kk = e % kBK;
          const std::int64_t n = n0 + nn, k = k0 + kk;
          ws[nn * kLdT + kk] = (n < p.Nc && k < gk1) ? table[w[n * p.latent + k]] : std::uint16_t{0};
        }
      }
      __syncthreads();
      mma_tile_64x64(acc, xs, ws, wm, wn);
    }
    // total += sa[m, g]·w_s[n / bn, g] · (this group's sum).
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const std::int64_t m = m0 + wm + 16 * i + g + (e >= 2 ? 8 : 0);
          const std::int64_t n = n0 + wn + 8 * j + 2 * c + (e & 1);
          if (m < p.BL && n < p.Nc) {
            const float s = p.sa[m * p.groups + grp] * p.wscale[((p.n_first + n) / p.bn) * p.groups + grp];
            total[i][j][e] = fmaf(s, acc[i][j][e], total[i][j][e]);
          }
        }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const std::int64_t m = m0 + wm + 16 * i + g + (e >= 2 ? 8 : 0);
        const std::int64_t n = n0 + wn + 8 * j + 2 * c + (e & 1);
        if (m < p.BL && n < p.Nc) p.kv[m * p.Nc + n] = p.needed[m] ? f32_to_bf16(total[i][j][e]) : std::uint16_t{0};
      }
}

// The same product on warpgroup products (wgmma_route, sm_90a on an sm_90 GPU; the vector kernel's
// conditions): block tile 64 rows x 128 columns, one warpgroup, k tiles of 32 in two shared stages
// (the next tile, of this group or the next, loaded while this one is multiplied), each group's sums
// scaled and added as above.
__global__ void __launch_bounds__(kCoreTileThreads) kv_gemm_wgmma_kernel(GemmParams p) {
  __shared__ __align__(128) std::uint16_t xs[2][kBM * kBK];
  __shared__ __align__(128) std::uint16_t ws[2][kCoreTileCols * kBK];
  __shared__ std::uint16_t table[256];
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kCoreTileCols;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * kBM;
  build_fp8_table(table);
  float acc[64], total[64];
#pragma unroll
  for (int e = 0; e < 64; ++e) total[e] = 0.0f;

  const std::uint8_t* w = p.w + p.n_first * p.latent;  // this head chunk's rows
  CoreTile<kBM, 1> xt;
  CoreTile<kCoreTileCols, 1> wt;
  const auto fetch = [&](std::int64_t k0, std::int64_t end) {
    xt.fetch(p.xq, p.latent, m0, p.BL, k0, end);
    wt.fetch(w, p.latent, n0, p.Nc, k0, end);
  };
  fetch(0, min(p.bk, p.latent));
  __syncthreads();  // the table is built
  xt.commit(xs[0], table);
  wt.commit(ws[0], table);
  int stage = 0;
  for (std::int64_t grp = 0; grp < p.groups; ++grp) {
    const std::int64_t gk0 = grp * p.bk, gk1 = min(gk0 + p.bk, p.latent);
#pragma unroll
    for (int e = 0; e < 64; ++e) acc[e] = 0.0f;
    for (std::int64_t k0 = gk0; k0 < gk1; k0 += kBK, stage ^= 1) {
      fence_proxy_async();  // this stage's stores, before the products read it
      __syncthreads();      // written by every thread; the other stage's products complete everywhere
      // The next tile: the rest of this group, else the next group's first (k tiles never span two
      // groups: their sums are scaled per group).
      const bool same = k0 + kBK < gk1;
      const std::int64_t nk = same ? k0 + kBK : gk1, nend = same ? gk1 : min(gk1 + p.bk, p.latent);
      const bool more = nk < nend;
      if (more) fetch(nk, nend);
      core_tile_step(acc, xs[stage], ws[stage], xt, wt, xs[stage ^ 1], ws[stage ^ 1], more, table);
    }
    // total += sa[m, g]·w_s[n / bn, g] · (this group's sum).
#pragma unroll
    for (int e = 0; e < 64; ++e) {
      const std::int64_t m = m0 + core_acc_row(e), n = n0 + core_acc_col(e);
      if (m < p.BL && n < p.Nc) {
        const float s = p.sa[m * p.groups + grp] * p.wscale[((p.n_first + n) / p.bn) * p.groups + grp];
        total[e] = fmaf(s, acc[e], total[e]);
      }
    }
  }
#pragma unroll
  for (int e = 0; e < 64; ++e) {
    const std::int64_t m = m0 + core_acc_row(e), n = n0 + core_acc_col(e);
    if (m < p.BL && n < p.Nc) p.kv[m * p.Nc + n] = p.needed[m] ? f32_to_bf16(total[e]) : std::uint16_t{0};
  }
}

// The same product on the pipelined warpgroup GEMM (gemm_pipeline.cuh; the wgmma route with bk 64
// or 128, kGroupTiles = bk / 64): both operands' codes decoded in shared memory, each group's sums
// scaled by sa·w_s at its end as above.
using KvPipeLayout = pipe::Layout<pipe::Operand::fp8, pipe::Operand::fp8>;
template <int kGroupTiles>
__global__ void __launch_bounds__(pipe::kThreads, 1) kv_gemm_pipe_kernel(GemmParams p) {
  MLAKIT_DYNAMIC_SHARED(smem);
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * pipe::kBN;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * pipe::kBM;
  const pipe::Source a{p.xq, p.latent, m0, p.BL}, b{p.w + p.n_first * p.latent, p.latent, n0, p.Nc};
  // A thread's accumulators lie in two rows (acc_row(e) for e % 4 < 2 and 8 below it); their sa
  // from two row pointers, w_s by column (32-bit: columns are within one head chunk).
  const std::int64_t m_lo = m0 + pipe::acc_row(0);
  const float* sa_lo = m_lo < p.BL ? p.sa + m_lo * p.groups : nullptr;
  const float* sa_hi = m_lo + 8 < p.BL ? p.sa + (m_lo + 8) * p.groups : nullptr;
  const int nc = static_cast<int>(p.Nc), n_first = static_cast<int>(p.n_first), bn = static_cast<int>(p.bn);
  const int n_lo = static_cast<int>(n0) + pipe::acc_col(0);
  float total[64];
  pipe::mainloop<pipe::Operand::fp8, pipe::Operand::fp8, kGroupTiles>(
      total, smem, a, b, p.latent, [&](int e, std::int64_t grp) {
        const float* sa = e % 4 < 2 ? sa_lo : sa_hi;
        const int n = n_lo + 8 * (e / 4) + (e & 1);
        return sa != nullptr && n < nc ? sa[grp] * p.wscale[((n_first + n) / bn) * p.groups + grp] : 0.0f;
      });
#pragma unroll
  for (int e = 0; e < 64; ++e) {
    const std::int64_t m = m0 + pipe::acc_row(e), n = n0 + pipe::acc_col(e);
    if (m < p.BL && n < p.Nc) p.kv[m * p.Nc + n] = p.needed[m] ? f32_to_bf16(total[e]) : std::uint16_t{0};
  }
}

// ---- 4. causal attention ------------------------------------------------------------------------
struct AttnParams {
  const std::uint16_t* q;  // rotated, [T, H, nope + rope]
  const std::uint32_t *iro, *bro, *coff, *lens;
  int B;
  const std::uint16_t* kv;  // [BL, Nc] of this head chunk
  const std::uint16_t* kr;  // [BL, rope]
  std::uint16_t* out;       // [T, H, v]
  std::int64_t T, Nc;
  int H, h_first, nope, rope, v, qk, qkp;
  float scale;
  bool vector_loads;  // 16-byte loads: every row and column boundary is a multiple of 8 elements
  bool prefetch;      // with vector_loads: K and V tiles by cp.async, each in flight over other work
  bool round_p;       // deepseek profiles: two passes, P = bf16(normalized weights)
  const std::uint32_t* keep;  // topk_indices: bit j of row t's words = window row j is named; null: none
  std::int64_t keep_words;    // words per query row
};

// ---- topk_indices as a bitmap -------------------------------------------------------------------
struct MaskParams {
  const std::int32_t* topk;  // [T, top_k]
  std::int64_t top_k, words;
  const std::uint32_t *iro, *bro, *coff, *lens;
  int B;
  std::uint32_t* keep;  // [T, words]
};

// One block per query row: its words cleared, then a bit set for every named position inside
// its sequence's window (positions outside it, -1 and other negatives select nothing).
__global__ void __launch_bounds__(kQuantThreads) mask_kernel(MaskParams p) {
  const std::int64_t t = blockIdx.x;
  std::uint32_t* w = p.keep + t * p.words;
  for (std::int64_t i = threadIdx.x; i < p.words; i += kQuantThreads) w[i] = 0;
  __syncthreads();
  const int b = find_sequence(p.iro, p.B, t);
  const std::int64_t rows = rows_needed(p.iro, p.bro, p.coff, p.lens, b), offset = p.coff[b];
  for (std::int64_t e = threadIdx.x; e < p.top_k; e += kQuantThreads) {
    const std::int64_t pos = p.topk[t * p.top_k + e], j = pos - offset;
    if (pos >= 0 && j >= 0 && j < rows) atomicOr(w + j / 32, 1u << (j % 32));
  }
}

// Q, K and V in shared memory: rows padded by 16 bytes (ldmatrix's 8 rows in 8 bank groups), or
// for the warpgroup products (wg) unpadded core matrices: each group of eight rows stored 8
// columns at a time, 128 contiguous bytes per 8 x 8 (wgmma.cuh's layout with lbo 128 bytes along
// the columns and sbo 16·width bytes between row groups).
struct AttnLayout {
  std::size_t row_b, row_vis, qs, ks, vs, bytes;
  __host__ __device__ AttnLayout(int qkp, bool wg) {
    const std::size_t ld = static_cast<std::size_t>(qkp + (wg ? 0 : 8)), ldv = wg ? kVCols : kLdV;
    row_b = 0;
    row_vis = row_b + kQRows * sizeof(int);
    qs = row_vis + kQRows * sizeof(std::int64_t);
    ks = qs + kQRows * ld * sizeof(std::uint16_t);
    vs = ks + kKeys * ld * sizeof(std::uint16_t);
    bytes = vs + static_cast<std::size_t>(kKeys) * ldv * sizeof(std::uint16_t);
  }
};

// Splits four f32 values (two rows x two adjacent keys of the P tile) into bf16 parts: after three
// parts, p - hi - mid - lo is below 2^-24·p, inside the f32 bound of the P·V sum.
__device__ __forceinline__ void split_bf16(float x0, float x1, std::uint32_t& hi, std::uint32_t& mid, std::uint32_t& lo) {
  const std::uint16_t h0 = f32_to_bf16(x0), h1 = f32_to_bf16(x1);
  const float r0 = x0 - bf16_to_f32(h0), r1 = x1 - bf16_to_f32(h1);  // exact
  const std::uint16_t m0 = f32_to_bf16(r0), m1 = f32_to_bf16(r1);
  hi = pack_bf16x2(h0, h1);
  mid = pack_bf16x2(m0, m1);
  lo = pack_bf16x2(f32_to_bf16(r0 - bf16_to_f32(m0)), f32_to_bf16(r1 - bf16_to_f32(m1)));
}

// O += P·V over the kc-th 16 keys of the tile, P as kParts bf16 fragments added in the order given;
// V key by key in vs (its fragments by ldmatrix .trans).
template <int kParts>
__device__ __forceinline__ void pv_mma(float (&o)[kVTiles][4], const std::uint32_t (&parts)[kParts][4],
                                       const std::uint16_t* vs, int kc, int vcols) {
#pragma unroll
  for (int i = 0; i < kVTiles; i += 2) {  // two 8-column tiles per ldmatrix
    if (i * 8 >= vcols) break;
    std::uint32_t b[4];
    ldmatrix_x4_trans(b, ldmatrix_b_kmajor_row(vs, kLdV, kc * 16, i * 8));
    const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
    for (int q = 0; q < kParts; ++q) mma_bf16_16816(o[i], parts[q], b0);
    if ((i + 1) * 8 >= vcols) break;
#pragma unroll
    for (int q = 0; q < kParts; ++q) mma_bf16_16816(o[i + 1], parts[q], b1);
  }
}

// O += P·V over a tile's 64 keys, P as kParts bf16 fragments per 16 keys (split(kc, parts) forms
// those of the kc-th, to be added in the order given): on mma.sync (pv_mma) 16 keys at a time, or
// with kWg as register-A warpgroup products (all of the tile's P in registers), V MN-major in
// AttnLayout's core matrices (8 keys x 8 columns each: sbo 128 bytes along the columns, lbo 2048
// along the keys), complete on return.
template <bool kWg, int kParts, class Split>
__device__ __forceinline__ void pv_tile(float (&o)[kVTiles][4], const Split& split, const std::uint16_t* vs, int vcols) {
  if constexpr (kWg) {
    std::uint32_t parts[kKeys / 16][kParts][4];
#pragma unroll
    for (int kc = 0; kc < kKeys / 16; ++kc) split(kc, parts[kc]);
    auto& of = *reinterpret_cast<float(*)[kVTiles * 4]>(&o);
    auto& pf = *reinterpret_cast<std::uint32_t(*)[kKeys / 16 * kParts * 4]>(&parts);
    wgmma_fence(of, pf);
#pragma unroll
    for (int kc = 0; kc < kKeys / 16; ++kc)
#pragma unroll
      for (int q = 0; q < kParts; ++q) wgmma_m64n128k16_rs_mn(of, parts[kc][q], vs + kc * 16 * kVCols, 2048, 128, true);
    wgmma_commit();
    wgmma_wait<0>(of, pf);
  } else {
#pragma unroll
    for (int kc = 0; kc < kKeys / 16; ++kc) {
      std::uint32_t parts[kParts][4];
      split(kc, parts);
      pv_mma(o, parts, vs, kc, vcols);
    }
  }
}

// One block per 64 query rows, head and 128 columns of v; warp w owns query rows [16w, 16w+16).
// Scores, the online softmax and the output accumulators stay in registers (the C fragment of
// Q·Kᵀ is the A fragment of P·V); K and V tiles of 64 keys go through shared memory key by key,
// 16 bytes a store, V's fragments read by ldmatrix .trans.
// kWg (with kPrefetch): the products on the warpgroup (sm_90a): S as qkp / 16 m64n64k16 products
// with Q and K read from shared memory as core matrices, P·V as m64n128k16 products with P's bf16
// parts in registers (the accumulator fragment of S is their A fragment) and V read MN-major; the
// same registers, the same sums in the same order as on mma.sync, so the same bits. kQkSteps: qkp
// / 16 fixed at compile time (S's products unrolled), or 0 (a loop over qkp, which ptxas
// serializes, C7520).
template <bool kPrefetch, bool kWg = false, int kQkSteps = 0>
__device__ __forceinline__ void attention_body(const AttnParams& p) {
  static_assert(kPrefetch || !kWg, "the warpgroup products take their tiles by cp.async");
  MLAKIT_DYNAMIC_SHARED(smem);
  const AttnLayout L(p.qkp, kWg);
  auto* row_b = reinterpret_cast<int*>(smem + L.row_b);
  auto* row_vis = reinterpret_cast<std::int64_t*>(smem + L.row_vis);
  auto* qs = reinterpret_cast<std::uint16_t*>(smem + L.qs);
  auto* ks = reinterpret_cast<std::uint16_t*>(smem + L.ks);
  auto* vs = reinterpret_cast<std::uint16_t*>(smem + L.vs);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  const int ld = p.qkp + (kWg ? 0 : 8), qk = p.qk, qkp = p.qkp, nope = p.nope, vdim = p.v;
  // Element (row r, column d) of Q or K (qkp columns) and of V (kVCols columns) in the layout.
  const auto qk_at = [&](std::uint16_t* base, int r, int d) {
    return kWg ? base + (r / 8) * 8 * qkp + (d / 8) * 64 + (r % 8) * 8 + d % 8 : base + r * ld + d;
  };
  const auto v_at = [&](int r, int d) {
    return kWg ? vs + (r / 8) * 8 * kVCols + (d / 8) * 64 + (r % 8) * 8 + d % 8 : vs + r * kLdV + d;
  };
  const int vc0 = blockIdx.z * kVCols, vcols = min(kVCols, vdim - vc0);
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * kQRows;
  const int hl = blockIdx.y, h = p.h_first + hl;
  const std::int64_t kv_col = static_cast<std::int64_t>(hl) * (nope + vdim);

  if (tid < kQRows) {
    const std::int64_t t = t0 + tid;
    if (t < p.T) {
      const int b = find_sequence(p.iro, p.B, t);
      const std::int64_t pos = static_cast<std::int64_t>(p.lens[b]) + (t - p.iro[b]);
      const std::int64_t offset = p.coff[b];
      const std::int64_t rows = rows_needed(p.iro, p.bro, p.coff, p.lens, b);
      row_b[tid] = b;
      row_vis[tid] = pos < offset ? 0 : min(rows, pos - offset + 1);
    } else {
      row_b[tid] = -1;
      row_vis[tid] = 0;
    }
  }
  if (p.vector_loads) {
    const int vecs = qkp / 8;
    for (int e = tid; e < kQRows * vecs; e += kAttnThreads) {
      const int r = e / vecs, d = (e % vecs) * 8;
      const std::int64_t t = t0 + r;
      uint4 x = make_uint4(0, 0, 0, 0);
      if (t < p.T && d < qk) x = *reinterpret_cast<const uint4*>(p.q + (t * p.H + h) * qk + d);
      *reinterpret_cast<uint4*>(qk_at(qs, r, d)) = x;
    }
  } else {
    for (int e = tid; e < kQRows * qkp; e += kAttnThreads) {
      const int r = e / qkp, d = e % qkp;
      const std::int64_t t = t0 + r;
      *qk_at(qs, r, d) = (t < p.T && d < qk) ? p.q[(t * p.H + h) * qk + d] : std::uint16_t{0};
    }
  }
  if constexpr (kWg) fence_proxy_async();  // Q, before the products read it
  __syncthreads();

  const int rows[2] = {warp * 16 + g, warp * 16 + g + 8};  // the two query rows of this thread
  float m_run[2] = {-INFINITY, -INFINITY}, l_part[2] = {0.0f, 0.0f};  // l: this thread's keys only
  bool kept_any[2] = {false, false};                                  // a key passed the mask (this thread's)
  float o[kVTiles][4];
#pragma unroll
  for (int i = 0; i < kVTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

  for (int seg = 0; seg < kQRows && row_b[seg] >= 0;) {
    const int b = row_b[seg];
    int seg_end = seg + 1;
    while (seg_end < kQRows && row_b[seg_end] == b) ++seg_end;
    std::int64_t n_keys = 0;
    for (int r = seg; r < seg_end; ++r) n_keys = max(n_keys, row_vis[r]);
    const std::int64_t first_row = p.bro[b];
    std::int64_t vis[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) vis[hr] = rows[hr] >= seg && rows[hr] < seg_end ? row_vis[rows[hr]] : 0;
    const std::uint32_t* keep_row[2] = {nullptr, nullptr};
    if (p.keep)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
        if (t0 + rows[hr] < p.T) keep_row[hr] = p.keep + (t0 + rows[hr]) * p.keep_words;

    // deepseek: pass 0 finds each row's maximum and sum, pass 1 accumulates bf16(p)·V.
    float l_total[2] = {1.0f, 1.0f};
    for (int pass = p.round_p ? 0 : 1; pass < 2; ++pass) {
      const bool load_v = pass == 1;
      if (p.round_p && pass == 1)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          float l = l_part[hr];
          l += __shfl_xor_sync(0xffffffffu, l, 1);
          l += __shfl_xor_sync(0xffffffffu, l, 2);
          l_total[hr] = l;
        }
      // prefetch: K and V of keys kt .. kt+63 by cp.async, zero past n_keys. K of the next tile is
      // asked for once every warp's S has read this one (it lands over the softmax and P·V), V
      // once every warp's P·V has (over the next tile's S and softmax); two groups a tile, so
      // that wait<1> leaves the newer in flight.
      // (32-bit offsets from the tile's first row: the loops run beside the live scores.)
      const int nc = static_cast<int>(p.Nc);
      const auto issue_k = [&](std::int64_t kt) {
        const int vecs = qkp / 8, keys = n_keys - kt < kKeys ? static_cast<int>(n_keys - kt) : kKeys;
        const std::uint16_t* kv_rows = p.kv + (first_row + kt) * p.Nc + kv_col;
        const std::uint16_t* kr_rows = p.kr + (first_row + kt) * p.rope;
#pragma unroll 1
        for (int e = tid; e < kKeys * vecs; e += kAttnThreads) {
          const int kk = e / vecs, d = (e % vecs) * 8;
          const bool ok = kk < keys && d < qk;
          const std::uint16_t* src = !ok ? p.kv : d < nope ? kv_rows + kk * nc + d : kr_rows + kk * p.rope + (d - nope);
          cp_async_16(qk_at(ks, kk, d), src, ok);
        }
        cp_async_commit();
      };
      const auto issue_v = [&](std::int64_t kt, bool any) {
        const int keys = n_keys - kt < kKeys ? static_cast<int>(n_keys - kt) : kKeys;
        const std::uint16_t* v_rows = p.kv + (first_row + kt) * p.Nc + kv_col + nope + vc0;
#pragma unroll 1
        for (int e = tid; any && e < kKeys * (kVCols / 8); e += kAttnThreads) {
          const int kk = e / (kVCols / 8), d = (e % (kVCols / 8)) * 8;
          const bool ok = kk < keys && d < vcols;
          cp_async_16(v_at(kk, d), ok ? v_rows + kk * nc + d : p.kv, ok);
        }
        cp_async_commit();  // possibly empty: the group count stays two a tile
      };
      // A tile's end: every warp is done with ks and vs (the next tile overwrites them); with
      // prefetch the next tile's V is asked for.
      const auto end_tile = [&](std::int64_t kt, bool next) {
        __syncthreads();
        if constexpr (kPrefetch) issue_v(kt + kKeys, next && load_v);
      };
      if constexpr (kPrefetch) {
        issue_k(0);
        issue_v(0, load_v);
      }
      for (std::int64_t kt = 0; kt < n_keys; kt += kKeys) {
        const bool next = kt + kKeys < n_keys;
        // K = [K_nope ; rope part] and V of keys kt .. kt+63, key by key (zero past n_keys).
        if constexpr (kPrefetch) {
          cp_async_wait<1>();  // this tile's K (its V may still be in flight)
        } else if (p.vector_loads) {
          const int vecs = qkp / 8;
          for (int e = tid; e < kKeys * vecs; e += kAttnThreads) {
            const int kk = e / vecs, d = (e % vecs) * 8;
            const std::int64_t j = kt + kk, br = first_row + j;
            uint4 x = make_uint4(0, 0, 0, 0);
            if (j < n_keys && d < qk)
              x = d < nope ? *reinterpret_cast<const uint4*>(p.kv + br * p.Nc + kv_col + d)
                           : *reinterpret_cast<const uint4*>(p.kr + br * p.rope + (d - nope));
            *reinterpret_cast<uint4*>(ks + kk * ld + d) = x;
          }
          for (int e = tid; load_v && e < kKeys * (kVCols / 8); e += kAttnThreads) {
            const int kk = e / (kVCols / 8), d = (e % (kVCols / 8)) * 8;
            const std::int64_t j = kt + kk, br = first_row + j;
            uint4 x = make_uint4(0, 0, 0, 0);
            if (j < n_keys && d < vcols) x = *reinterpret_cast<const uint4*>(p.kv + br * p.Nc + kv_col + nope + vc0 + d);
            *reinterpret_cast<uint4*>(vs + kk * kLdV + d) = x;
          }
        } else {
          for (int e = tid; e < kKeys * qkp; e += kAttnThreads) {
            const int kk = e / qkp, d = e % qkp;
            const std::int64_t j = kt + kk, br = first_row + j;
            std::uint16_t x = 0;
            if (j < n_keys && d < qk) x = d < nope ? p.kv[br * p.Nc + kv_col + d] : p.kr[br * p.rope + (d - nope)];
            ks[kk * ld + d] = x;
          }
          for (int e = tid; load_v && e < kKeys * kVCols; e += kAttnThreads) {
            const int kk = e / kVCols, d = e % kVCols;
            const std::int64_t j = kt + kk, br = first_row + j;
            vs[kk * kLdV + d] = (j < n_keys && d < vcols) ? p.kv[br * p.Nc + kv_col + nope + vc0 + d] : std::uint16_t{0};
          }
        }
        if constexpr (kWg) fence_proxy_async();  // the copies, before the products read them
        __syncthreads();

        // S = scale · Q·Kᵀ for this warp's 16 rows x 64 keys; keys a row cannot see are -inf.
        float s[kKeys / 8][4];
        if constexpr (kWg) {  // the fragment is the same registers in the same order
          auto& sf = *reinterpret_cast<float(*)[kKeys / 2]>(&s);
          wgmma_fence(sf);
          wgmma_m64n64k16(sf, qs, ks, 128, 16 * qkp, false);
          if constexpr (kQkSteps > 0) {
#pragma unroll
            for (int k0 = 16; k0 < 16 * kQkSteps; k0 += 16)
              wgmma_m64n64k16(sf, qk_at(qs, 0, k0), qk_at(ks, 0, k0), 128, 16 * qkp, true);
          } else {
            for (int k0 = 16; k0 < qkp; k0 += 16) wgmma_m64n64k16(sf, qk_at(qs, 0, k0), qk_at(ks, 0, k0), 128, 16 * qkp, true);
          }
          wgmma_commit();
          wgmma_wait<0>(sf);
        } else {
#pragma unroll
        for (int j = 0; j < kKeys / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        for (int k0 = 0; k0 < qkp; k0 += 16) {
          std::uint32_t af[4];
          ldmatrix_x4(af, ldmatrix_a_row(qs, ld, warp * 16, k0));
#pragma unroll
          for (int j = 0; j < kKeys / 8; j += 2) {  // two 8-key tiles per ldmatrix
            std::uint32_t b[4];
            ldmatrix_x4(b, ldmatrix_b_nmajor_row(ks, ld, j * 8, k0));
            const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
            mma_bf16_16816(s[j], af, b0);
            mma_bf16_16816(s[j + 1], af, b1);
          }
        }
        }
        if constexpr (kPrefetch) {
          __syncthreads();  // every warp's S has read ks
          if (next) issue_k(kt + kKeys);
          else cp_async_commit();
        }
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int hr = e >> 1;
            const std::int64_t key = kt + j * 8 + 2 * c + (e & 1);
            bool seen = key < vis[hr];
            if (seen && keep_row[hr]) seen = (keep_row[hr][key / 32] >> (key % 32)) & 1u;
            kept_any[hr] = kept_any[hr] || seen;
            const float x = seen ? p.scale * s[j][e] : -INFINITY;
            s[j][e] = x;
            tile_max[hr] = fmaxf(tile_max[hr], x);
          }
        if (pass == 1 && p.round_p) {
          // The row's final maximum and sum: p = bf16(exp(s - m) / l), one bf16 part.
#pragma unroll
          for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int hr = e >> 1;
              s[j][e] = s[j][e] == -INFINITY ? 0.0f : expf(s[j][e] - m_run[hr]) / l_total[hr];
            }
          if constexpr (kPrefetch) {
            cp_async_wait<1>();  // this tile's V (the next tile's K may still be in flight)
            if constexpr (kWg) fence_proxy_async();
            __syncthreads();
          }
          pv_tile<kWg, 1>(o, [&](int kc, std::uint32_t (&pa)[1][4]) {
            pa[0][0] = pack_bf16x2(f32_to_bf16(s[2 * kc][0]), f32_to_bf16(s[2 * kc][1]));
            pa[0][1] = pack_bf16x2(f32_to_bf16(s[2 * kc][2]), f32_to_bf16(s[2 * kc][3]));
            pa[0][2] = pack_bf16x2(f32_to_bf16(s[2 * kc + 1][0]), f32_to_bf16(s[2 * kc + 1][1]));
            pa[0][3] = pack_bf16x2(f32_to_bf16(s[2 * kc + 1][2]), f32_to_bf16(s[2 * kc + 1][3]));
          }, vs, vcols);
          end_tile(kt, next);
          continue;
        }
        // Online softmax in f32; the four lanes of a quad hold one row's keys.
        float alpha[2];
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          float tm = tile_max[hr];
          tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
          tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
          const float m_new = fmaxf(m_run[hr], tm);
          alpha[hr] = m_new == -INFINITY ? 1.0f : expf(m_run[hr] - m_new);
          m_run[hr] = m_new;
          l_part[hr] *= alpha[hr];
        }
#pragma unroll
        for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int hr = e >> 1;
            const float pe = s[j][e] == -INFINITY ? 0.0f : expf(s[j][e] - m_run[hr]);
            s[j][e] = pe;
            l_part[hr] += pe;
          }
        if (pass == 0) {  // deepseek's first pass: the maximum and the sum only
          end_tile(kt, next);
          continue;
        }
#pragma unroll
        for (int i = 0; i < kVTiles; ++i) {
          o[i][0] *= alpha[0];
          o[i][1] *= alpha[0];
          o[i][2] *= alpha[1];
          o[i][3] *= alpha[1];
        }
        // O += P·V with P as three bf16 parts (smallest first).
        if constexpr (kPrefetch) {
          cp_async_wait<1>();  // this tile's V (the next tile's K may still be in flight)
          if constexpr (kWg) fence_proxy_async();
          __syncthreads();
        }
        pv_tile<kWg, 3>(o, [&](int kc, std::uint32_t (&parts)[3][4]) {  // lo, mid, hi: the smallest first
          split_bf16(s[2 * kc][0], s[2 * kc][1], parts[2][0], parts[1][0], parts[0][0]);
          split_bf16(s[2 * kc][2], s[2 * kc][3], parts[2][1], parts[1][1], parts[0][1]);
          split_bf16(s[2 * kc + 1][0], s[2 * kc + 1][1], parts[2][2], parts[1][2], parts[0][2]);
          split_bf16(s[2 * kc + 1][2], s[2 * kc + 1][3], parts[2][3], parts[1][3], parts[0][3]);
        }, vs, vcols);
        end_tile(kt, next);
      }
    }
    seg = seg_end;
  }

#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float l = l_part[hr];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    int any_kept = kept_any[hr] ? 1 : 0;
    any_kept |= __shfl_xor_sync(0xffffffffu, any_kept, 1);
    any_kept |= __shfl_xor_sync(0xffffffffu, any_kept, 2);
    const int r = rows[hr];
    const std::int64_t t = t0 + r;
    if (t >= p.T) continue;
    const bool any = row_vis[r] > 0 && any_kept != 0;
    // deepseek: the weights were normalized (every score -inf leaves NaN, as exp(-inf - -inf)).
    const float div = p.round_p ? (m_run[hr] == -INFINITY ? NAN : 1.0f) : l;
    std::uint16_t* out = p.out + (t * p.H + h) * vdim + vc0;
#pragma unroll
    for (int i = 0; i < kVTiles; ++i) {
      const int col = i * 8 + 2 * c;
      if (col < vcols) out[col] = any ? f32_to_bf16(o[i][2 * hr] / div) : std::uint16_t{0};
      if (col + 1 < vcols) out[col + 1] = any ? f32_to_bf16(o[i][2 * hr + 1] / div) : std::uint16_t{0};
    }
  }
}

// The loaded tiles' kernel as measured (ptxas gives it 166-168 registers: three blocks a
// multiprocessor); the prefetching one asks for two (at three its addresses spill beside the live
// scores: 208 registers).
__global__ void __launch_bounds__(kAttnThreads) attention_kernel(AttnParams p) { attention_body<false>(p); }
__global__ void __launch_bounds__(kAttnThreads, 2) attention_prefetch_kernel(AttnParams p) { attention_body<true>(p); }
template <int kQkSteps>
__global__ void __launch_bounds__(kAttnThreads, 2) attention_wgmma_kernel(AttnParams p) {
  attention_body<true, true, kQkSteps>(p);
}
// DeepSeek's qk (128 + 64) has its own kernel: S's products unrolled.
constexpr int kDeepSeekQkSteps = 192 / 16;

core::RouteSwitch& prefetch_route() {
  static core::RouteSwitch r("MLAKIT_CUDA_MLA_PREFETCH");
  return r;
}

std::atomic<long> g_prefetch_runs{0};

}  // namespace

namespace mla_prefetch {
core::RouteMode mode() { return prefetch_route().mode(); }
void set_mode(core::RouteMode m) { prefetch_route().set_mode(m); }
long runs() { return g_prefetch_runs.load(); }
}  // namespace mla_prefetch

Status mla_prefill_fp8(const MlaPrefillFp8Desc& d, const MlaPrefillFp8Args& a, const MlaPrefillFp8Args& host,
                       const core::DeviceLaunch& launch) {
  const cudaStream_t stream = as_stream(launch.stream);
  const std::int64_t T = a.q.shape[0];
  if (T == 0) return Status::success();
  const int B = static_cast<int>(a.input_row_offsets.shape[0] - 1);
  const std::int64_t BL = a.buffer_length;
  const int H = static_cast<int>(d.num_heads), nope = static_cast<int>(d.nope), rope = static_cast<int>(d.rope);
  const int vdim = static_cast<int>(d.v), latent = static_cast<int>(d.latent);
  const int qk = nope + rope, qkp = static_cast<int>(round_up(qk, 16));
  const std::int64_t groups = ceil_div(d.latent, d.bk);
  const auto* iro = static_cast<const std::uint32_t*>(a.input_row_offsets.data);
  const auto* bro = static_cast<const std::uint32_t*>(a.buffer_row_offsets.data);
  const auto* coff = static_cast<const std::uint32_t*>(a.cache_offsets.data);
  const DevPagedCache cache = DevPagedCache::from(a.kv_cache);

  Status s;
  const std::size_t smem_max = max_shared_memory(kOp, &s);
  MLAKIT_STATUS_TRY(s);
  const AttnLayout attn_layout(qkp, false), attn_wg_layout(qkp, true);
  MLAKIT_STATUS_TRY(shared_memory_fits(kOp, "v", "nope+rope=" + std::to_string(qk) + " with v=" + std::to_string(vdim),
                                       attn_layout.bytes, smem_max));

  // The temporaries, sized before anything runs: the quantized window, its scales, rope parts and
  // row flags; the topk_indices bitmap (one bit per query and window row); the K/V of a head chunk.
  std::int64_t keep_words = 0;
  if (a.topk_indices.data != nullptr) {
    std::int64_t max_window = 1;
    const auto* host_bro = static_cast<const std::uint32_t*>(host.buffer_row_offsets.data);
    for (int b = 0; b < B; ++b)
      max_window = std::max<std::int64_t>(max_window, static_cast<std::int64_t>(host_bro[b + 1]) - host_bro[b]);
    keep_words = ceil_div(max_window, 32);
  }
  const std::int64_t cols_per_head = nope + vdim;
  const std::int64_t heads_per_chunk =
      std::max<std::int64_t>(1, std::min<std::int64_t>(H, kKvBudgetBytes / std::max<std::int64_t>(1, BL * cols_per_head * 2)));
  Temporaries tmp;
  const std::size_t xq = tmp.add(static_cast<std::size_t>(BL * latent));
  const std::size_t sa = tmp.add(static_cast<std::size_t>(BL * groups * 4));
  const std::size_t kr = tmp.add(static_cast<std::size_t>(BL * rope * 2));
  const std::size_t needed = tmp.add(static_cast<std::size_t>(BL));
  const std::size_t keep = tmp.add(static_cast<std::size_t>(T * keep_words * 4));
  const std::size_t kv = tmp.add(static_cast<std::size_t>(BL * heads_per_chunk * cols_per_head * 2));
  if (launch.workspace_query != nullptr) {
    *launch.workspace_query = tmp.total();
    return Status::success();
  }
  MLAKIT_STATUS_TRY(tmp.acquire(kOp, launch, stream));

  // 1. RoPE + RMSNorm in place.
  NormParams np;
  np.q = static_cast<std::uint16_t*>(a.q.data);
  np.iro = iro;
  np.B = B;
  np.freqs = a.freqs_cis.data;
  np.freqs_f32 = a.freqs_cis.dtype == DType::f32;
  np.gamma = a.kv_norm_gamma.data;
  np.gamma_f32 = a.kv_norm_gamma.dtype == DType::f32;
  np.deepseek = d.numerics != MlaNumerics::max;
  np.cache = cache;
  np.layer = static_cast<int>(a.layer_idx);
  np.H = H;
  np.nope = nope;
  np.rope = rope;
  np.latent = latent;
  np.eps = d.epsilon;
  MLAKIT_STATUS_TRY(launch_kernel(kOp, "rope_norm_kernel", rope_norm_kernel, static_cast<unsigned>(T), kNormThreads, 0,
                                  stream, np));

  // 2. Gather + quantize.
  if (BL > 0) {
    GatherParams gp;
    gp.iro = iro;
    gp.bro = bro;
    gp.coff = coff;
    gp.B = B;
    gp.cache = cache;
    gp.layer = static_cast<int>(a.layer_idx);
    gp.latent = latent;
    gp.rope = rope;
    gp.bk = static_cast<int>(d.bk);
    gp.groups = static_cast<int>(groups);
    gp.numerics = d.numerics;
    gp.xq = tmp.at<std::uint8_t>(xq);
    gp.sa = tmp.at<float>(sa);
    gp.kr = tmp.at<std::uint16_t>(kr);
    gp.needed = tmp.at<std::uint8_t>(needed);
    MLAKIT_STATUS_TRY(launch_kernel(kOp, "gather_quant_kernel", gather_quant_kernel, static_cast<unsigned>(BL),
                                    kQuantThreads, 0, stream, gp));
  }

  // topk_indices as one bit per (query, window row).
  if (a.topk_indices.data != nullptr) {
    MaskParams mp;
    mp.topk = static_cast<const std::int32_t*>(a.topk_indices.data);
    mp.top_k = a.topk_indices.shape[1];
    mp.words = keep_words;
    mp.iro = iro;
    mp.bro = bro;
    mp.coff = coff;
    mp.lens = cache.cache_lengths;
    mp.B = B;
    mp.keep = tmp.at<std::uint32_t>(keep);
    MLAKIT_STATUS_TRY(launch_kernel(kOp, "mask_kernel", mask_kernel, static_cast<unsigned>(T), kQuantThreads, 0, stream, mp));
  }

  // 3 + 4 per chunk of heads; on the wgmma kernels where the route takes them: the KV projection
  // (the pipelined kernel for groups of 64 or 128 k, whole 64-k tiles; the two-stage one for other
  // groups) with 16-byte weight loads, the attention with 16-byte tile loads.
  const bool wgmma = wgmma_route::takes(false);
  const bool pipelined = (d.bk == 64 || d.bk == 128) && KvPipeLayout(0).bytes <= smem_max;
  const bool gemm_vector = latent % 16 == 0 && d.bk % 16 == 0 && reinterpret_cast<std::uintptr_t>(a.kv_b_proj.data) % 16 == 0;
  const bool attn_vector = qk % 8 == 0 && nope % 8 == 0 && rope % 8 == 0 && vdim % 8 == 0 &&
                           reinterpret_cast<std::uintptr_t>(a.q.data) % 16 == 0;
  const bool attn_wgmma = wgmma && attn_vector;
  if (wgmma && ((BL > 0 && gemm_vector) || attn_wgmma)) wgmma_route::count();
  for (std::int64_t h0 = 0; h0 < H; h0 += heads_per_chunk) {
    const std::int64_t hc = std::min<std::int64_t>(heads_per_chunk, H - h0);
    const std::int64_t Nc = hc * cols_per_head;
    if (BL > 0) {
      GemmParams gm;
      gm.xq = tmp.at<std::uint8_t>(xq);
      gm.sa = tmp.at<float>(sa);
      gm.needed = tmp.at<std::uint8_t>(needed);
      gm.w = static_cast<const std::uint8_t*>(a.kv_b_proj.data);
      gm.wscale = static_cast<const float*>(a.kv_b_proj_scale.data);
      gm.BL = BL;
      gm.latent = latent;
      gm.bk = d.bk;
      gm.bn = d.bn;
      gm.groups = groups;
      gm.n_first = h0 * cols_per_head;
      gm.Nc = Nc;
      gm.kv = tmp.at<std::uint16_t>(kv);
      const std::int64_t row_tiles = ceil_div(BL, kBM);
      if (row_tiles > 65535)
        return exceeds_one_launch(kOp, "buffer_length",
                                  "buffer_length=" + std::to_string(BL) + " (at most " + std::to_string(65535 * kBM) +
                                      " per launch)");
      const dim3 grid(static_cast<unsigned>(ceil_div(Nc, kBN)), static_cast<unsigned>(row_tiles));
      if (gemm_vector && wgmma) {
        if (pipelined) {
          const dim3 pipe_grid(static_cast<unsigned>(ceil_div(Nc, pipe::kBN)), static_cast<unsigned>(ceil_div(BL, pipe::kBM)));
          MLAKIT_STATUS_TRY(launch_kernel(kOp, "kv_gemm_pipe_kernel",
                                          d.bk == 128 ? kv_gemm_pipe_kernel<2> : kv_gemm_pipe_kernel<1>, pipe_grid,
                                          pipe::kThreads, KvPipeLayout(0).bytes, stream, gm));
        } else {
          const dim3 wg_grid(static_cast<unsigned>(ceil_div(Nc, kCoreTileCols)), static_cast<unsigned>(row_tiles));
          MLAKIT_STATUS_TRY(
              launch_kernel(kOp, "kv_gemm_wgmma_kernel", kv_gemm_wgmma_kernel, wg_grid, kCoreTileThreads, 0, stream, gm));
        }
      } else {
        MLAKIT_STATUS_TRY(launch_kernel(kOp, "kv_gemm_kernel", gemm_vector ? kv_gemm_kernel<true> : kv_gemm_kernel<false>,
                                        grid, kGemmThreads, 0, stream, gm));
      }
    }
    AttnParams ap;
    ap.q = static_cast<const std::uint16_t*>(a.q.data);
    ap.iro = iro;
    ap.bro = bro;
    ap.coff = coff;
    ap.lens = cache.cache_lengths;
    ap.B = B;
    ap.kv = tmp.at<std::uint16_t>(kv);
    ap.kr = tmp.at<std::uint16_t>(kr);
    ap.out = static_cast<std::uint16_t*>(a.output.data);
    ap.T = T;
    ap.Nc = Nc;
    ap.H = H;
    ap.h_first = static_cast<int>(h0);
    ap.nope = nope;
    ap.rope = rope;
    ap.v = vdim;
    ap.qk = qk;
    ap.qkp = qkp;
    ap.scale = d.scale;
    ap.round_p = d.numerics != MlaNumerics::max;
    ap.keep = keep_words > 0 ? tmp.at<std::uint32_t>(keep) : nullptr;
    ap.keep_words = keep_words;
    ap.vector_loads = attn_vector;
    // Forced on only until a GPU has measured it (the same bits either way); the wgmma kernel
    // prefetches its tiles in the same order.
    ap.prefetch = ap.vector_loads && (attn_wgmma || prefetch_route().mode() == core::RouteMode::on);
    if (ap.prefetch && !attn_wgmma && h0 == 0) g_prefetch_runs.fetch_add(1);
    if (hc > 65535)
      return exceeds_one_launch(kOp, "num_heads", "num_heads=" + std::to_string(H));
    const dim3 grid(static_cast<unsigned>(ceil_div(T, kQRows)), static_cast<unsigned>(hc),
                    static_cast<unsigned>(ceil_div(vdim, kVCols)));
    MLAKIT_STATUS_TRY(
        attn_wgmma    ? launch_kernel(kOp, "attention_wgmma_kernel",
                                      qkp == 16 * kDeepSeekQkSteps ? attention_wgmma_kernel<kDeepSeekQkSteps>
                                                                   : attention_wgmma_kernel<0>,
                                      grid, kAttnThreads, attn_wg_layout.bytes, stream, ap)
        : ap.prefetch ? launch_kernel(kOp, "attention_prefetch_kernel", attention_prefetch_kernel, grid, kAttnThreads,
                                      attn_layout.bytes, stream, ap)
                      : launch_kernel(kOp, "attention_kernel", attention_kernel, grid, kAttnThreads, attn_layout.bytes,
                                      stream, ap));
  }
  return Status::success();
}

}  // namespace mlakit::cuda
