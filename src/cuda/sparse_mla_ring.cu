// Op 4 (docs/sparse_mla_prefill.md) on the GPU for bf16 caches, fp8 caches with one scale per row
// and FlashMLA's split rows (V32, MODEL1): FlashAttention-2's structure on mma.sync, the step
// toward FlashMLA's sparse prefill that needs no wgmma.
//
// One thread block per (query row t, group of 64 heads), 8 warps; the head groups of a row are
// neighbours in the grid. Q (64 heads x qk_depth) stays in shared memory for the whole row. The
// row's index slots are walked 32 at a time; each step's cache rows are gathered with 16-byte
// cp.async copies into a ring of three stages, the next step's copies in flight while the tensor
// cores work on this one (invalid slots are zero-filled, so they add nothing to P·V). Every
// tensor-core operand comes from shared memory by ldmatrix (V through .trans).
//   warp w: heads [16·(w%4), +16) and half j = w/4:
//   S = scale · Q·Kᵀ   for its heads x slots [16j, +16), f32 accumulators in registers;
//   softmax            online, in registers: the row max over its 16 slots, combined with the
//                      other half's through shared memory; P = bf16(exp(s - m)) (FlashMLA's
//                      rounding, as in the first kernel) into a 64 x 32 P tile in shared memory
//                      (the other half multiplies it too); l of the unrounded exp per half;
//   O += P·V           for its heads x columns [256j, +256) of v_depth: 128 accumulators a thread.
// Three barriers a step (the stage has landed; the partial maxima; P). With three stages the copies
// into stage i+1, issued at the top of step i, overwrite the rows of step i-2, which every warp
// finished before it reached step i-1's barriers.
// FP8 rows: the ring holds the codes (a split row's bf16 tail beside them, and each slot's scales);
// once a stage has landed, the block decodes it exactly to bf16 into one K buffer (a fourth
// barrier), which no warp still reads: the last reads were step i-1's P·V, before step i's first
// barrier. As in the first kernel a scale multiplies its columns' part of the score and rides on
// P, so V stays the exact codes: one scale, P = bf16(exp(s - m)·scale); several (or a tail), the
// score sums each group's dot times its scale and P·V takes, per 16 output columns,
// P = bf16(exp(s - m)·that group's scale) built from the f32 weights kept in shared memory.
// The end: out = O / (l + exp(sink - m)), lse = m + log(l), max_logits = m; a row without a valid
// slot writes 0, lse = +inf and max_logits = -inf, as the first kernel (sparse_mla_prefill.cu).
// With wgmma_route (sm_90a on an sm_90 GPU) S and P·V run on warpgroup products (kWg below).
// Wide steps (kStep = 64, bf16 rows on wgmma; sparse_mla_ring.hpp): 64 slots a step in two stages,
// each half's scores 32 slots wide. Two stages leave no step between a stage's last reader and
// its next copy, so step i + 1's copies are issued after step i's first barrier (every warp has
// finished step i - 1, whose stage they fill), not before it; the copies still have a whole step
// to land.
#include "cuda/sparse_mla_ring.hpp"

#include <atomic>
#include <cstdint>

#include "cuda/async_copy.cuh"
#include "cuda/common.cuh"
#include "cuda/mma.cuh"
#include "cuda/sparse_mla_call.cuh"
#include "cuda/wgmma.cuh"
#include "cuda/wgmma_route.hpp"

