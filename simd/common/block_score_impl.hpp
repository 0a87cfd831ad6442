// The block-max score kernels, written once; compiled per level by simd/<level>/block_score.cpp.
// See simd/block_score.hpp for the contract.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "simd/block_score.hpp"
#include "simd/common/fp8_decode_impl.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// Register budget of a sweep tile: kAcc accumulators (T groups x C keys, C = kAcc / T), plus T
// query vectors and one broadcast key element. avx2: 12 + 2 + 1 of 16 ymm; generic: 8 + 2 + 1 (+1
// for the separate multiply) of 16 xmm; avx512: 24 + 2 + 1 of 32 zmm.
#if defined(MLAKIT_SIMD_LEVEL_generic)
constexpr std::size_t kAcc = 8;
#elif defined(MLAKIT_SIMD_LEVEL_avx2)
constexpr std::size_t kAcc = 12;
#else
constexpr std::size_t kAcc = 24;
#endif
constexpr std::size_t kT = 2;  // groups per tile of the many-group sweep
template <std::size_t T>
constexpr std::size_t kKeysOf = kAcc / T;

// Converted keys of one chunk stay in L1 while every group passes over them. Measured on Zen 3 for
// one group (decode), where each converted key serves only one vector of rows, against this
// conversion pass per chunk: widening bf16 pairs in the FMA loop (a 32-bit broadcast, shift and
// mask; -10 %: the widening ops compete with the FMAs) and converting the next tile's rows
// between segments of the current tile (-10 %: register pressure). Neither is used.
constexpr std::size_t kChunkBytes = 12 * 1024;
constexpr std::size_t kChunkMultiple = kAcc;  // a multiple of every kKeysOf<T>, T = 1 .. kT

// Block maxima run on order keys: a signed integer whose order is the f32 order, with NaN above
// everything (so a NaN is sticky under max) and "no key" below everything.
constexpr std::int32_t kNoKey = static_cast<std::int32_t>(0x80000000u);
constexpr std::int32_t kNanKey = 0x7FFFFFFF;
constexpr std::int32_t kMinusInfKey = static_cast<std::int32_t>(0xFF800000u ^ 0x7FFFFFFFu);

inline I order_key(F s) {
  const I b = bits(s);
  return select(is_nan(s), isplat(kNanKey), b ^ shr<1>(sar<31>(b)));
}
// The inverse; kNoKey becomes -inf, kNanKey the quiet NaN 0x7FFFFFFF.
inline F key_value(I k) {
  k = select(cmpeq(k, isplat(kNoKey)), isplat(kMinusInfKey), k);
  return floats(k ^ shr<1>(sar<31>(k)));
}
inline I imax(I a, I b) { return select(cmpgt(a, b), a, b); }

// The shared decode header also defines the bf16 variant, which these kernels do not need.
[[maybe_unused]] constexpr auto kUnusedFp8ToBf16 = &fp8_to_bf16;

inline std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

// ---- conversion of key rows to f32 ---------------------------------------------------------------
inline void to_f32(const std::uint16_t* s, float* d, std::size_t k) {
  std::size_t p = 0;
  for (; p + kLanes <= k; p += kLanes) fstore(d + p, fload_bf16(s + p));
  if (p < k) fstore_n(d + p, fload_bf16_n(s + p, k - p), k - p);
}
inline void to_f32(const std::uint8_t* s, float* d, std::size_t k) { fp8_to_f32(s, d, k); }

// ---- the register tile: T groups x C keys ------------------------------------------------------------
// acc[t][c] = sum_d qt_t[d] * kf_c[d], d ascending, one multiply-add per element.
// Every other step also prefetches one line of the keys the caller reads next (pf .. pf_end):
// spread over the multiply-adds, the loads of the next page overlap them without stalling the
// load queue the way a burst of prefetches does.
template <std::size_t T, std::size_t C>
inline void dot_tile(std::size_t dim, const float* qt, std::size_t gstride, const float* kf, std::size_t ldkf,
                     F (&acc)[T][C], const char*& pf_ref, const char* pf_end) {
  for (auto& row : acc)
    for (auto& x : row) x = fzero();
  const char* pf = pf_ref;  // a local copy stays in a register
  for (std::size_t d = 0; d < dim; ++d) {
    if ((d & 1) == 0 && pf < pf_end) {
      __builtin_prefetch(pf, 0, 2);
      pf += 64;
    }
    F qv[T];
    for (std::size_t t = 0; t < T; ++t) qv[t] = fload(qt + t * gstride + d * kLanes);
    for (std::size_t c = 0; c < C; ++c) {
      const F b = fsplat(kf[c * ldkf + d]);
      for (std::size_t t = 0; t < T; ++t) acc[t][c] = fmadd(qv[t], b, acc[t][c]);
    }
  }
  pf_ref = pf;
}

