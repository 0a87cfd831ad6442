// The block-max score kernels, written once; compiled per level by simd/<level>/block_score.cpp.
// See simd/block_score.hpp for the contract.
//
// The unit of the dot product is a "step" of 4 bytes per lane: one f32 element on the levels that
// multiply in f32 (one FMA per step), one bf16 pair on levels with a bf16 pair dot (one vdpbf16ps
// per step). Packed query rows and the key rows the tiles read are both laid out in steps, so the
// register tile, the fold, the chunking and the limits are one code path for every level.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "simd/block_score.hpp"
#include "simd/templates/block_max_keys.hpp"
#include "simd/vec/bf16_round.hpp"
#include "simd/vec/scratch.hpp"
#include "simd/templates/fp8_decode_impl.hpp"
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
#include "simd/vec/fp8_bf16_vbmi.hpp"
#endif

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// ---- the arithmetic of one step ------------------------------------------------------------------
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
constexpr std::size_t kPer = 2;  // elements per step: a bf16 pair
using QE = std::uint16_t;        // element type of packed queries
using KE = std::uint16_t;        // element type of the key rows the tiles read (bf16 patterns)
using QV = B;
inline QV q_step(const QE* p) { return bload(p); }
inline QV k_step(const KE* p) { return bsplat_pair(p); }
inline QV k_two_steps(const KE* p) { return bsplat_two_pairs(p); }  // step of key a, then of key b
inline F mac(F acc, QV q, QV k) { return bf16_dot(acc, q, k); }
inline QE q_elem(std::uint16_t bf16) { return bf16; }
#else
constexpr std::size_t kPer = 1;
using QE = float;
using KE = float;
using QV = F;
inline QV q_step(const QE* p) { return fload(p); }
inline QV k_step(const KE* p) { return fsplat(*p); }
#if !defined(MLAKIT_SIMD_LEVEL_generic)
inline QV k_two_steps(const KE* p) { return fsplat_two(p); }
#endif
inline F mac(F acc, QV q, QV k) { return fmadd(q, k, acc); }
inline QE q_elem(std::uint16_t bf16) { return f32_of_bf16(bf16); }
#endif
inline std::size_t steps_of(std::size_t dim) { return (dim + kPer - 1) / kPer; }

// Register budget of a sweep tile: kAcc accumulators (kT groups x C keys, C = kAcc / kT), plus kT
// query vectors and one broadcast key step. avx2: 12 + 2 + 1 of 16 ymm; generic: 8 + 2 + 1 (+1
// for the separate multiply) of 16 xmm; avx512: 24 + 2 + 1 of 32 zmm. The bf16 level takes 4
// groups x 6 keys (24 + 4 + 1): every step of a tile loads kT query vectors and C key broadcasts
// from L1 for kT * C pair dots, and at two vdpbf16ps per cycle 2 x 12 would need more loads per
// cycle than 4 x 6 (10 per 24 dots).
#if defined(MLAKIT_SIMD_LEVEL_generic)
constexpr std::size_t kAcc = 8;
constexpr std::size_t kT = 2;
#elif defined(MLAKIT_SIMD_LEVEL_avx2)
constexpr std::size_t kAcc = 12;
constexpr std::size_t kT = 2;
#elif defined(MLAKIT_SIMD_HAS_BF16_DOT)
constexpr std::size_t kAcc = 24;
constexpr std::size_t kT = 4;
#else
constexpr std::size_t kAcc = 24;
constexpr std::size_t kT = 2;
#endif
template <std::size_t T>
constexpr std::size_t kKeysOf = kAcc / T;

// Key rows of one chunk stay in L1 while every group passes over them. Measured on Zen 3 for
// one group (decode), where each converted key serves only one vector of rows, against this
// conversion pass per chunk: widening bf16 pairs in the FMA loop (a 32-bit broadcast, shift and
// mask; -10 %: the widening ops compete with the FMAs) and converting the next tile's rows
// between segments of the current tile (-10 %: register pressure). Neither is used.
constexpr std::size_t kChunkBytes = 12 * 1024;
constexpr std::size_t kChunkMultiple = kAcc;  // a multiple of every kKeysOf<T>, T = 1 .. kT


// The shared decode header also defines variants these kernels do not need on every level.
[[maybe_unused]] constexpr auto kUnusedFp8ToBf16 = &fp8_to_bf16;
[[maybe_unused]] constexpr auto kUnusedFp8ToF32 = &fp8_to_f32;

inline std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