namespace mlakit::cuda::sparse_mla_ring {
namespace {

constexpr const char* kOp = "sparse_mla_prefill";
constexpr int kThreads = 256;
constexpr int kHeads = 64;      // heads per block: four 16-row tiles
constexpr int kSlots = 32;      // index slots per step
constexpr int kWideSlots = 64;  // index slots per wide step (below)
constexpr int kVMax = 512;      // output columns per block: two halves of 256
// Stages of the gather ring: three of 32 slots; two of 64 (what fits beside Q in shared memory).
constexpr int stages_of(int slots) { return slots == kSlots ? 3 : 2; }
// P's padded rows: 16 bytes past the slots, so that the 8 rows of an ldmatrix hit 8 different
// bank groups.
constexpr int ld_p(int slots) { return slots + 8; }
constexpr int ld_w(int slots) { return slots + 1; }  // grouped rows' f32 weights

struct Params : SparseMlaCall {
  const unsigned char* blocks;
  const unsigned char* tail;  // split rows' bf16 tails, else null
  int wq, wt, gran, groups;   // fp8 rows: codes, tail columns, columns per scale, scales per row
};

// How a cache row is stored: bf16; fp8 codes with one scale; fp8 codes with several scales and/or
// a bf16 tail (FlashMLA's V32 and MODEL1 rows).
enum Rows : int { kBf16 = 0, kFp8Row = 1, kFp8Grouped = 2 };

// Shared memory, rows of Dp + 8 elements: (Dp + 8)·2 bytes is an odd multiple of 16 for every Dp
// that is a multiple of 16, so the 8 rows of an ldmatrix fall in 8 different bank groups.
// FP8 rows add the ring of codes (wq bytes a row, a multiple of 16), of the tails (wt bf16 a row)
// and of the slots' scales, and the decode table, and keep one bf16 K buffer; grouped rows also
// keep the step's softmax weights in f32 (P is rounded once per scale group). The wgmma kernels'
// core matrices need no padding (Q's and the stages' rows are Dp elements, P's kStep): wide steps
// of 576 columns then take 225.5 KiB.
struct Layout {
  std::size_t qs, ks, ps, ok, red_max, red_l, codes, tails, rscale, weights, table, bytes;
  // `slots` a step (kSlots or kWideSlots), `wg`: the wgmma kernel's unpadded rows.
  __host__ __device__ Layout(int Dp, int rows, int wq, int wt, int groups, int slots, bool wg) {
    const bool fp8 = rows != kBf16;
    const std::size_t stages = static_cast<std::size_t>(stages_of(slots));
    const std::size_t row = static_cast<std::size_t>(Dp + (wg ? 0 : 8)) * sizeof(std::uint16_t);
    qs = 0;
    ks = qs + kHeads * row;
    ps = ks + (fp8 ? 1 : stages) * slots * row;
    ok = ps + kHeads * (wg ? slots : ld_p(slots)) * sizeof(std::uint16_t);  // P: core matrices or padded rows
    red_max = ok + stages * slots * sizeof(int);
    red_l = red_max + 2 * kHeads * sizeof(float);
    codes = red_l + 2 * kHeads * sizeof(float);
    tails = codes + (fp8 ? stages * slots * static_cast<std::size_t>(wq) : 0);
    rscale = tails + (fp8 ? stages * slots * static_cast<std::size_t>(wt) * sizeof(std::uint16_t) : 0);
    weights = rscale + (fp8 ? stages * slots * static_cast<std::size_t>(groups) * sizeof(float) : 0);
    table = weights + (rows == kFp8Grouped ? kHeads * ld_w(slots) * sizeof(float) : 0);
    bytes = table + (fp8 ? 256 * sizeof(std::uint16_t) : 0);
  }
};

// The row format and the slots a step (kStep) are template arguments, not branches on p (the
// paths' registers stay apart).
// kWg (wgmma_route): S on warpgroup products, each half's warpgroup (warps 4·half .. + 3, heads
// 16·(warp % 4), as above) one m64n16k16 product per 16 columns (m64n32k16 on wide steps), with Q
// and the stages' rows as core matrices (wgmma.cuh's layout: eight rows of an 8-column chunk in
// 128 contiguous bytes, sbo = 16·Dp bytes between groups of eight rows) instead of padded rows,
// and P as core matrices too. With v_depth 512 (both halves whole) P·V runs on kStep / 16
// m64n256k16 products per half, V read MN-major from the same rows; else on mma.sync with
// ldmatrix from the layouts.
// The accumulators are the same registers either way (wgmma.cuh's fragment is mma.sync's). fp8
// rows: the decoded K buffer in the same layout; grouped rows sum each scale group's products
// apart, and keep P·V on mma.sync (their P is formed per group from registers).
// kRegP (with kWg, v_depth 512, rows not grouped): each warpgroup's P·V takes the P of its own
// slots from registers (the score accumulators rounded and packed: mma.sync's A fragment, which
// wgmma's register-A products read), issued before the barrier that publishes P; only the other
// half's P passes through shared memory (FlashMLA's sparse prefill shares P the same way). Either
// way each half sums its own slots' products first, so both give the same bits.
template <int R, bool kWg, int kStep, bool kRegP = false>
__global__ void __launch_bounds__(kThreads, 1) ring_kernel(Params p) {
  static_assert(!kRegP || (kWg && R != kFp8Grouped), "P in registers: warpgroup products, P rounded once");
  constexpr bool Fp8 = R != kBf16, Grouped = R == kFp8Grouped;
  // kJ: the 8-slot tiles of a half, and the 16-slot chunks of a step.
  constexpr int kStages = stages_of(kStep), kHalf = kStep / 2, kJ = kStep / 16;
  constexpr int kLdP = ld_p(kStep), kLdW = ld_w(kStep);
  MLAKIT_DYNAMIC_SHARED(smem);
  const Layout L(p.Dp, R, p.wq, p.wt, p.groups, kStep, kWg);
  auto* qs = reinterpret_cast<std::uint16_t*>(smem + L.qs);
  auto* ks = reinterpret_cast<std::uint16_t*>(smem + L.ks);
  auto* ps = reinterpret_cast<std::uint16_t*>(smem + L.ps);
  auto* slot_ok = reinterpret_cast<int*>(smem + L.ok);
  auto* red_max = reinterpret_cast<float*>(smem + L.red_max);
  auto* red_l = reinterpret_cast<float*>(smem + L.red_l);
  auto* codes = smem + L.codes;
  auto* tails = smem + L.tails;
  auto* rscale = reinterpret_cast<float*>(smem + L.rscale);  // [stage][slot][group]
  auto* weights = reinterpret_cast<float*>(smem + L.weights);
  auto* table = reinterpret_cast<std::uint16_t*>(smem + L.table);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int m0 = 16 * (warp & 3), half = warp >> 2;
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) / p.head_groups;
  const int h0 = static_cast<int>(static_cast<std::int64_t>(blockIdx.x) % p.head_groups) * kHeads;
  const int ld = p.Dp + (kWg ? 0 : 8), vecs = p.qk / 8;
  if constexpr (Fp8) build_fp8_table(table);  // read after the first step's barrier
  // Row r's 8-column chunk v of Q or of a stage (a stage: kStep·ld elements apart either way).
  const auto at = [&](auto* base, int r, int v) {
    return kWg ? base + (r / 8) * 8 * p.Dp + 64 * v + (r % 8) * 8 : base + r * ld + 8 * v;
  };
  // P's element (head r, slot k): padded rows, or core matrices (kStep / 8 chunks of 8 slots a row
  // group).
  const auto p_at = [&](int r, int k) {
    return kWg ? ps + (r / 8) * 8 * kStep + (k / 8) * 64 + (r % 8) * 8 + k % 8 : ps + r * kLdP + k;
  };
  // ldmatrix_a_row's row address for this lane in P, in either layout.
  const auto p_row = [&](int m0_, int k0) -> const std::uint16_t* {
    return p_at(m0_ + (lane & 15), k0 + ((lane >> 4) << 3));
  };
  // ldmatrix_b_kmajor_row's row address for this lane, in either layout.
  const auto v_row = [&](const std::uint16_t* stage, int k0, int n0) -> const std::uint16_t* {
    if constexpr (!kWg) return ldmatrix_b_kmajor_row(stage, ld, k0, n0);
    const int row = k0 + (lane & 7) + (((lane >> 3) & 1) << 3), col = n0 + ((lane >> 4) << 3);
    return at(stage, row, col / 8);
  };

