// Op 4 (docs/sparse_mla_prefill.md) on the GPU: sparse MLA attention over gathered latent rows, FlashAttention style.
//
// One thread block per (query row t, group of 32 heads, chunk of 512 output columns), 8 warps; the
// head groups of a row are neighbours in the grid.
// The block walks the row's index slots 32 at a time: the valid slots' cache rows are gathered into
// shared memory once (bf16 copied; fp8 codes decoded exactly to bf16, the row scale kept aside) and
// serve every head of the group, as K (all qk_depth columns) and as V (the first v_depth).
//   S = Q·Kᵀ   BF16 tensor cores (warp w: head tile w/4, slot tile w%4), f32 accumulation; times the
//              row scale (fp8) and the softmax scale.
//   softmax    online, one warp per 4 heads, one lane per slot: running max m (over valid slots),
//              running sum l of the unrounded exp(s - m), rescale factor exp(m_old - m_new).
//   O += P·V   BF16 tensor cores with P = bf16(exp(s - m)) (FlashMLA's rounding, which the spec
//              allows; for the fp8 cache P carries the row scale: bf16(exp(s - m)·scale_row), so V
//              stays the exact codes); warp w: head tile w/4, columns [128·(w%4), +128) of the chunk,
//              accumulators in registers.
// Rows with several scales or a bf16 tail (FlashMLA's V32 / MODEL1 caches, spec 06 §B) keep the
// codes exact in shared memory (the tail's bf16 values after them) and each slot's group scales
// aside: S sums the per-group tensor-core dots times the group's scale (a 16-column step lies in one
// group), and P·V takes, per 8-column tile, P = bf16(exp(s - m)·scale of that tile's group) — the
// single-scale rounding, once per group.
// The end: out = O / (l + exp(sink - m)), lse = m + log(l), max_logits = m; a row without a valid
// slot writes 0, lse = +inf and max_logits = -inf. Invalid slots (past topk_lengths, negative,
// >= num_rows) are skipped, duplicates count.
// Calls of 64 heads or more (MLAKIT_CUDA_SPARSE_MLA_RING) run the second kernel instead (64 heads
// a block, a cp.async ring; sparse_mla_ring.cu).
#include <algorithm>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/mma.cuh"
#include "cuda/sparse_mla_call.cuh"
#include "cuda/sparse_mla_prefill.hpp"
#include "cuda/sparse_mla_ring.hpp"

namespace mlakit::cuda {
namespace {

constexpr const char* kOp = "sparse_mla_prefill";
constexpr int kThreads = 256;
constexpr int kHeads = 32;    // heads per block: two 16-row tiles
constexpr int kSlots = 32;    // index slots per step
constexpr int kVChunk = 512;  // output columns per block
constexpr int kLdS = kSlots + 1;
constexpr int kLdP = kSlots + 8;

struct Params : SparseMlaCall {
  bool fp8, vector_loads;
  int wq, gran, groups;  // quantized width, columns per scale, scales per row (grouped rows)
};

struct Layout {
  std::size_t rowbase, tailbase, rscale, gscale, valid, m, l, alpha, table, S, P, qs, ks, bytes;
  __host__ __device__ Layout(int Dp, int groups) {
    const std::size_t ld = static_cast<std::size_t>(Dp + 8);
    rowbase = 0;
    tailbase = rowbase + kSlots * sizeof(std::int64_t);
    rscale = tailbase + kSlots * sizeof(std::int64_t);
    gscale = rscale + kSlots * sizeof(float);  // [kSlots][groups]: grouped rows only
    valid = gscale + kSlots * static_cast<std::size_t>(groups) * sizeof(float);
    m = valid + kSlots * sizeof(int);
    l = m + kHeads * sizeof(float);
    alpha = l + kHeads * sizeof(float);
    table = alpha + kHeads * sizeof(float);
    S = table + 256 * sizeof(std::uint16_t);
    P = S + kHeads * kLdS * sizeof(float);
    qs = (P + kHeads * kLdP * sizeof(std::uint16_t) + 15) / 16 * 16;
    ks = qs + kHeads * ld * sizeof(std::uint16_t);
    bytes = ks + kSlots * ld * sizeof(std::uint16_t);
  }
};

// Grouped is a template argument, not a branch on p: with both paths in one body the grouped P·V
// loop (its group changes at run time) kept the 64 accumulators in local memory for both paths.
template <bool Grouped>
__global__ void __launch_bounds__(kThreads, 2) attention_kernel(Params p) {
  MLAKIT_DYNAMIC_SHARED(smem);
  const Layout L(p.Dp, p.groups);
  auto* rowbase = reinterpret_cast<std::int64_t*>(smem + L.rowbase);
  auto* tailbase = reinterpret_cast<std::int64_t*>(smem + L.tailbase);
  auto* rscale = reinterpret_cast<float*>(smem + L.rscale);
  auto* gscale = reinterpret_cast<float*>(smem + L.gscale);
  auto* valid = reinterpret_cast<int*>(smem + L.valid);
  auto* m_run = reinterpret_cast<float*>(smem + L.m);
  auto* l_run = reinterpret_cast<float*>(smem + L.l);
  auto* alpha_s = reinterpret_cast<float*>(smem + L.alpha);
  auto* table = reinterpret_cast<std::uint16_t*>(smem + L.table);
  auto* S = reinterpret_cast<float*>(smem + L.S);
  auto* P = reinterpret_cast<std::uint16_t*>(smem + L.P);
  auto* qs = reinterpret_cast<std::uint16_t*>(smem + L.qs);
  auto* ks = reinterpret_cast<std::uint16_t*>(smem + L.ks);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  // The head groups of one query row are neighbours in the grid, so the rows they gather are
  // fetched from memory once and found in L2 by the others.
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) / p.head_groups;
  const int h0 = static_cast<int>(static_cast<std::int64_t>(blockIdx.x) % p.head_groups) * kHeads;
  const int vc0 = blockIdx.z * kVChunk;
  const int ld = p.Dp + 8, Dp = p.Dp, qk = p.qk;