// ---- key rows in the layout the tiles read -------------------------------------------------------
// One row of `dim` elements to `ld` elements of KE (exact; ld >= dim, the rest zero).
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
inline void to_steps(const std::uint16_t* s, KE* d, std::size_t dim, std::size_t ld) {
  std::memcpy(d, s, dim * sizeof(KE));
  for (std::size_t e = dim; e < ld; ++e) d[e] = 0;
}
inline void to_steps(const std::uint8_t* s, KE* d, std::size_t dim, std::size_t ld) {
  fp8_to_bf16_vbmi(s, d, dim);
  for (std::size_t e = dim; e < ld; ++e) d[e] = 0;
}
// bf16 rows of an even length are read in place: a pair broadcast needs no conversion.
template <class TK>
constexpr bool reads_in_place(std::size_t dim) { return sizeof(TK) == 2 && dim % 2 == 0; }
#else
inline void to_steps(const std::uint16_t* s, KE* d, std::size_t dim, std::size_t) {
  std::size_t p = 0;
  for (; p + kLanes <= dim; p += kLanes) fstore(d + p, fload_bf16(s + p));
  if (p < dim) fstore_n(d + p, fload_bf16_n(s + p, dim - p), dim - p);
}
inline void to_steps(const std::uint8_t* s, KE* d, std::size_t dim, std::size_t) { fp8_to_f32(s, d, dim); }
template <class TK>
constexpr bool reads_in_place(std::size_t) { return false; }
#endif

// ---- the register tile: T groups x C keys ------------------------------------------------------------
// acc[t][c] = sum over steps s ascending of q_t[s] . k_c[s], one multiply-add (f32) or pair dot
// (bf16) per step, one chain per (row, key). Every kPfEvery-th step also prefetches one line of
// the keys the caller reads next (pf .. pf_end): spread over the multiply-adds, the loads of the
// next page overlap them without stalling the load queue the way a burst of prefetches does.
// The loops over T and C are unrolled by pragma: GCC leaves a 24-iteration loop rolled and keeps
// the accumulators in memory, and each step then waits on store forwarding (it made the avx512
// one-group sweep slower than avx2's).
constexpr std::size_t kPfEvery = kPer == 1 ? 2 : 1;

template <std::size_t T, std::size_t C>
inline void dot_tile(std::size_t steps, const QE* qt, std::size_t gstride, const KE* kr, std::size_t ldkr,
                     F (&acc)[T][C], const char*& pf_ref, const char* pf_end) {
#pragma GCC unroll 32
  for (std::size_t t = 0; t < T; ++t)
#pragma GCC unroll 32
    for (std::size_t c = 0; c < C; ++c) acc[t][c] = fzero();
  const char* pf = pf_ref;  // a local copy stays in a register
  for (std::size_t s = 0; s < steps; ++s) {
    if (s % kPfEvery == 0 && pf < pf_end) {
      __builtin_prefetch(pf, 0, 2);
      pf += 64;
    }
    QV qv[T];
#pragma GCC unroll 32
    for (std::size_t t = 0; t < T; ++t) qv[t] = q_step(qt + t * gstride + s * kLanes * kPer);
#pragma GCC unroll 32
    for (std::size_t c = 0; c < C; ++c) {
      const QV b = k_step(kr + c * ldkr + s * kPer);
#pragma GCC unroll 32
      for (std::size_t t = 0; t < T; ++t) acc[t][c] = mac(acc[t][c], qv[t], b);
    }
  }
  pf_ref = pf;
}

// Folds the scaled scores into the running maxima m[t]. Lane l of accumulator c holds key
// jv[l] + S * c; with `masked`, lane l of group t only takes it when that key is < lim[t][l].
template <std::size_t T, std::size_t C, std::size_t S, bool kMasked>
inline void fold(const F (&acc)[T][C], F scale, const I (&lim)[T], I jv, I (&m)[T]) {
#pragma GCC unroll 32
  for (std::size_t t = 0; t < T; ++t) {
#pragma GCC unroll 32
    for (std::size_t c = 0; c < C; ++c) {
      I key = order_key(acc[t][c] * scale);
      if constexpr (kMasked)
        key = select(cmpgt(lim[t], jv + isplat(static_cast<std::int32_t>(S * c))), key, isplat(kNoKey));
      m[t] = imax(m[t], key);
    }
  }
}

struct Sweep {
  std::size_t steps;
  const KE* kr;  // key rows of the chunk, row j - j0 at kr + (j - j0) * ldkr
  std::size_t ldkr;
  std::size_t j0, j1;  // key range of the chunk (key indices of the call)
  F scale;
  const char* pf = nullptr;  // prefetch cursor over the next call's key rows (64-byte steps)
  const char* pf_end = nullptr;
};