  // Q (heads past Hq zero-filled), in the first copy group with step 0's rows; the columns
  // [qk, Dp) of Q and of every stage are zero once for all (no copy writes them).
  for (int e = tid; e < kHeads * vecs; e += kThreads) {
    const int r = e / vecs, v = e % vecs;
    const bool ok = h0 + r < p.Hq;
    cp_async_16(at(qs, r, v), ok ? p.q + ((t * p.Hq + h0 + r) * p.qk + 8 * v) : p.q, ok);
  }
  if (p.Dp != p.qk)  // 8 columns: one 16-byte store a row
    for (int r = tid; r < kHeads + (Fp8 ? 1 : kStages) * kStep; r += kThreads) {
      const int k = r - kHeads;
      std::uint16_t* chunk = r < kHeads ? at(qs, r, p.qk / 8) : at(ks + (k / kStep) * kStep * ld, k % kStep, p.qk / 8);
      *reinterpret_cast<uint4*>(chunk) = make_uint4(0, 0, 0, 0);
    }

  const std::int64_t len = p.slots_of_row(t);
  const int steps = static_cast<int>((len + kStep - 1) / kStep);

  // Queues the rows of step s into stage st: 8 threads a slot, 16 bytes each per copy, 32 slots at
  // a time. Returns whether one of this thread's slots is valid.
  const std::int64_t page = p.cache.page_size;
  auto gather = [&](int s, int st) {
    int any_ok = 0;
    const int part = tid & 7;
    for (int slot = tid >> 3; slot < kStep; slot += kThreads / 8) {
      const std::int64_t pos = static_cast<std::int64_t>(s) * kStep + slot;
      const std::int64_t idx = pos < len ? static_cast<std::int64_t>(p.indices[t * p.stride + pos]) : -1;
      const bool ok = idx >= 0 && idx < p.num_rows;
      const std::int64_t blk = idx / page, off = idx % page;
      constexpr int kElem = Fp8 ? 1 : 2;  // bytes per element of a cache row
      const unsigned char* src = ok ? p.blocks + p.cache.row_offset(blk, 0, p.layer, off, 0) * kElem : p.blocks;
      const int chunks = (Fp8 ? p.wq : p.qk * 2) / 16, tail_chunks = Grouped ? p.wt * 2 / 16 : 0;
      if constexpr (Fp8) {
        unsigned char* dst = codes + (st * kStep + slot) * p.wq;
        for (int v = part; v < chunks; v += 8) cp_async_16(dst + 16 * v, ok ? src + 16 * v : p.blocks, ok);
      } else {
        std::uint16_t* row = ks + st * kStep * ld;
        for (int v = part; v < chunks; v += 8) cp_async_16(at(row, slot, v), ok ? src + 16 * v : p.blocks, ok);
      }
      if constexpr (Grouped) {
        if (tail_chunks > 0) {
          const unsigned char* tsrc = ok ? p.tail + p.cache.tail_offset(blk, 0, p.layer, off, 0) * 2 : p.blocks;
          unsigned char* tdst = tails + (st * kStep + slot) * p.wt * 2;
          for (int v = part; v < tail_chunks; v += 8) cp_async_16(tdst + 16 * v, ok ? tsrc + 16 * v : p.blocks, ok);
        }
      }
      if (part == 0) {
        slot_ok[st * kStep + slot] = ok;
        if constexpr (Fp8) {
          const std::int64_t s0 = ok ? p.cache.scale_offset(blk, 0, p.layer, off, 0) : 0;
          float* rs = rscale + (st * kStep + slot) * p.groups;
          for (int j = 0; j < p.groups; ++j) rs[j] = ok ? p.cache.scale_at(s0 + j) : 1.0f;
        }
      }
      any_ok |= static_cast<int>(ok);
    }
    return any_ok;
  };

