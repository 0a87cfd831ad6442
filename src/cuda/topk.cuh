// Block-wide (and, for short rows, warp-wide) top-k selection with the spec's order (ops 1 and
// 2): higher score first; equal scores (+0 == -0) by smaller index; NaN below every number, NaNs
// by smaller index.
//
// Each candidate j gets an order-preserving 32-bit key (larger = ranks earlier, NaN = 0). A radix
// select (four 8-bit passes over the keys, MSB first) finds the key of the m-th best candidate; a
// block-wide scan then compacts, in index order, every candidate with a larger key and the first
// ones with an equal key; the m winners, packed as (~key << 32 | j), are bitonic-sorted ascending.
// Everything is integer arithmetic with fixed orders, so the result is deterministic.
#pragma once

#include <cstdint>

namespace mlakit::cuda {

// Larger key = ranks earlier. +0 and -0 map to the same key; every NaN maps to 0, below -inf.
__device__ __forceinline__ std::uint32_t rank_key(float f) {
  if (f != f) return 0u;
  if (f == 0.0f) f = 0.0f;
  const std::uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ unsigned long long pack_winner(std::uint32_t key, std::uint32_t j) {
  return (static_cast<unsigned long long>(~key) << 32) | j;
}
__device__ __forceinline__ std::uint32_t winner_index(unsigned long long w) { return static_cast<std::uint32_t>(w); }
__device__ __forceinline__ bool winner_is_nan(unsigned long long w) { return (w >> 32) == 0xFFFFFFFFull; }

__host__ __device__ inline std::int64_t next_pow2(std::int64_t x) {
  std::int64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

template <int kThreads>
struct TopkShared {
  std::uint32_t hist[256];
  std::uint32_t warp_sums[kThreads / 32][2];
  std::uint32_t pick[2];
};

// Exclusive block-wide prefix counts of two flags (every thread of the block must call it).
template <int kThreads>
__device__ __forceinline__ void block_scan2(TopkShared<kThreads>& sm, bool fa, bool fb, std::uint32_t* pa,
                                            std::uint32_t* pb, std::uint32_t* ta, std::uint32_t* tb) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::uint32_t ba = __ballot_sync(0xffffffffu, fa), bb = __ballot_sync(0xffffffffu, fb);
  const std::uint32_t below = (1u << lane) - 1u;
  if (lane == 0) {
    sm.warp_sums[warp][0] = __popc(ba);
    sm.warp_sums[warp][1] = __popc(bb);
  }
  __syncthreads();
  std::uint32_t oa = 0, ob = 0, sa = 0, sb = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    const std::uint32_t ca = sm.warp_sums[w][0], cb = sm.warp_sums[w][1];
    if (w < warp) {
      oa += ca;
      ob += cb;
    }
    sa += ca;
    sb += cb;
  }
  *pa = oa + __popc(ba & below);
  *pb = ob + __popc(bb & below);
  *ta = sa;
  *tb = sb;
  __syncthreads();  // warp_sums is reused by the next call
}

// Ascending bitonic sort of buf[0, P), P a power of two (shared or block-private global memory).
template <int kThreads>
__device__ void block_bitonic_sort(unsigned long long* buf, int P) {
  for (int k = 2; k <= P; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < P; i += kThreads) {
        const int ixj = i ^ j;
        if (ixj > i) {
          const unsigned long long a = buf[i], b = buf[ixj];
          const bool ascending = (i & k) == 0;
          if ((a > b) == ascending) {
            buf[i] = b;
            buf[ixj] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

// The m (1 <= m <= n) best of candidates 0..n-1, sorted best first into buf[0, m) as packed
// winners; buf must hold next_pow2(m) entries (the tail is filled with ~0). key_of(j) must return
// the same value on every call. Every thread of the block must call it.
template <int kThreads, class KeyOf>
__device__ void block_topk(TopkShared<kThreads>& sm, int n, int m, KeyOf key_of, unsigned long long* buf) {
  const int tid = threadIdx.x;
  const bool take_all = m >= n;
  std::uint32_t threshold = 0, need_equal = 0;
  if (!take_all) {
    // Radix select: after the pass on bits [shift, shift+8), `prefix` holds the top bits of the
    // m-th best key and `remaining` how many candidates with exactly those top bits still count.
    std::uint32_t prefix = 0, mask = 0, remaining = static_cast<std::uint32_t>(m);
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += kThreads) sm.hist[i] = 0;
      __syncthreads();
      for (int j = tid; j < n; j += kThreads) {
        const std::uint32_t k = key_of(j);
        if ((k & mask) == prefix) atomicAdd(&sm.hist[(k >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (tid == 0) {
        std::uint32_t above = 0;
        int d = 255;
        for (; d > 0; --d) {
          if (above + sm.hist[d] >= remaining) break;
          above += sm.hist[d];
        }
        sm.pick[0] = prefix | (static_cast<std::uint32_t>(d) << shift);
        sm.pick[1] = remaining - above;
      }
      __syncthreads();
      prefix = sm.pick[0];
      remaining = sm.pick[1];
      mask |= 255u << shift;
      __syncthreads();
    }
    threshold = prefix;
    need_equal = remaining;
  }
  // Compaction in index order: larger keys fill [0, m - need_equal), the first need_equal equal
  // keys fill the rest.
  const std::uint32_t first_equal_slot = static_cast<std::uint32_t>(m) - need_equal;
  std::uint32_t base_gt = 0, base_eq = 0;
  for (int j0 = 0; j0 < n; j0 += kThreads) {
    const int j = j0 + tid;
    const std::uint32_t k = j < n ? key_of(j) : 0u;
    const bool gt = j < n && (take_all || k > threshold);
    const bool eq = j < n && !take_all && k == threshold;
    std::uint32_t pg, pe, tg, te;
    block_scan2<kThreads>(sm, gt, eq, &pg, &pe, &tg, &te);
    if (gt) buf[base_gt + pg] = pack_winner(k, static_cast<std::uint32_t>(j));
    if (eq && base_eq + pe < need_equal) buf[first_equal_slot + base_eq + pe] = pack_winner(k, static_cast<std::uint32_t>(j));
    base_gt += tg;
    base_eq += te;
  }
  const int P = static_cast<int>(next_pow2(m));
  for (int i = m + tid; i < P; i += kThreads) buf[i] = ~0ull;
  __syncthreads();
  block_bitonic_sort<kThreads>(buf, P);
}

// The same selection by one warp, for rows too short to keep a block's radix passes busy: the m
// (1 <= m <= n <= 32 * kPerLane) best of candidates 0..n-1, best first, as out(i, winner) from
// lane 0 for i in [0, m). Each lane keeps candidates lane + 32·i packed in registers; the warp
// takes the smallest packed winner m times (winners are distinct: their indices are). Every lane
// of the warp must call it.
template <int kPerLane, class KeyOf, class Out>
__device__ void warp_topk(int n, int m, KeyOf key_of, Out out) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  unsigned long long v[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int j = lane + 32 * i;
    v[i] = j < n ? pack_winner(key_of(j), static_cast<std::uint32_t>(j)) : ~0ull;
  }
  for (int r = 0; r < m; ++r) {
    unsigned long long w = v[0];
#pragma unroll
    for (int i = 1; i < kPerLane; ++i) w = v[i] < w ? v[i] : w;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long other = __shfl_xor_sync(0xffffffffu, w, o);
      w = other < w ? other : w;
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (v[i] == w) v[i] = ~0ull;
    if (lane == 0) out(r, w);
  }
}

}  // namespace mlakit::cuda