template <std::size_t T, std::size_t C>
inline void run_keys(Sweep& s, std::size_t j, const QE* qt, std::size_t gstride, const I (&lim)[T],
                     std::int32_t lo, I (&m)[T]) {
  F acc[T][C];
  dot_tile<T, C>(s.steps, qt, gstride, s.kr + (j - s.j0) * s.ldkr, s.ldkr, acc, s.pf, s.pf_end);
  const I jv = isplat(static_cast<std::int32_t>(j));
  if (static_cast<std::int64_t>(j + C) <= lo) fold<T, C, 1, false>(acc, s.scale, lim, jv, m);
  else fold<T, C, 1, true>(acc, s.scale, lim, jv, m);
}

// The last r < C keys of a tile.
template <std::size_t T, std::size_t R>
inline void run_tail(std::size_t r, Sweep& s, std::size_t j, const QE* qt, std::size_t gstride,
                     const I (&lim)[T], std::int32_t lo, I (&m)[T]) {
  if constexpr (R > 0) {
    if (r == R) run_keys<T, R>(s, j, qt, gstride, lim, lo, m);
    else run_tail<T, R - 1>(r, s, j, qt, gstride, lim, lo, m);
  }
}

// Groups g .. g+T-1 over the chunk: keys below the smallest limit of the tile take the unmasked
// fold, keys at or above the largest are skipped.
template <std::size_t T>
inline void sweep_groups(Sweep& s, std::size_t g, const QE* qt, const std::int32_t* limits,
                         const std::int32_t* gmin, const std::int32_t* gmax, std::int32_t* keys) {
  constexpr std::size_t C = kKeysOf<T>;
  std::int32_t lo = gmin[g], hi = gmax[g];
  for (std::size_t t = 1; t < T; ++t) {
    lo = gmin[g + t] < lo ? gmin[g + t] : lo;
    hi = gmax[g + t] > hi ? gmax[g + t] : hi;
  }
  const std::size_t end = s.j1 < static_cast<std::size_t>(hi) ? s.j1 : static_cast<std::size_t>(hi);  // hi >= 0
  if (end <= s.j0) return;
  const std::size_t gstride = s.steps * kLanes * kPer;
  const QE* q = qt + g * gstride;
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
inline void sweep_rest(std::size_t rest, Sweep& s, std::size_t g, const QE* qt, const std::int32_t* limits,
                       const std::int32_t* gmin, const std::int32_t* gmax, std::int32_t* keys) {
  if constexpr (T > 0) {
    if (rest == T) sweep_groups<T>(s, g, qt, limits, gmin, gmax, keys);
    else sweep_rest<T - 1>(rest, s, g, qt, limits, gmin, gmax, keys);
  }
}

// ---- few rows: two keys per vector (every vector level) ------------------------------------------
// A call whose rows fill at most half the lanes (a decode token of Hi <= 8 index heads on 16 lanes,
// Hi <= 4 on avx2's 8) would leave half of every multiply idle. Its rows are packed twice instead,
// lane 2h + e holding row h, and one step scores row h against key 2i + e: the broadcast operand
// is a 64-bit lane with step s of key 2i then of key 2i+1 (a bf16 pair each on the pair-dot
// levels, an f32 element each on the f32 levels), read from a copy of a tile of keys zipped per key
// pair. The dot chain of (row, key) is the same steps in the same order as in the full-lane sweep,
// so scores are bitwise those of a prefill call. With bf16 pairs a key costs 32 pair dots, 33 L1
// loads and 4 shuffles (the zip) against 64 half-idle dots for the full-lane sweep of one group;
// in f32 it costs 64 FMAs against 128 half-idle ones, and the zip widens the keys to f32 as it
// interleaves them, so the separate conversion pass of the sweep is gone too (avx512 f32, Zen 5,
// 8 rows x 128 keys in L1: see bench/RESULTS.md). The zip of tile t + 1 runs inside the dot loop
// of tile t (double-buffered), and so does the prefetch of the
// caller's next page: as a separate pass the zip waited for each page's lines and its shuffles
// could not overlap the dots (one thread sweeping shuffled fp8 pages: 186-190 -> 220 GFLOP/s;
// bf16 152-155 -> 160-177). Not taken: keys in lanes (a 16 x 16 dword transpose per 16-step
// group to the dot layout, then query pairs broadcast: twice the shuffles of the zip, which compete
// with the dots for the vector pipes; measured on Zen 5 with the fp8 decode fused into the
// transpose, same bits: 245 against 328 GFLOP/s in L1) and dot products over d with a horizontal
// sum (a different summation order from the prefill path, so not bitwise the same). Nor the same
// pipeline with one key per vector for a call of one full group on avx2 (a decode token of 8
// heads): with 8 of its 16 ymm as accumulators beside the zip's temporaries, the FMA latency shows
// (Zen 5, 8 rows x 128 keys in L1: bf16 88 -> 59 GFLOP/s, fp8 60 -> 55 against the sweep).
#if !defined(MLAKIT_SIMD_LEVEL_generic)
constexpr bool kHasPairPath = true;
constexpr std::size_t kPairRows = kLanes / 2;  // rows of a call that takes the pair path, at most
// Key pairs per register tile, one accumulator each: 16 of 32 zmm; 8 of avx2's 16 ymm, which also
// hold the query step, the broadcast and the zip's temporaries.
constexpr std::size_t kPairTile = kLanes >= 16 ? 16 : 8;
constexpr std::size_t kPairChunk = 2 * kPairTile;  // keys zipped per pass
constexpr std::size_t kZipSteps = kLanes;      // steps of one zip group
constexpr std::size_t kZipElems = kZipSteps * kPer;  // elements of each key in one zip group

// Zipped tiles are group-major: group g (steps [g, g + 1) * kZipSteps, elements
// [g, g + 1) * kZipElems of each key) of pair c sits at kz + (g * kPairTile + c) * kGroupWords, so
// that within a group every broadcast of a step is one base register plus a constant displacement.
constexpr std::size_t kGroupWords = 2 * kZipElems;  // kZipSteps steps x 2 keys x kPer elements
inline std::size_t zip_groups(std::size_t dim) { return (dim + kZipElems - 1) / kZipElems; }
inline std::size_t zip_tile_words(std::size_t dim) { return zip_groups(dim) * kPairTile * kGroupWords; }
// The tile being written starts half a group past a multiple of 4 KiB from the one being read.
// The zip of step s of group g stores into group g of one tile while the pair dots of the same
// step load from group g of the other; at a distance that is a multiple of 4 KiB (as two tiles of
// dim 128 back to back are) those loads share their low 12 address bits with the stores just
// issued, and the loads wait on them (4K aliasing).
constexpr std::size_t kGroupBytes = kPairTile * kGroupWords * sizeof(KE);  // 2 KiB (avx2: 512 bytes)
inline std::size_t zip_second_tile_words(std::size_t dim) {
  const std::size_t bytes = zip_tile_words(dim) * sizeof(KE);
  const std::size_t at = (bytes + kGroupBytes + 4095) / 4096 * 4096 - kGroupBytes;
  return (at >= bytes ? at : at + 4096) / sizeof(KE);
}

// One zip group: elements [0, cnt) (cnt <= kZipElems) of keys a and b (b null: zeros) -> the
// kZipSteps steps at dst, each step s of a then step s of b (elements past cnt read as 0).
// kWatched: fp8 codes may take a decode that is exact but for NaN codes, which it flags in
// `watch` instead (fp8_lanes_to_f32_watched); the caller then redoes the call exactly.
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
// As bf16 pairs; fp8 keys are decoded, exactly, by the same byte permutes that zip them.
template <bool kWatched>
inline void zip_group(const std::uint16_t* a, const std::uint16_t* b, std::size_t cnt, KE* dst, H&) {
  const B x = cnt == kZipElems ? bload(a) : bload_n(a, cnt);
  const B y = b == nullptr ? bzero() : (cnt == kZipElems ? bload(b) : bload_n(b, cnt));
  B lo, hi;
  bzip_pairs(x, y, &lo, &hi);
  bstore(dst, lo);
  bstore(dst + kZipElems, hi);
}
template <bool kWatched>
inline void zip_group(const std::uint8_t* a, const std::uint8_t* b, std::size_t cnt, KE* dst, H&) {
  fp8_zip32_to_bf16(a, b, cnt, dst);
}
#else
// As f32, widened on the way.
template <bool kWatched>
inline F widen(const std::uint16_t* p, std::size_t cnt, H&) {
  return cnt == kZipElems ? fload_bf16(p) : fload_bf16_n(p, cnt);
}
template <bool kWatched>
inline F widen(const std::uint8_t* p, std::size_t cnt, H& watch) {
  const H codes = cnt == kZipElems ? hload_s8(p) : hload_s8_n(p, cnt);
  if constexpr (kWatched) return fp8_lanes_to_f32_watched(codes, watch);
  else return fp8_lanes_to_f32(codes);
}
template <bool kWatched, class TK>
inline void zip_group(const TK* a, const TK* b, std::size_t cnt, KE* dst, H& watch) {
  const F x = widen<kWatched>(a, cnt, watch);
  const F y = b == nullptr ? fzero() : widen<kWatched>(b, cnt, watch);
  F lo, hi;
  fzip(x, y, &lo, &hi);
  fstore(dst, lo);
  fstore(dst + kLanes, hi);
}
#endif

// The keys of one tile to zip: `keys` rows from k (ldk apart) into the zipped tile at dst.
template <class TK, bool kWatched>
struct ZipJob {
  const TK* k;
  std::size_t ldk, dim, keys;
  KE* dst;

  std::size_t pairs() const { return (keys + 1) / 2; }
  // Group g of pair c.
  void zip(std::size_t c, std::size_t g, H& watch) const {
    const std::size_t e = g * kZipElems;
    const TK* a = k + 2 * c * ldk + e;
    zip_group<kWatched>(a, 2 * c + 1 < keys ? a + ldk : nullptr, dim - e < kZipElems ? dim - e : kZipElems,
                        dst + (g * kPairTile + c) * kGroupWords, watch);
  }
  void zip_all(H& watch) const {
    for (std::size_t g = 0; g < zip_groups(dim); ++g)
      for (std::size_t c = 0; c < pairs(); ++c) zip(c, g, watch);
  }
};

// Prefetch cursor over the rows the caller reads next, `per_step` lines per pair step.
struct PairPrefetch {
  const char* at = nullptr;
  const char* end = nullptr;
  std::size_t per_step = 0;
};

// Key pairs [0, C) of the zipped tile kz: acc[c] lanes 2h + e = row h . key 2c + e of the tile.
// Spread over the steps: the zip of the next tile (group g of its pair s at step s of group g, so
// at most one per step) and the prefetch of the next page, a few lines per step. The shuffles of
// the zip then fill issue slots the pair dots leave, and the misses of the prefetches overlap the
// arithmetic, where separate passes would add their whole time.
template <std::size_t C, class Zip>
inline void dot_pairs(std::size_t steps, const QE* qd, const KE* kz, F (&acc)[C], PairPrefetch& pf, const Zip& next,
                      H& watch_ref) {
#pragma GCC unroll 32
  for (std::size_t c = 0; c < C; ++c) acc[c] = fzero();
  const char* p = pf.at;
  H watch = watch_ref;  // a local copy stays in a register
  const std::size_t next_pairs = next.pairs();
  for (std::size_t g = 0, s0 = 0; s0 < steps; ++g, s0 += kZipSteps) {
    const KE* kg = kz + g * kPairTile * kGroupWords;
    const QE* qg = qd + s0 * kLanes * kPer;
    const std::size_t n = steps - s0 < kZipSteps ? steps - s0 : kZipSteps;
    for (std::size_t s = 0; s < n; ++s) {
      for (std::size_t u = 0; u < pf.per_step && p < pf.end; ++u, p += 64) __builtin_prefetch(p, 0, 2);
      if (s < next_pairs) next.zip(s, g, watch);
      const QV q = q_step(qg + s * kLanes * kPer);
#pragma GCC unroll 32
      for (std::size_t c = 0; c < C; ++c) acc[c] = mac(acc[c], q, k_two_steps(kg + c * kGroupWords + s * 2 * kPer));
    }
    for (std::size_t s = n; s < next_pairs; ++s) next.zip(s, g, watch);  // a short last group
  }
  pf.at = p;
  watch_ref = watch;
}

// Lane 2h + e of a vector of key pairs holds key 2i + e: the key offsets of the lanes (the first
// kLanes are read).
alignas(64) constexpr std::int32_t kLaneParity[16] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};