  if (p.fp8) build_fp8_table(table);
  for (int e = tid; e < kHeads * Dp; e += kThreads) {
    const int r = e / Dp, d = e % Dp, h = h0 + r;
    qs[r * ld + d] = (h < p.Hq && d < qk) ? p.q[(t * p.Hq + h) * qk + d] : std::uint16_t{0};
  }
  if (tid < kHeads) {
    m_run[tid] = -INFINITY;
    l_run[tid] = 0.0f;
  }
  const std::int64_t len = p.slots_of_row(t);

  // Output accumulators: head tile mw, columns [vc0 + 128·cg, +128) as 16 tiles of 8.
  const int mw = warp >> 2, cg = warp & 3;
  float acc[16][4];
#pragma unroll
  for (int i = 0; i < 16; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  bool seen = false;  // a valid slot so far (the same for every thread)
  const auto* blocks8 = static_cast<const std::uint8_t*>(p.cache.blocks);
  const auto* blocks16 = static_cast<const std::uint16_t*>(p.cache.blocks);
  const std::int64_t ps = p.cache.page_size;

  for (std::int64_t p0 = 0; p0 < len; p0 += kSlots) {
    int ok = 0;
    if (tid < kSlots) {
      const std::int64_t slot = p0 + tid;
      const std::int64_t idx = slot < len ? static_cast<std::int64_t>(p.indices[t * p.stride + slot]) : -1;
      ok = idx >= 0 && idx < p.num_rows;
      valid[tid] = ok;
      rowbase[tid] = ok ? p.cache.row_offset(idx / ps, 0, p.layer, idx % ps, 0) : -1;
      if constexpr (Grouped) {
        rscale[tid] = 1.0f;
        tailbase[tid] = ok && p.cache.tail != nullptr ? p.cache.tail_offset(idx / ps, 0, p.layer, idx % ps, 0) : -1;
        const std::int64_t s0 = ok ? p.cache.scale_offset(idx / ps, 0, p.layer, idx % ps, 0) : 0;
        for (int j = 0; j < p.groups; ++j) gscale[tid * p.groups + j] = ok ? p.cache.scale_at(s0 + j) : 1.0f;
      } else {
        rscale[tid] = (ok && p.fp8) ? p.cache.scale_at(p.cache.scale_offset(idx / ps, 0, p.layer, idx % ps, 0)) : 1.0f;
      }
    }
    if (!__syncthreads_or(ok)) continue;  // no valid slot in this step (block-uniform)

    // Gather the valid rows (zero rows for the invalid slots).
    if (p.vector_loads) {
      const int vecs = qk / 8;
      for (int e = tid; e < kSlots * vecs; e += kThreads) {
        const int kk = e / vecs, v = e % vecs;
        uint4 x = make_uint4(0, 0, 0, 0);
        if (rowbase[kk] >= 0) x = *reinterpret_cast<const uint4*>(blocks16 + rowbase[kk] + v * 8);
        *reinterpret_cast<uint4*>(ks + kk * ld + v * 8) = x;
      }
      for (int e = tid; e < kSlots * (Dp - qk); e += kThreads) ks[(e / (Dp - qk)) * ld + qk + e % (Dp - qk)] = 0;
    } else {
      for (int e = tid; e < kSlots * Dp; e += kThreads) {
        const int kk = e / Dp, d = e % Dp;
        const std::int64_t base = rowbase[kk];
        std::uint16_t v = 0;
        if (base >= 0 && d < qk) {
          if (!p.fp8) v = blocks16[base + d];
          else if (d < p.wq) v = table[blocks8[base + d]];
          else v = p.cache.tail[tailbase[kk] + (d - p.wq)];  // a split row's bf16 tail
        }
        ks[kk * ld + d] = v;
      }
    }
    __syncthreads();

    // S = scale · (row scale ·) Q·Kᵀ: warp w computes heads [16·(w/4), +16) x slots [8·(w%4), +8).
    // Grouped rows: the sum over groups of (group scale) · (the group's columns' dot).
    {
      float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, tot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const int m0 = (warp >> 2) * 16, n0 = (warp & 3) * 8;
      const int col = n0 + 2 * c;
      int cur = -1;  // the group s4 holds (grouped rows; the tail and the padding are group `groups`)
      auto flush = [&]() {
        const float a0 = cur < p.groups ? gscale[col * p.groups + cur] : 1.0f;
        const float a1 = cur < p.groups ? gscale[(col + 1) * p.groups + cur] : 1.0f;
        tot[0] += s4[0] * a0;
        tot[1] += s4[1] * a1;
        tot[2] += s4[2] * a0;
        tot[3] += s4[3] * a1;
        s4[0] = s4[1] = s4[2] = s4[3] = 0.0f;
      };
      for (int k0 = 0; k0 < Dp; k0 += 16) {
        if constexpr (Grouped) {
          const int grp = k0 < p.wq ? k0 / p.gran : p.groups;
          if (grp != cur) {
            if (cur >= 0) flush();
            cur = grp;
          }
        }
        std::uint32_t af[4], bf[2];
        load_a_rowmajor(af, qs, ld, m0, k0);
        load_b_nmajor(bf, ks, ld, n0, k0);
        mma_bf16_16816(s4, af, bf);
      }
      if constexpr (Grouped) {
        flush();
      } else {
        tot[0] = s4[0] * rscale[col];
        tot[1] = s4[1] * rscale[col + 1];
        tot[2] = s4[2] * rscale[col];
        tot[3] = s4[3] * rscale[col + 1];
      }
      S[(m0 + g) * kLdS + col] = p.scale * tot[0];
      S[(m0 + g) * kLdS + col + 1] = p.scale * tot[1];
      S[(m0 + g + 8) * kLdS + col] = p.scale * tot[2];
      S[(m0 + g + 8) * kLdS + col + 1] = p.scale * tot[3];
    }
    __syncthreads();

    // Online softmax: warp w updates heads 4w .. 4w+3; lane = slot.
    for (int rr = 0; rr < 4; ++rr) {
      const int r = warp * 4 + rr;
      const bool v = valid[lane] != 0;
      const float s = S[r * kLdS + lane];
      float tile_max = v ? s : -INFINITY;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) tile_max = nan_max(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
      const float m_old = m_run[r];
      const float m_new = seen ? nan_max(m_old, tile_max) : tile_max;
      const float e = v ? expf(s - m_new) : 0.0f;
      float sum = e;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      const float alpha = seen ? expf(m_old - m_new) : 0.0f;
      P[r * kLdP + lane] = f32_to_bf16(p.fp8 ? e * rscale[lane] : e);
      if constexpr (Grouped) S[r * kLdS + lane] = e;  // the weights, scaled per group in P·V
      __syncwarp();
      if (lane == 0) {
        m_run[r] = m_new;
        l_run[r] = l_run[r] * alpha + sum;
        alpha_s[r] = alpha;
      }
    }
    seen = true;
    __syncthreads();

    // O = alpha·O + P·V.
    {
      const int r0 = mw * 16 + g;
      const float a0 = alpha_s[r0], a1 = alpha_s[r0 + 8];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        acc[i][0] *= a0;
        acc[i][1] *= a0;
        acc[i][2] *= a1;
        acc[i][3] *= a1;
      }
      if constexpr (Grouped) {
        // Per 8-column tile the weights times its group's scales, rounded to bf16 (the fragment of
        // load_a_rowmajor, built from S), rebuilt when the group changes.
        std::uint32_t af[2][4];
        int cur = -1;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const int n0 = vc0 + cg * 128 + i * 8;
          if (n0 >= p.vd) break;
          const int grp = n0 < p.wq ? n0 / p.gran : p.groups;
          if (grp != cur) {
            cur = grp;
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) grouped_p_fragment(af[kk], S, kLdS, gscale, p.groups, grp, mw * 16 + g, kk);
          }
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            std::uint32_t bf[2];
            load_b_kmajor(bf, ks, ld, kk * 16, n0);
            mma_bf16_16816(acc[i], af[kk], bf);
          }
        }
      } else {
#pragma unroll
        for (int k0 = 0; k0 < kSlots; k0 += 16) {
          std::uint32_t af[4];
          load_a_rowmajor(af, P, kLdP, mw * 16, k0);
#pragma unroll
          for (int i = 0; i < 16; ++i) {
            const int n0 = vc0 + cg * 128 + i * 8;
            if (n0 >= p.vd) break;  // columns past v_depth: not needed (and past the tile's rows)
            std::uint32_t bf[2];
            load_b_kmajor(bf, ks, ld, k0, n0);
            mma_bf16_16816(acc[i], af, bf);
          }
        }
      }
    }
    __syncthreads();
  }
  // A row with no step (topk_lengths 0) ran no barrier: m_run / l_run were written by other threads.
  __syncthreads();

  // Normalize and store.
  const int r0 = mw * 16 + g;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = r0 + 8 * half, h = h0 + r;
    if (h >= p.Hq) continue;
    const float m = m_run[r], l = l_run[r];
    const float den = l + (p.sink != nullptr ? expf(p.sink[h] - m) : 0.0f);
    std::uint16_t* o = p.out + (t * p.Hq + h) * p.vd;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int col = vc0 + cg * 128 + i * 8 + 2 * c;
      if (col < p.vd) o[col] = seen ? f32_to_bf16(acc[i][2 * half] / den) : std::uint16_t{0};
      if (col + 1 < p.vd) o[col + 1] = seen ? f32_to_bf16(acc[i][2 * half + 1] / den) : std::uint16_t{0};
    }
  }
  if (p.lse != nullptr && blockIdx.z == 0 && tid < kHeads && h0 + tid < p.Hq)
    p.lse[t * p.Hq + h0 + tid] = seen ? m_run[tid] + logf(l_run[tid]) : INFINITY;
  if (p.max_logits != nullptr && blockIdx.z == 0 && tid < kHeads && h0 + tid < p.Hq)
    p.max_logits[t * p.Hq + h0 + tid] = seen ? m_run[tid] : -INFINITY;
}

}  // namespace