// Folds the scaled scores of keys j0 .. j0+C-1 into the running maxima m[t]; with `masked`, lane l
// of group t only takes key j when j < lim[t][l].
template <std::size_t T, std::size_t C, bool kMasked>
inline void fold(const F (&acc)[T][C], F scale, const I (&lim)[T], std::size_t j0, I (&m)[T]) {
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t c = 0; c < C; ++c) {
      I key = order_key(acc[t][c] * scale);
      if constexpr (kMasked) key = select(cmpgt(lim[t], isplat(static_cast<std::int32_t>(j0 + c))), key, isplat(kNoKey));
      m[t] = imax(m[t], key);
    }
  }
}

struct Sweep {
  std::size_t dim;
  const float* kf;   // converted keys of the chunk, row j - j0 at kf + (j - j0) * ldkf
  std::size_t ldkf;
  std::size_t j0, j1;  // key range of the chunk (key indices of the call)
  F scale;
  const char* pf = nullptr;  // prefetch cursor over the next call's key rows (64-byte steps)
  const char* pf_end = nullptr;
};

template <std::size_t T, std::size_t C>
inline void run_keys(Sweep& s, std::size_t j, const float* qt, std::size_t gstride, const I (&lim)[T],
                     std::int32_t lo, I (&m)[T]) {
  F acc[T][C];
  dot_tile<T, C>(s.dim, qt, gstride, s.kf + (j - s.j0) * s.ldkf, s.ldkf, acc, s.pf, s.pf_end);
  if (static_cast<std::int64_t>(j + C) <= lo) fold<T, C, false>(acc, s.scale, lim, j, m);
  else fold<T, C, true>(acc, s.scale, lim, j, m);
}

// The last r < C keys of a tile.
template <std::size_t T, std::size_t R>
inline void run_tail(std::size_t r, Sweep& s, std::size_t j, const float* qt, std::size_t gstride,
                     const I (&lim)[T], std::int32_t lo, I (&m)[T]) {
  if constexpr (R > 0) {
    if (r == R) run_keys<T, R>(s, j, qt, gstride, lim, lo, m);
    else run_tail<T, R - 1>(r, s, j, qt, gstride, lim, lo, m);
  }
}

// Groups g .. g+T-1 over the chunk: keys below the smallest limit of the tile take the unmasked
// fold, keys at or above the largest are skipped.
template <std::size_t T>
inline void sweep_groups(Sweep& s, std::size_t g, const float* qt, const std::int32_t* limits,
                         const std::int32_t* gmin, const std::int32_t* gmax, std::int32_t* keys) {
  constexpr std::size_t C = kKeysOf<T>;
  std::int32_t lo = gmin[g], hi = gmax[g];
  for (std::size_t t = 1; t < T; ++t) {
    lo = gmin[g + t] < lo ? gmin[g + t] : lo;
    hi = gmax[g + t] > hi ? gmax[g + t] : hi;
  }
  const std::size_t end = s.j1 < static_cast<std::size_t>(hi) ? s.j1 : static_cast<std::size_t>(hi);  // hi >= 0
  if (end <= s.j0) return;
  const std::size_t gstride = s.dim * kLanes;
  const float* q = qt + g * gstride;
  I lim[T], m[T];
  for (std::size_t t = 0; t < T; ++t) {
    lim[t] = iload(limits + (g + t) * kLanes);
    m[t] = iload(keys + (g + t) * kLanes);
  }
  std::size_t j = s.j0;
  for (; j + C <= end; j += C) run_keys<T, C>(s, j, q, gstride, lim, lo, m);
  if (j < end) run_tail<T, C - 1>(end - j, s, j, q, gstride, lim, lo, m);
  for (std::size_t t = 0; t < T; ++t) istore(keys + (g + t) * kLanes, m[t]);
}

template <std::size_t T>
inline void sweep_rest(std::size_t rest, Sweep& s, std::size_t g, const float* qt, const std::int32_t* limits,
                       const std::int32_t* gmin, const std::int32_t* gmax, std::int32_t* keys) {
  if constexpr (T > 0) {
    if (rest == T) sweep_groups<T>(s, g, qt, limits, gmin, gmax, keys);
    else sweep_rest<T - 1>(rest, s, g, qt, limits, gmin, gmax, keys);
  }
}

// ---- scratch layout ----------------------------------------------------------------------------------
struct Layout {
  std::size_t chunk;    // keys per chunk
  std::size_t ldkf;     // floats per converted key row
  std::size_t keys_at, limits_at, gmin_at, gmax_at, kf_at, total;  // byte offsets from the aligned base
};