// How the pair path folds its scores into the block maxima. `keys`: the order key of every scaled
// score, as the many-group sweep does (any scale). `max` / `min`, for a finite nonzero scale: the
// largest (scale > 0) or smallest (scale < 0) unscaled dot, scaled once per call. Rounding is
// monotone, so that is the maximum of the scaled scores bit for bit (which of +0 and -0 a block of
// zeros gives is left open by the contract), at 2 vector ops per accumulator instead of 7 (the
// keys fold took 16 % of a decode block's time on Zen 5). vmaxps drops NaN, so a running sum of
// every dot watches for it: a NaN there (a NaN score, or infinite scores of both signs) makes the
// call rerun on the keys fold, which gives the contract's NaN.
enum class PairFold { keys, max, min };

struct PairBest {
  I key;   // keys: running maximum order key per lane
  F best;  // max / min: running maximum (minimum) dot per lane
  F sum;   // max / min: running sum of every dot, the NaN watch
  H codes;  // max / min on the f32 levels: the watch over fp8 codes of the watched decode
};

template <PairFold Fold>
inline F pair_fold_start() {
  return fsplat(Fold == PairFold::min ? __builtin_inff() : -__builtin_inff());
}

template <std::size_t C, PairFold Fold, bool kMasked>
inline void fold_pairs(const F (&acc)[1][C], F scale, I lim, I jv, PairBest& b) {
  if constexpr (Fold == PairFold::keys) {
    const I lims[1] = {lim};
    I ms[1] = {b.key};
    fold<1, C, 2, kMasked>(acc, scale, lims, jv, ms);
    b.key = ms[0];
  } else {
    // Pairwise trees: a chain of C dependent ops would hold the tile's end on their latency.
    F v[C], a[C];
#pragma GCC unroll 32
    for (std::size_t c = 0; c < C; ++c) {
      a[c] = acc[0][c];
      v[c] = kMasked ? select(cmpgt(lim, jv + isplat(static_cast<std::int32_t>(2 * c))), a[c], pair_fold_start<Fold>())
                     : a[c];
    }
#pragma GCC unroll 32
    for (std::size_t w = 1; w < C; w *= 2)
#pragma GCC unroll 32
      for (std::size_t c = 0; c + w < C; c += 2 * w) {
        v[c] = Fold == PairFold::max ? fmax(v[c], v[c + w]) : fmin(v[c], v[c + w]);
        a[c] = a[c] + a[c + w];
      }
    b.best = Fold == PairFold::max ? fmax(b.best, v[0]) : fmin(b.best, v[0]);
    b.sum = b.sum + a[0];
  }
}