Status sparse_mla_prefill(const SparseMlaPrefillDesc& d, const SparseMlaPrefillArgs& a, const SparseMlaPrefillArgs& host,
                          const core::DeviceLaunch& launch) {
  (void)host;
  const std::int64_t T = a.q.shape[0];
  if (T == 0) return Status::success();
  if (sparse_mla_ring::takes(d, a)) return sparse_mla_ring::run(d, a, launch);
  const PagedKVCacheView& kc = a.kv_cache;
  const CacheRows rows = CacheRows::of(kc);
  // A 16-column step of the tensor-core dot must lie in one scale group (and not straddle the tail).
  if (rows.grouped && (rows.gran % 16 != 0 || (rows.wt > 0 && rows.wq % 16 != 0)))
    return Status::error(StatusCode::unsupported, kOp, "kv_cache.quant_granularity",
                         "kv_cache.quant_granularity=" + std::to_string(kc.quant_granularity) + " with " +
                             std::to_string(kc.quantized_size()) + " quantized columns (the cuda back-end takes "
                             "several scales per row in groups of a multiple of 16 columns; cpu takes any)");
  Params p;
  MLAKIT_STATUS_TRY(p.set(kOp, d, a, launch, kHeads));
  const Layout layout(p.Dp, rows.grouped ? rows.groups : 0);
  Status s;
  const std::size_t smem_max = max_shared_memory(kOp, &s);
  MLAKIT_STATUS_TRY(s);
  MLAKIT_STATUS_TRY(shared_memory_fits(kOp, "qk_depth", "qk_depth=" + std::to_string(p.qk), layout.bytes, smem_max));
  p.fp8 = rows.fp8;
  p.wq = rows.wq;
  p.gran = rows.gran;
  p.groups = rows.grouped ? rows.groups : 0;
  p.vector_loads = !p.fp8 && p.qk % 8 == 0 && cache_rows_16_byte_aligned(kc.blocks);
  const dim3 grid(static_cast<unsigned>(T * p.head_groups), 1, static_cast<unsigned>(ceil_div(d.v_depth, kVChunk)));
  if (launch.workspace_query != nullptr) return Status::success();  // no temporaries
  const auto kernel = rows.grouped ? attention_kernel<true> : attention_kernel<false>;
  return launch_kernel(kOp, "attention_kernel", kernel, grid, kThreads, layout.bytes, as_stream(launch.stream), p);
}

}  // namespace mlakit::cuda