  float acc[32][4];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  // The accumulators as wgmma.cuh's fragment for 256 columns: acc[i][e] is its element 4i + e.
  const auto acc_flat = [](float (&a)[32][4]) -> float (&)[128] { return *reinterpret_cast<float(*)[128]>(&a); };
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // rows g and g + 8 of the tile
  bool seen = false;  // a valid slot so far (the same for every thread)

  int ok_now = steps > 0 ? gather(0, 0) : 0;
  cp_async_commit();
  for (int i = 0; i < steps; ++i) {
    const int st = i % kStages;
    int ok_next = 0;
    if constexpr (kStages > 2) {
      if (i + 1 < steps) ok_next = gather(i + 1, (i + 1) % kStages);
      cp_async_commit();  // possibly empty: the wait below then leaves no copy of step i behind
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    if constexpr (kWg) fence_proxy_async();  // this thread's rows, before the products read them
    const bool any = __syncthreads_or(ok_now) != 0;
    if constexpr (kStages == 2) {
      // Two stages: step i + 1's rows go where step i - 1's were, which every warp finished before
      // the barrier above.
      if (i + 1 < steps) ok_next = gather(i + 1, (i + 1) % kStages);
      cp_async_commit();
    }
    ok_now = ok_next;
    if (!any) continue;  // no valid slot in this step (block-uniform)
    const std::uint16_t* kst = ks + (Fp8 ? 0 : st) * kStep * ld;
    const int* okst = slot_ok + st * kStep;
    const float* scales = rscale + st * kStep * p.groups;  // [slot][group]
    if constexpr (Fp8) {
      // Codes decoded exactly to bf16; a split row's tail copied after them.
      const int per_row = p.wq / 16, tail_per_row = Grouped ? p.wt / 8 : 0;
      for (int e = tid; e < kStep * (per_row + tail_per_row); e += kThreads) {
        const int r = e / (per_row + tail_per_row), v = e % (per_row + tail_per_row);
        if (v < per_row) {
          const uint4 x = *reinterpret_cast<const uint4*>(codes + (st * kStep + r) * p.wq + 16 * v);
          *reinterpret_cast<uint4*>(at(ks, r, 2 * v)) = decode_fp8x8(x.x, x.y, table);
          *reinterpret_cast<uint4*>(at(ks, r, 2 * v + 1)) = decode_fp8x8(x.z, x.w, table);
        } else {
          const int u = v - per_row;
          *reinterpret_cast<uint4*>(at(ks, r, p.wq / 8 + u)) =
              *reinterpret_cast<const uint4*>(tails + (st * kStep + r) * p.wt * 2 + 16 * u);
        }
      }
      if constexpr (kWg) fence_proxy_async();  // this thread's rows, before the products read them
      __syncthreads();
    }

    // S: heads [m0, +16) x slots [kHalf·half, +kHalf) as kJ 8-slot tiles. Grouped rows: the sum
    // over scale groups of the group's scale times its columns' dot (a 16-column step lies in one
    // group; the tail and the padding count as group `groups`, scale 1).
    float s[kJ][4], part[kJ][4];
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = part[j][e] = 0.0f;
    int cur = -1;  // the group `part` holds
    auto flush = [&]() {
#pragma unroll
      for (int j = 0; j < kJ; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int slot = kHalf * half + 8 * j + 2 * c + e;
          const float sc = cur < p.groups ? scales[slot * p.groups + cur] : 1.0f;
          s[j][e] += part[j][e] * sc;
          s[j][2 + e] += part[j][2 + e] * sc;
          part[j][e] = part[j][2 + e] = 0.0f;
        }
    };
    if constexpr (kWg) {
      // heads x slots [kHalf·half, +kHalf) over every 16 columns (the rows fenced for the async
      // proxy before the barrier above); grouped rows: each group's products from 0, waited for
      // and added times their scales before the next group's.
      float d[4 * kJ];
#pragma unroll
      for (int e = 0; e < 4 * kJ; ++e) d[e] = 0.0f;
      const auto take = [&](float (&into)[kJ][4]) {
        wgmma_commit();
        wgmma_wait<0>(d);
#pragma unroll
        for (int e = 0; e < 4 * kJ; ++e) {
          into[e / 4][e % 4] = d[e];
          d[e] = 0.0f;
        }
      };
      wgmma_fence(d);
      const std::uint16_t* kb = at(kst, kHalf * half, 0);
      for (int k0 = 0; k0 < p.Dp; k0 += 16) {
        if constexpr (Grouped) {
          const int grp = k0 < p.wq ? k0 / p.gran : p.groups;
          if (grp != cur) {
            if (cur >= 0) {
              take(part);
              flush();
              wgmma_fence(d);
            }
            cur = grp;
          }
        }
        const std::uint32_t sbo = 16 * static_cast<std::uint32_t>(p.Dp);
        if constexpr (kJ == 2) wgmma_m64n16k16(d, at(qs, 0, k0 / 8), kb + 8 * k0, 128, sbo, true);
        else wgmma_m64n32k16(d, at(qs, 0, k0 / 8), kb + 8 * k0, 128, sbo, true);
      }
      take(Grouped ? part : s);
    }
    for (int k0 = 0; k0 < (kWg ? 0 : p.Dp); k0 += 16) {
      if constexpr (Grouped) {
        const int grp = k0 < p.wq ? k0 / p.gran : p.groups;
        if (grp != cur) {
          if (cur >= 0) flush();
          cur = grp;
        }
      }
      std::uint32_t a[4];
      ldmatrix_x4(a, ldmatrix_a_row(qs, ld, m0, k0));
#pragma unroll
      for (int jj = 0; jj < kJ; jj += 2) {
        std::uint32_t b[4];
        ldmatrix_x4(b, ldmatrix_b_nmajor_row(kst, ld, kHalf * half + 8 * jj, k0));
        const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        mma_bf16_16816(Grouped ? part[jj] : s[jj], a, b0);
        mma_bf16_16816(Grouped ? part[jj + 1] : s[jj + 1], a, b1);
      }
    }
    if constexpr (Grouped) flush();  // the last group (of either path)

    // The row maxima over valid slots (element 2r + e of a tile: row g + 8r, slot 2c + e).
    bool valid[kJ][2];
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int slot = kHalf * half + 8 * j + 2 * c + e;
        valid[j][e] = okst[slot] != 0;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if constexpr (R == kFp8Row) s[j][2 * r + e] *= scales[slot];
          s[j][2 * r + e] *= p.scale;
          if (valid[j][e]) mx[r] = nan_max(mx[r], s[j][2 * r + e]);
        }
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = nan_max(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = nan_max(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    if (c == 0) {
      red_max[half * kHeads + m0 + g] = mx[0];
      red_max[half * kHeads + m0 + g + 8] = mx[1];
    }
    __syncthreads();
    float alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float tile_max = nan_max(mx[r], red_max[(1 - half) * kHeads + m0 + g + 8 * r]);
      const float m_new = seen ? nan_max(m_run[r], tile_max) : tile_max;
      alpha[r] = seen ? expf(m_run[r] - m_new) : 0.0f;
      m_run[r] = m_new;
    }
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float x = valid[j][e] ? expf(s[j][2 * r + e] - m_run[r]) : 0.0f;
          s[j][2 * r + e] = R == kFp8Row ? x * scales[kHalf * half + 8 * j + 2 * c + e] : x;  // P's weight
          sum[r] += x;
        }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
      l_run[r] = l_run[r] * alpha[r] + sum[r];
    }
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int col = kHalf * half + 8 * j + 2 * c;
      if constexpr (Grouped) {  // kept in f32: scaled and rounded per group in P·V
        weights[(m0 + g) * kLdW + col] = s[j][0];
        weights[(m0 + g) * kLdW + col + 1] = s[j][1];
        weights[(m0 + g + 8) * kLdW + col] = s[j][2];
        weights[(m0 + g + 8) * kLdW + col + 1] = s[j][3];
      } else {
        *reinterpret_cast<std::uint32_t*>(p_at(m0 + g, col)) = pack_bf16x2(f32_to_bf16(s[j][0]), f32_to_bf16(s[j][1]));
        *reinterpret_cast<std::uint32_t*>(p_at(m0 + g + 8, col)) =
            pack_bf16x2(f32_to_bf16(s[j][2]), f32_to_bf16(s[j][3]));
      }
    }
    if constexpr (kWg) fence_proxy_async();  // this thread's P, before the products read it