// Key pairs [0, C) of kz, whose first key is key j of the call.
template <std::size_t C, PairFold Fold, class Zip>
inline void run_pairs(std::size_t steps, const QE* qd, const KE* kz, F scale, I lim, std::int32_t lo, std::size_t j,
                      PairBest& b, PairPrefetch& pf, const Zip& next) {
  F acc[1][C];
  dot_pairs<C>(steps, qd, kz, acc[0], pf, next, b.codes);
  const I jv = isplat(static_cast<std::int32_t>(j)) + iload(kLaneParity);
  if (static_cast<std::int64_t>(j + 2 * C) <= lo) fold_pairs<C, Fold, false>(acc, scale, lim, jv, b);
  else fold_pairs<C, Fold, true>(acc, scale, lim, jv, b);
}

template <std::size_t R, PairFold Fold, class Zip>
inline void run_pairs_tail(std::size_t r, std::size_t steps, const QE* qd, const KE* kz, F scale, I lim,
                           std::int32_t lo, std::size_t j, PairBest& b, PairPrefetch& pf, const Zip& next) {
  if constexpr (R > 0) {
    if (r == R) run_pairs<R, Fold>(steps, qd, kz, scale, lim, lo, j, b, pf, next);
    else run_pairs_tail<R - 1, Fold>(r, steps, qd, kz, scale, lim, lo, j, b, pf, next);
  }
}
#else
constexpr bool kHasPairPath = false;
constexpr std::size_t kPairRows = 0;
#endif