inline Layout layout_of(std::size_t groups, std::size_t dim) {
  Layout L{};
  L.ldkf = dim;
  std::size_t chunk = kChunkBytes / (dim * sizeof(float));
  chunk = chunk < kChunkMultiple ? kChunkMultiple : chunk / kChunkMultiple * kChunkMultiple;
  L.chunk = chunk;
  const std::size_t lanes_bytes = round_up(groups * kLanes * sizeof(std::int32_t), 64);
  const std::size_t group_bytes = round_up(groups * sizeof(std::int32_t), 64);
  L.keys_at = 0;
  L.limits_at = L.keys_at + lanes_bytes;
  L.gmin_at = L.limits_at + lanes_bytes;
  L.gmax_at = L.gmin_at + group_bytes;
  L.kf_at = L.gmax_at + group_bytes;
  L.total = L.kf_at + round_up(chunk * L.ldkf * sizeof(float), 64);
  return L;
}

std::size_t scratch_bytes(std::size_t groups, std::size_t dim) { return layout_of(groups, dim).total + 64; }

// ---- the kernels ---------------------------------------------------------------------------------------
void pack_q(const std::uint16_t* q, std::size_t rows, std::size_t dim, std::size_t ldq, float* qt) {
  const std::size_t groups = (rows + kLanes - 1) / kLanes;
  for (std::size_t g = 0; g < groups; ++g) {
    float* dst = qt + g * dim * kLanes;
    for (std::size_t l = 0; l < kLanes; ++l) {
      const std::size_t r = g * kLanes + l;
      if (r < rows) {
        const std::uint16_t* src = q + r * ldq;
        for (std::size_t d = 0; d < dim; ++d) {
          const std::uint32_t u = static_cast<std::uint32_t>(src[d]) << 16;
          std::memcpy(dst + d * kLanes + l, &u, sizeof u);
        }
      } else {
        for (std::size_t d = 0; d < dim; ++d) dst[d * kLanes + l] = 0.0f;
      }
    }
  }
}

template <class TK>
void block_max(std::size_t groups, std::size_t dim, const float* qt, const TK* k, std::size_t ldk, std::size_t n,
               const std::int32_t* limit, float scale, float* out, void* scratch, const TK* next_k,
               std::size_t next_n) {
  if (groups == 0) return;
  const Layout L = layout_of(groups, dim);
  auto* base = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(scratch) + 63) & ~std::uintptr_t(63));
  auto* keys = reinterpret_cast<std::int32_t*>(base + L.keys_at);
  auto* limits = reinterpret_cast<std::int32_t*>(base + L.limits_at);
  auto* gmin = reinterpret_cast<std::int32_t*>(base + L.gmin_at);
  auto* gmax = reinterpret_cast<std::int32_t*>(base + L.gmax_at);
  auto* kf = reinterpret_cast<float*>(base + L.kf_at);

  // Limits clamped to [0, n]; per group the smallest and largest.
  const auto nn = static_cast<std::int32_t>(n);
  std::int32_t all_hi = 0;
  for (std::size_t g = 0; g < groups; ++g) {
    std::int32_t lo = nn, hi = 0;
    for (std::size_t l = 0; l < kLanes; ++l) {
      std::int32_t v = limit ? limit[g * kLanes + l] : nn;
      v = v < 0 ? 0 : (v > nn ? nn : v);
      limits[g * kLanes + l] = v;
      keys[g * kLanes + l] = kNoKey;
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    gmin[g] = lo;
    gmax[g] = hi;
    all_hi = hi > all_hi ? hi : all_hi;
  }

  Sweep s{dim, kf, L.ldkf, 0, 0, fsplat(scale)};
  const std::size_t hi = static_cast<std::size_t>(all_hi);
  if (next_k && next_n) {
    s.pf = reinterpret_cast<const char*>(next_k);
    s.pf_end = reinterpret_cast<const char*>(next_k + (next_n - 1) * ldk + dim);
  }
  for (std::size_t j0 = 0; j0 < hi; j0 += L.chunk) {
    const std::size_t j1 = j0 + L.chunk < hi ? j0 + L.chunk : hi;
    for (std::size_t j = j0; j < j1; ++j) to_f32(k + j * ldk, kf + (j - j0) * L.ldkf, dim);
    s.j0 = j0;
    s.j1 = j1;
    std::size_t g = 0;
    for (; g + kT <= groups; g += kT) sweep_groups<kT>(s, g, qt, limits, gmin, gmax, keys);
    if (g < groups) sweep_rest<kT - 1>(groups - g, s, g, qt, limits, gmin, gmax, keys);
  }
  for (std::size_t g = 0; g < groups; ++g) fstore(out + g * kLanes, key_value(iload(keys + g * kLanes)));
}

constexpr BlockScoreKernels make_block_score_kernels() {
  return BlockScoreKernels{kLevelName,
                           static_cast<unsigned>(kLanes),
                           &pack_q,
                           &scratch_bytes,
                           &block_max<std::uint16_t>,
                           &block_max<std::uint8_t>,
                           static_cast<unsigned>(kT),
                           static_cast<unsigned>(kKeysOf<kT>)};
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