    // O = alpha·O + P·V over the step's kStep slots, columns [256·half, +256) of v_depth, 16 at a
    // time; each half's 16-slot chunks from its own (`first`) on, so that a half can start on the
    // P it holds before the other half's is published.
    const auto rescale = [&]() {
#pragma unroll
      for (int n = 0; n < 32; ++n) {
        acc[n][0] *= alpha[0];
        acc[n][1] *= alpha[0];
        acc[n][2] *= alpha[1];
        acc[n][3] *= alpha[1];
      }
    };
    const int first = (kJ / 2) * half;
    const auto chunk = [&](int q) { return (first + q) % kJ; };
    // kRegP: this half's kJ / 2 chunks of P as A fragments (4 registers each: element 2r + e of
    // tiles 2q and 2q + 1, rows g + 8r, the same bf16 as written above).
    std::uint32_t pa[kRegP ? 2 * kJ : 1];
    const auto pa_of = [&](int q) -> std::uint32_t(&)[4] { return *reinterpret_cast<std::uint32_t(*)[4]>(pa + 4 * q); };
    if constexpr (kRegP) {
#pragma unroll
      for (int q = 0; q < kJ / 2; ++q) {
        pa[4 * q + 0] = pack_bf16x2(f32_to_bf16(s[2 * q][0]), f32_to_bf16(s[2 * q][1]));
        pa[4 * q + 1] = pack_bf16x2(f32_to_bf16(s[2 * q][2]), f32_to_bf16(s[2 * q][3]));
        pa[4 * q + 2] = pack_bf16x2(f32_to_bf16(s[2 * q + 1][0]), f32_to_bf16(s[2 * q + 1][1]));
        pa[4 * q + 3] = pack_bf16x2(f32_to_bf16(s[2 * q + 1][2]), f32_to_bf16(s[2 * q + 1][3]));
      }
      rescale();
      wgmma_fence(acc_flat(acc), pa);
#pragma unroll
      for (int q = 0; q < kJ / 2; ++q)
        wgmma_m64n256k16_rs_mn(acc_flat(acc), pa_of(q), at(kst, 16 * chunk(q), 32 * half), 16 * p.Dp, 128, true);
      wgmma_commit();
    }
    __syncthreads();
    if constexpr (!kRegP) rescale();
    if constexpr (Grouped) {
      // Per 16 columns, P = bf16(weight · the scale of those columns' group) as A fragments
      // (load_a_rowmajor's layout), rebuilt when the group changes: the single-scale rounding, once
      // per group.
      std::uint32_t a[kJ][4];
      int grp_a = -1;
#pragma unroll
      for (int n = 0; n < 16; ++n) {
        const int n0 = 256 * half + 16 * n;
        if (n0 >= p.vd) break;
        const int grp = n0 < p.wq ? n0 / p.gran : p.groups;
        if (grp != grp_a) {
          grp_a = grp;
#pragma unroll
          for (int q = 0; q < kJ; ++q) grouped_p_fragment(a[q], weights, kLdW, scales, p.groups, grp, m0 + g, chunk(q));
        }
#pragma unroll
        for (int q = 0; q < kJ; ++q) {  // a[q]: chunk(q)'s fragment
          std::uint32_t b[4];
          ldmatrix_x4_trans(b, v_row(kst, 16 * chunk(q), n0));
          const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
          mma_bf16_16816(acc[2 * n], a[q], b0);
          mma_bf16_16816(acc[2 * n + 1], a[q], b1);
        }
      }
    } else if (kRegP || (kWg && p.vd == kVMax)) {  // kRegP: launched for v_depth 512 only
      // Each half's warpgroup: its 256 columns over the kStep slots, kStep / 16 m64n256k16 products
      // with P (K-major core matrices, 8 rows of kStep slots 16·kStep bytes apart) and V read
      // MN-major from the stage (8 slots of a chunk form a core matrix; chunks 128 bytes apart,
      // slot groups 16·Dp); kRegP: the other half's chunks only, after its own.
      if constexpr (!kRegP) wgmma_fence(acc_flat(acc));
#pragma unroll
      for (int q = kRegP ? kJ / 2 : 0; q < kJ; ++q)
        wgmma_m64n256k16_mn(acc_flat(acc), p_at(0, 16 * chunk(q)), 128, 16 * kStep, at(kst, 16 * chunk(q), 32 * half),
                            16 * p.Dp, 128, true);
      wgmma_commit();
      if constexpr (kRegP) wgmma_wait<0>(acc_flat(acc), pa);
      else wgmma_wait<0>(acc_flat(acc));
    } else {
#pragma unroll
      for (int q = 0; q < kJ; ++q) {
        const int kk = chunk(q);
        std::uint32_t a[4];
        ldmatrix_x4(a, p_row(m0, 16 * kk));
#pragma unroll
        for (int n = 0; n < 16; ++n) {
          const int n0 = 256 * half + 16 * n;
          if (n0 >= p.vd) break;  // columns past v_depth are not needed (the pair's second may be: unused)
          std::uint32_t b[4];
          ldmatrix_x4_trans(b, v_row(kst, 16 * kk, n0));
          const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
          mma_bf16_16816(acc[2 * n], a, b0);
          mma_bf16_16816(acc[2 * n + 1], a, b1);
        }
      }
    }
    seen = true;
  }
  cp_async_wait<0>();  // a row of no step still has Q's copies in flight

  // l of the two halves; then normalize and store (rows g and g + 8 of the warp's tile).
  if (c == 0) {
    red_l[half * kHeads + m0 + g] = l_run[0];
    red_l[half * kHeads + m0 + g + 8] = l_run[1];
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = m0 + g + 8 * r, h = h0 + row;
    if (h >= p.Hq) continue;
    const float m = m_run[r], l = red_l[row] + red_l[kHeads + row];
    const float den = l + (p.sink != nullptr ? expf(p.sink[h] - m) : 0.0f);
    std::uint16_t* o = p.out + (t * p.Hq + h) * p.vd;
#pragma unroll
    for (int n = 0; n < 32; ++n) {
      const int col = 256 * half + 8 * n + 2 * c;
      if (col < p.vd) o[col] = seen ? f32_to_bf16(acc[n][2 * r] / den) : std::uint16_t{0};
      if (col + 1 < p.vd) o[col + 1] = seen ? f32_to_bf16(acc[n][2 * r + 1] / den) : std::uint16_t{0};
    }
    if (half == 0 && c == 0) {
      if (p.lse != nullptr) p.lse[t * p.Hq + h] = seen ? m + logf(l) : INFINITY;
      if (p.max_logits != nullptr) p.max_logits[t * p.Hq + h] = seen ? m : -INFINITY;
    }
  }
}