// ---- scratch layout ----------------------------------------------------------------------------------
struct Layout {
  std::size_t chunk;  // keys per chunk of the many-group sweep
  std::size_t ld;     // KE elements per key row the tiles read (steps * kPer)
  std::size_t keys_at, limits_at, gmin_at, gmax_at, kf_at, kz_at, total;  // byte offsets from the aligned base
};

inline Layout layout_of(std::size_t groups, std::size_t dim) {
  Layout L{};
  L.ld = steps_of(dim) * kPer;
  std::size_t chunk = kChunkBytes / (L.ld * sizeof(KE));
  chunk = chunk < kChunkMultiple ? kChunkMultiple : chunk / kChunkMultiple * kChunkMultiple;
  L.chunk = chunk;
  const std::size_t rows_bytes = round_up(chunk * L.ld * sizeof(KE), 64);
  std::size_t zip_bytes = 0;
#if !defined(MLAKIT_SIMD_LEVEL_generic)
  zip_bytes = (zip_second_tile_words(dim) + zip_tile_words(dim)) * sizeof(KE);  // one tile read, one written
#endif
  const LimitArrays a = limit_arrays(groups);
  L.keys_at = a.best_at;
  L.limits_at = a.limits_at;
  L.gmin_at = a.gmin_at;
  L.gmax_at = a.gmax_at;
  L.kf_at = a.end;
  L.kz_at = L.kf_at + rows_bytes;
  L.total = L.kz_at + zip_bytes;
  return L;
}

inline std::size_t groups_of(std::size_t rows) { return (rows + kLanes - 1) / kLanes; }
inline bool takes_pairs(std::size_t rows) { return kHasPairPath && rows <= kPairRows; }

std::size_t scratch_bytes(std::size_t rows, std::size_t dim) { return layout_of(groups_of(rows), dim).total + 64; }
std::size_t packed_q_bytes(std::size_t rows, std::size_t dim) {
  return groups_of(rows) * steps_of(dim) * kLanes * kPer * sizeof(QE);
}

// ---- the kernels ---------------------------------------------------------------------------------------
void pack_q(const std::uint16_t* q, std::size_t rows, std::size_t dim, std::size_t ldq, void* packed) {
  auto* qt = static_cast<QE*>(packed);
  const std::size_t steps = steps_of(dim);
  // Lane l of a group holds row `row_of(l)` (kLanes: none).
  const auto pack_group = [&](QE* dst, auto row_of) {
    for (std::size_t s = 0; s < steps; ++s)
      for (std::size_t l = 0; l < kLanes; ++l) {
        const std::size_t r = row_of(l);
        for (std::size_t x = 0; x < kPer; ++x) {
          const std::size_t d = s * kPer + x;
          dst[(s * kLanes + l) * kPer + x] = r < rows && d < dim ? q_elem(q[r * ldq + d]) : QE{};
        }
      }
  };
  if (takes_pairs(rows)) {
    pack_group(qt, [](std::size_t l) { return l / 2; });
    return;
  }
  for (std::size_t g = 0; g < groups_of(rows); ++g)
    pack_group(qt + g * steps * kLanes * kPer, [g](std::size_t l) { return g * kLanes + l; });
}