core::RouteSwitch& route() {
  static core::RouteSwitch r("MLAKIT_CUDA_SPARSE_MLA_RING");
  return r;
}
core::RouteSwitch& wide_route() {
  static core::RouteSwitch r("MLAKIT_CUDA_SPARSE_MLA_WIDE");
  return r;
}
core::RouteSwitch& p_regs_route() {
  static core::RouteSwitch r("MLAKIT_CUDA_SPARSE_MLA_P_REGS");
  return r;
}

std::atomic<long> g_runs{0}, g_wide_runs{0}, g_p_regs_runs{0};

using Kernel = void (*)(Params);

// The kernel of 32-slot steps for row format R: its products on wgmma or mma.sync, and with P in
// registers where it can take it.
template <int R>
Kernel step_kernel(bool wgmma, bool p_regs) {
  if (!wgmma) return ring_kernel<R, false, kSlots>;
  if constexpr (R != kFp8Grouped)
    if (p_regs) return ring_kernel<R, true, kSlots, true>;
  return ring_kernel<R, true, kSlots>;
}

}  // namespace

namespace {

// The call's row format as the kernel's template argument.
int format_of(const CacheRows& r) { return !r.fp8 ? kBf16 : r.grouped ? kFp8Grouped : kFp8Row; }

}  // namespace