#if !defined(MLAKIT_SIMD_LEVEL_generic)
// False (out untouched) when a max / min fold saw a NaN in its watches: rerun with `keys`. The
// max / min folds also take the watched fp8 decode on the f32 levels (the keys fold, exact, gives
// the NaN codes' NaN scores).
template <class TK, PairFold Fold>
bool block_max_pairs(std::size_t rows, std::size_t dim, const QE* qd, const TK* k, std::size_t ldk, std::size_t n,
                     const std::int32_t* limit, float scale, float* out, unsigned char* base, const Layout& L,
                     const TK* next_k, std::size_t next_n) {
  const std::size_t steps = steps_of(dim);
  // Lane 2h + e carries row h's limit; rows past `rows` see nothing.
  const auto nn = static_cast<std::int32_t>(n);
  alignas(64) std::int32_t lanes[kLanes];
  std::int32_t lo = nn, hi = 0;
  for (std::size_t h = 0; h < kPairRows; ++h) {
    std::int32_t v = 0;
    if (h < rows) {
      v = limit ? limit[h] : nn;
      v = v < 0 ? 0 : (v > nn ? nn : v);
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    lanes[2 * h] = lanes[2 * h + 1] = v;
  }
  const I lim = iload(lanes);
  PairBest b{isplat(kNoKey), pair_fold_start<Fold>(), fzero(), hsplat(0)};
  constexpr bool kWatched = Fold != PairFold::keys;
  using Zip = ZipJob<TK, kWatched>;
  const F fscale = fsplat(scale);
  const std::size_t tiles = (static_cast<std::size_t>(hi) + kPairChunk - 1) / kPairChunk;
  PairPrefetch pf;
  if (next_k && next_n && tiles > 0) {
    pf.at = reinterpret_cast<const char*>(next_k);
    pf.end = reinterpret_cast<const char*>(next_k + (next_n - 1) * ldk + dim);
    const std::size_t lines = static_cast<std::size_t>(pf.end - pf.at) / 64 + 1;
    pf.per_step = (lines + tiles * steps - 1) / (tiles * steps);
  }
  // Tile t's keys are zipped into kz[t % 2] while tile t - 1 is multiplied.
  KE* const kz[2] = {reinterpret_cast<KE*>(base + L.kz_at), reinterpret_cast<KE*>(base + L.kz_at) + zip_second_tile_words(dim)};
  const std::size_t keys = static_cast<std::size_t>(hi);
  const auto tile_keys = [&](std::size_t j0) { return j0 >= keys ? 0 : (keys - j0 < kPairChunk ? keys - j0 : kPairChunk); };
  Zip{k, ldk, dim, tile_keys(0), kz[0]}.zip_all(b.codes);
  for (std::size_t t = 0, j0 = 0; j0 < keys; ++t, j0 += kPairChunk) {
    const std::size_t np = (tile_keys(j0) + 1) / 2;
    const std::size_t next_keys = tile_keys(j0 + kPairChunk);  // 0: no next tile (and no pointer past the keys)
    const Zip next{next_keys ? k + (j0 + kPairChunk) * ldk : k, ldk, dim, next_keys, kz[(t + 1) % 2]};
    if (np == kPairTile) run_pairs<kPairTile, Fold>(steps, qd, kz[t % 2], fscale, lim, lo, j0, b, pf, next);
    else run_pairs_tail<kPairTile - 1, Fold>(np, steps, qd, kz[t % 2], fscale, lim, lo, j0, b, pf, next);
  }
  if constexpr (Fold != PairFold::keys) {
    if (any(is_nan(b.sum)) || fp8_watch_saw_nan(b.codes)) return false;
    b.key = order_key(b.best * fscale);  // lanes that saw no key: -inf, as kNoKey reads
  }
  // Row h: the larger of lanes 2h and 2h + 1; rows past kPairRows see nothing.
  alignas(64) std::int32_t best[kLanes];
  istore(lanes, b.key);
  for (std::size_t l = 0; l < kLanes; ++l) best[l] = kNoKey;
  for (std::size_t h = 0; h < kPairRows; ++h) best[h] = lanes[2 * h] > lanes[2 * h + 1] ? lanes[2 * h] : lanes[2 * h + 1];
  fstore(out, key_value(iload(best)));
  return true;
}
#endif

template <class TK>
void block_max(std::size_t rows, std::size_t dim, const void* packed, const TK* k, std::size_t ldk, std::size_t n,
               const std::int32_t* limit, float scale, float* out, void* scratch, const TK* next_k,
               std::size_t next_n) {
  if (rows == 0) return;
  const std::size_t groups = groups_of(rows);
  const Layout L = layout_of(groups, dim);
  auto* base = cache_line_start(scratch);
  const auto* qt = static_cast<const QE*>(packed);
#if !defined(MLAKIT_SIMD_LEVEL_generic)
  if (takes_pairs(rows)) {
    const auto pairs = [&](auto fold) {
      return block_max_pairs<TK, decltype(fold)::value>(rows, dim, qt, k, ldk, n, limit, scale, out, base, L, next_k,
                                                         next_n);
    };
    const bool plain = scale == scale && scale != 0.0f && scale - scale == 0.0f;  // finite, nonzero
    const bool done = plain && (scale > 0.0f ? pairs(std::integral_constant<PairFold, PairFold::max>{})
                                             : pairs(std::integral_constant<PairFold, PairFold::min>{}));
    if (!done) pairs(std::integral_constant<PairFold, PairFold::keys>{});
    return;
  }
#endif
  auto* keys = reinterpret_cast<std::int32_t*>(base + L.keys_at);
  auto* limits = reinterpret_cast<std::int32_t*>(base + L.limits_at);
  auto* gmin = reinterpret_cast<std::int32_t*>(base + L.gmin_at);
  auto* gmax = reinterpret_cast<std::int32_t*>(base + L.gmax_at);
  auto* kf = reinterpret_cast<KE*>(base + L.kf_at);

  const std::int32_t all_hi = clamp_limits(limit, n, groups, limits, keys, gmin, gmax);

  Sweep s{steps_of(dim), kf, L.ld, 0, 0, fsplat(scale)};
  const std::size_t hi = static_cast<std::size_t>(all_hi);
  if (next_k && next_n) {
    s.pf = reinterpret_cast<const char*>(next_k);
    s.pf_end = reinterpret_cast<const char*>(next_k + (next_n - 1) * ldk + dim);
  }
  for (std::size_t j0 = 0; j0 < hi; j0 += L.chunk) {
    const std::size_t j1 = j0 + L.chunk < hi ? j0 + L.chunk : hi;
    if constexpr (sizeof(TK) == sizeof(KE)) {
      if (reads_in_place<TK>(dim)) {
        s.kr = reinterpret_cast<const KE*>(k + j0 * ldk);
        s.ldkr = ldk;
      }
    }
    if (!reads_in_place<TK>(dim)) {
      for (std::size_t j = j0; j < j1; ++j) to_steps(k + j * ldk, kf + (j - j0) * L.ld, dim, L.ld);
    }
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
                           &packed_q_bytes,
                           &pack_q,
                           &scratch_bytes,
                           &block_max<std::uint16_t>,
                           &block_max<std::uint8_t>,
                           static_cast<unsigned>(kT),
                           static_cast<unsigned>(kKeysOf<kT>),
                           static_cast<unsigned>(kPairRows),
                           /*bf16_dot=*/kPer == 2};
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