bool eligible(const SparseMlaPrefillDesc& d, const SparseMlaPrefillArgs& a) {
  const PagedKVCacheView& kc = a.kv_cache;
  const CacheRows f = CacheRows::of(kc);
  if (!f.fp8) {
    if (kc.blocks.dtype != DType::bf16 || d.qk_depth % 8 != 0) return false;
  } else {  // codes (and a tail) 16 bytes a copy, no padding column, a 16-column step in one group
    if (d.qk_depth % 16 != 0 || f.wq % 16 != 0 || f.wt % 8 != 0) return false;
    if (f.grouped && f.gran % 16 != 0) return false;
    if (f.wt > 0 && !cache_rows_16_byte_aligned(kc.tail)) return false;
  }
  if (d.v_depth > d.qk_depth || d.v_depth > kVMax) return false;
  if (!cache_rows_16_byte_aligned(kc.blocks) || reinterpret_cast<std::uintptr_t>(a.q.data) % 16 != 0) return false;
  Status s;
  const std::size_t limit = max_shared_memory(kOp, &s);
  // The padded rows of the kernel on mma.sync: the larger of the two layouts of 32 slots.
  const int Dp = static_cast<int>(round_up(d.qk_depth, 16));
  return s.ok() && Layout(Dp, format_of(f), f.wq, f.wt, f.groups, kSlots, false).bytes <= limit;
}

bool takes(const SparseMlaPrefillDesc& d, const SparseMlaPrefillArgs& a) {
  // "auto": calls of 64 heads or more (an H200 ran every op 4 benchmark row, 64 and 128 heads,
  // 1.7-4.7x faster on it, its products on wgmma, than on the first kernel); fewer heads would
  // leave most of a block's 64 rows empty, and stay on the first kernel's groups of 32, not
  // measured against this one.
  return route().use_for(eligible(d, a), static_cast<std::size_t>(d.num_q_heads), kAutoMinHeads);
}

core::RouteMode mode() { return route().mode(); }
void set_mode(core::RouteMode m) { route().set_mode(m); }
core::RouteMode wide_mode() { return wide_route().mode(); }
void set_wide_mode(core::RouteMode m) { wide_route().set_mode(m); }
long wide_runs() { return g_wide_runs.load(); }
core::RouteMode p_regs_mode() { return p_regs_route().mode(); }
void set_p_regs_mode(core::RouteMode m) { p_regs_route().set_mode(m); }
long p_regs_runs() { return g_p_regs_runs.load(); }
long runs() { return g_runs.load(); }

Status run(const SparseMlaPrefillDesc& d, const SparseMlaPrefillArgs& a, const core::DeviceLaunch& launch) {
  const std::int64_t T = a.q.shape[0];
  if (T == 0) return Status::success();
  Params p;
  MLAKIT_STATUS_TRY(p.set(kOp, d, a, launch, kHeads));
  p.blocks = static_cast<const unsigned char*>(a.kv_cache.blocks.data);
  p.tail = static_cast<const unsigned char*>(a.kv_cache.tail.data);
  const CacheRows f = CacheRows::of(a.kv_cache);
  p.wq = f.wq;
  p.wt = f.wt;
  p.gran = f.gran;
  p.groups = f.groups;
  if (launch.workspace_query != nullptr) return Status::success();  // no temporaries
  const int rows = format_of(f);
  g_runs.fetch_add(1);
  // Its products on wgmma by default: 1.08-1.14x the kernel on mma.sync on an H200, every op 4 row.
  const bool wgmma = wgmma_route::takes(true);
  if (wgmma) wgmma_route::count();
  // Wide steps (bf16 rows on wgmma, where their two stages of 64 rows fit beside Q): forced on
  // only until a GPU has measured them ("auto" never takes them).
  bool wide = false;
  if (wgmma && rows == kBf16 && wide_route().mode() == core::RouteMode::on) {
    Status s;
    const std::size_t limit = max_shared_memory(kOp, &s);
    wide = s.ok() && Layout(p.Dp, kBf16, 0, 0, 0, kWideSlots, true).bytes <= limit;
  }
  if (wide) g_wide_runs.fetch_add(1);
  // P in registers (wgmma, v_depth 512, rows with one scale or none): forced on only until a GPU
  // has measured it.
  const bool p_regs = wgmma && rows != kFp8Grouped && d.v_depth == kVMax && p_regs_route().mode() == core::RouteMode::on;
  if (p_regs) g_p_regs_runs.fetch_add(1);
  const int slots = wide ? kWideSlots : kSlots;
  const Layout layout(p.Dp, rows, f.wq, f.wt, f.groups, slots, wgmma);
  const Kernel kernel = wide ? (p_regs ? ring_kernel<kBf16, true, kWideSlots, true> : ring_kernel<kBf16, true, kWideSlots>)
                        : rows == kBf16   ? step_kernel<kBf16>(wgmma, p_regs)
                        : rows == kFp8Row ? step_kernel<kFp8Row>(wgmma, p_regs)
                                          : step_kernel<kFp8Grouped>(wgmma, p_regs);
  return launch_kernel(kOp, "ring_kernel", kernel, dim3(static_cast<unsigned>(T * p.head_groups)), kThreads,
                       layout.bytes, as_stream(launch.stream), p);
}

}  // namespace mlakit::cuda::sparse_mla_ring
