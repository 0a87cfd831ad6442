// The lightning-indexer score tiles, written once; compiled per level by
// simd/<level>/index_score.cpp. See simd/index_score.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "simd/templates/fp8_decode_impl.hpp"
#include "simd/templates/index_score_epilogue.hpp"
#include "simd/index_score.hpp"
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
#include "simd/vec/fp8_bf16_vbmi.hpp"
#endif

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// Register tile: kHv vectors of heads x kKeys keys. Accumulators kHv*kKeys, plus kHv query vectors
// and one broadcast key value, within the register file: generic 8+2+1 (+1 for the separate
// multiply) of 16, avx2 12+2+1 of 16, avx512 24+4+1 of 32. kHv*kLanes heads = 16 (generic, avx2)
// or 64 (avx512): DeepSeek's 64 heads are 4 tiles on avx2, one on avx512.
#if defined(MLAKIT_SIMD_LEVEL_generic)
constexpr std::size_t kHv = 2;
constexpr std::size_t kKeys = 4;
#elif defined(MLAKIT_SIMD_LEVEL_avx2)
constexpr std::size_t kHv = 2;
constexpr std::size_t kKeys = 6;
#else
constexpr std::size_t kHv = 4;
constexpr std::size_t kKeys = 6;
#endif

// Only the f32 decode is used here; the bf16 one comes with the shared decode header.
[[maybe_unused]] constexpr auto kUnusedFp8ToBf16 = &fp8_to_bf16;

inline std::size_t head_vectors(std::size_t H) { return (H + kLanes - 1) / kLanes; }

#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
// The query holds pairs of dims: one 32-bit lane per head carries the bf16 patterns of
// q[h, 2p] (low half) and q[h, 2p+1] (high half), the operand layout of vdpbf16ps. f8e4m3 codes
// are exact in bf16.
inline std::size_t steps(std::size_t D) { return (D + 1) / 2; }
constexpr std::size_t kStepWords = 2;  // bf16 words per lane and step
#else
inline std::size_t steps(std::size_t D) { return D; }
constexpr std::size_t kStepWords = 1;
#endif

std::size_t packed_floats(std::size_t H, std::size_t D) { return head_vectors(H) * kLanes * (steps(D) + 1); }

// Packed query: head vector hv lives in the tile that starts at vector hv0 = hv - hv % kHv, whose
// R = min(kHv, HV - hv0) vectors are interleaved per step (a dim, or a pair of dims on levels with
// a bf16 pair dot): element (h, step p) at hv0*P*kLanes + p*R*kLanes + (hv - hv0)*kLanes + h % kLanes,
// P = steps(D). The weights follow, HV*kLanes floats. Padded lanes and dims hold 0.
void pack_query(const std::uint8_t* q, const float* w, std::size_t H, std::size_t D, float* packed) {
  const std::size_t hvs = head_vectors(H), P = steps(D);
  std::memset(packed, 0, packed_floats(H, D) * sizeof(float));
  constexpr std::size_t kChunk = 64;
  float row[kChunk];
  for (std::size_t h = 0; h < H; ++h) {
    const std::size_t hv = h / kLanes, lane = h % kLanes;
    const std::size_t hv0 = hv - hv % kHv;
    const std::size_t r = hv - hv0, R = hvs - hv0 < kHv ? hvs - hv0 : kHv;
    float* dst = packed + hv0 * P * kLanes + r * kLanes + lane;
    for (std::size_t d0 = 0; d0 < D; d0 += kChunk) {
      const std::size_t nd = D - d0 < kChunk ? D - d0 : kChunk;
      fp8_to_f32(q + h * D + d0, row, nd);
      for (std::size_t i = 0; i < nd; ++i) {
        const std::size_t d = d0 + i;
        if constexpr (kStepWords == 1) {
          dst[d * R * kLanes] = row[i];
        } else {  // the bf16 pattern is the high half of the exact f32 one
          std::uint32_t bitsv;
          std::memcpy(&bitsv, &row[i], sizeof bitsv);
          const auto half = static_cast<std::uint16_t>(bitsv >> 16);
          // Into the bytes of the float slot (a uint16_t store into a float object would break
          // the aliasing rules); little-endian: element 2p is the low half.
          std::memcpy(reinterpret_cast<unsigned char*>(dst + (d / 2) * R * kLanes) + 2 * (d % 2), &half, sizeof half);
        }
      }
    }
    packed[hvs * P * kLanes + h] = w[h];
  }
}

// Key sources: where the C keys of a register tile come from, as exactly decoded f32 values.
// F32Rows: decoded rows with a stride. Fp8Rows: fp8 codes, a row pointer per key, each value
// broadcast straight from the 256-entry f32 table (no decode pass, no copy of the rows).
struct F32Rows {
  const float* k;
  std::size_t ldk;
  const float* row(std::size_t c) const { return k + c * ldk; }
  static float value(const float* row, std::size_t d) { return row[d]; }
  F32Rows from(std::size_t j) const { return {k + j * ldk, ldk}; }
  static constexpr std::size_t kLineElems = 64 / sizeof(float);
};

struct Fp8F32Table {
  float v[256];
  constexpr Fp8F32Table() : v() {
    for (unsigned c = 0; c < 256; ++c) v[c] = __builtin_bit_cast(float, kFp8Table.f32[c]);
  }
};
constexpr Fp8F32Table kFp8F32{};

struct Fp8Rows {
  const std::uint8_t* const* rows;
  const std::uint8_t* row(std::size_t c) const { return rows[c]; }
  static float value(const std::uint8_t* row, std::size_t d) { return kFp8F32.v[row[d]]; }
  Fp8Rows from(std::size_t j) const { return {rows + j}; }
  static constexpr std::size_t kLineElems = 64;
};

// The epilogue of a register tile: part[c] += relu(dot) * w lane-wise, head vector by head
// vector. `valid` < kLanes masks the lanes of the tile's last vector beyond H (their dot may be NaN
// when a key holds NaN or inf).
template <std::size_t R, std::size_t C>
inline void fold_heads(const F (&acc)[R][C], const float* w, std::size_t valid, F* part) {
  for (std::size_t r = 0; r < R; ++r) {
    const F wv = fload(w + r * kLanes);
    const bool masked = r + 1 == R && valid < kLanes;
    const M keep = head_lanes_below(valid);
    for (std::size_t c = 0; c < C; ++c) {
      F x = relu(acc[r][c]);
      if (masked) x = floats(select(keep, bits(x), isplat(0)));
      part[c] = fmadd(x, wv, part[c]);
    }
  }
}

#if !defined(MLAKIT_SIMD_HAS_BF16_DOT)
// One tile of R head vectors x C keys over all D dims, then the epilogue.
template <std::size_t R, std::size_t C, class Keys>
inline void head_tile(const float* qp, const float* w, std::size_t D, const Keys& keys, std::size_t valid, F* part,
                      std::uint16_t* /*kb: bf16 levels only*/) {
  decltype(keys.row(0)) krow[C];
  for (std::size_t c = 0; c < C; ++c) krow[c] = keys.row(c);
  F acc[R][C];
  for (auto& row : acc)
    for (auto& x : row) x = fzero();
  for (std::size_t d = 0; d < D; ++d) {
    const float* qd = qp + d * R * kLanes;
    F a[R];
    for (std::size_t r = 0; r < R; ++r) a[r] = fload(qd + r * kLanes);
    for (std::size_t c = 0; c < C; ++c) {
      const F b = fsplat(Keys::value(krow[c], d));
      for (std::size_t r = 0; r < R; ++r) acc[r][c] = fmadd(a[r], b, acc[r][c]);
    }
  }
  fold_heads<R, C>(acc, w, valid, part);
}
#else
// Keys are converted to bf16 rows, a slab of kSlabPairs dim pairs at a time, into a buffer on the
// stack (L1) that every head tile reads: C keys x kSlabPairs pairs. The conversion (a few byte
// permutes per 64 codes) is small beside the R*kLanes*D/2 pair products of each key.
constexpr std::size_t kSlabPairs = 128;

template <class Keys>
inline void keys_to_bf16(const Keys& keys, std::size_t C, std::size_t d0, std::size_t nd, std::uint16_t* kb);

// f32 rows (decoded fp8 values): rounded to bf16, which is exact for them.
template <>
inline void keys_to_bf16(const F32Rows& keys, std::size_t C, std::size_t d0, std::size_t nd, std::uint16_t* kb) {
  for (std::size_t c = 0; c < C; ++c) {
    const float* src = keys.row(c) + d0;
    std::uint16_t* dst = kb + c * 2 * kSlabPairs;
    std::size_t i = 0;
    for (; i + 2 * kLanes <= nd; i += 2 * kLanes) bstore(dst + i, bf16_from_f32(fload(src + i), fload(src + i + kLanes)));
    if (i < nd) {  // zero-filled up to the slab's last whole pair
      const std::size_t r = nd - i;
      const F a = r >= kLanes ? fload(src + i) : fload_n(src + i, r);
      const F b = r > kLanes ? fload_n(src + i + kLanes, r - kLanes) : fzero();
      bstore(dst + i, bf16_from_f32(a, b));
    }
  }
}
// fp8 rows: decoded exactly by byte tables.
template <>
inline void keys_to_bf16(const Fp8Rows& keys, std::size_t C, std::size_t d0, std::size_t nd, std::uint16_t* kb) {
  for (std::size_t c = 0; c < C; ++c) {
    std::uint16_t* dst = kb + c * 2 * kSlabPairs;
    fp8_to_bf16_vbmi(keys.row(c) + d0, dst, nd);
    if (nd % 2) dst[nd] = 0;  // the odd dim's partner: q is 0 there, and 0 * 0 keeps NaN out
  }
}

// Pair products of R head vectors x C keys over pairs [0, np) of the slab in kb.
template <std::size_t R, std::size_t C>
inline void pair_dots(const float* qp, std::size_t np, const std::uint16_t* kb, F (&acc)[R][C]) {
  for (std::size_t p = 0; p < np; ++p) {
    const auto* qd = reinterpret_cast<const std::uint16_t*>(qp + p * R * kLanes);
    B a[R];
    for (std::size_t r = 0; r < R; ++r) a[r] = bload(qd + r * kBf16Lanes);
    for (std::size_t c = 0; c < C; ++c) {
      const B b = bsplat_pair(kb + c * 2 * kSlabPairs + 2 * p);
      for (std::size_t r = 0; r < R; ++r) acc[r][c] = bf16_dot(acc[r][c], a[r], b);
    }
  }
}

// One tile of R head vectors x C keys over all D dims, then the epilogue. With one slab
// (D <= 2*kSlabPairs) `kb` holds it already, converted once for every head tile; longer rows are
// converted here slab by slab.
template <std::size_t R, std::size_t C, class Keys>
inline void head_tile(const float* qp, const float* w, std::size_t D, const Keys& keys, std::size_t valid, F* part,
                      std::uint16_t* kb) {
  F acc[R][C];
  for (auto& row : acc)
    for (auto& x : row) x = fzero();
  for (std::size_t d0 = 0; d0 < D; d0 += 2 * kSlabPairs) {
    const std::size_t nd = D - d0 < 2 * kSlabPairs ? D - d0 : 2 * kSlabPairs;
    if (D > 2 * kSlabPairs) keys_to_bf16(keys, C, d0, nd, kb);
    pair_dots<R, C>(qp + (d0 / 2) * R * kLanes, (nd + 1) / 2, kb, acc);
  }
  fold_heads<R, C>(acc, w, valid, part);
}
#endif

// The last tile of heads may hold fewer than kHv vectors.
template <std::size_t C, class Keys, std::size_t R = 1>
inline void head_tile_of(std::size_t rows, const float* qp, const float* w, std::size_t D, const Keys& keys,
                         std::size_t valid, F* part, std::uint16_t* kb) {
  if constexpr (R < kHv) {
    if (rows == R) return head_tile<R, C>(qp, w, D, keys, valid, part, kb);
    return head_tile_of<C, Keys, R + 1>(rows, qp, w, D, keys, valid, part, kb);
  } else {
    head_tile<kHv, C>(qp, w, D, keys, valid, part, kb);
  }
}

// C keys: every head tile, then the lane sums, times the key scales.
template <std::size_t C, class Keys>
void key_tile(const float* packed, std::size_t H, std::size_t D, const Keys& keys, const float* ks, float* out) {
  const std::size_t hvs = head_vectors(H), P = steps(D);
  const float* w = packed + hvs * P * kLanes;
  const std::size_t last_valid = H - (hvs - 1) * kLanes;  // 1 .. kLanes
  F part[C];
  for (auto& p : part) p = fzero();
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
  alignas(64) std::uint16_t kb[C * 2 * kSlabPairs];
  if (D <= 2 * kSlabPairs) keys_to_bf16(keys, C, 0, D, kb);
#else
  std::uint16_t* kb = nullptr;
#endif
  for (std::size_t hv0 = 0; hv0 < hvs; hv0 += kHv) {
    const std::size_t rows = hvs - hv0 < kHv ? hvs - hv0 : kHv;
    const std::size_t valid = hv0 + rows == hvs ? last_valid : kLanes;
    const float* qp = packed + hv0 * P * kLanes;
    if (rows == kHv) head_tile<kHv, C>(qp, w + hv0 * kLanes, D, keys, valid, part, kb);
    else head_tile_of<C>(rows, qp, w + hv0 * kLanes, D, keys, valid, part, kb);
  }
  finish_scores(part, C, ks, out);
}

template <class Keys, std::size_t C = 1>
inline void key_tile_of(std::size_t n, const float* packed, std::size_t H, std::size_t D, const Keys& keys,
                        const float* ks, float* out) {
  if constexpr (C < kKeys) {
    if (n == C) return key_tile<C>(packed, H, D, keys, ks, out);
    return key_tile_of<Keys, C + 1>(n, packed, H, D, keys, ks, out);
  } else {
    key_tile<kKeys>(packed, H, D, keys, ks, out);
  }
}

template <class Keys>
void score_keys(const float* packed, std::size_t H, std::size_t D, const Keys& keys, const float* ks, std::size_t n,
                float* out) {
  std::size_t j = 0;
  for (; j + kKeys <= n; j += kKeys) {
    // The next tile's rows, one head loop ahead: they are read from L2 (or L3) otherwise.
    if (j + 2 * kKeys <= n)
      for (std::size_t c = 0; c < kKeys; ++c)
        for (std::size_t d = 0; d < D; d += Keys::kLineElems) __builtin_prefetch(keys.row(j + kKeys + c) + d, 0, 3);
    key_tile<kKeys>(packed, H, D, keys.from(j), ks + j, out + j);
  }
  if (j < n) key_tile_of(n - j, packed, H, D, keys.from(j), ks + j, out + j);
}

void score(const float* packed, std::size_t H, std::size_t D, const float* k, std::size_t ldk, const float* ks,
           std::size_t n, float* out) {
  score_keys(packed, H, D, F32Rows{k, ldk}, ks, n, out);
}

void score_f8(const float* packed, std::size_t H, std::size_t D, const std::uint8_t* const* rows, const float* ks,
              std::size_t n, float* out) {
  score_keys(packed, H, D, Fp8Rows{rows}, ks, n, out);
}

// Measured (op 1 decode and prefill shapes): with f32 FMA tiles, decoding a key tile pays off from
// 4 query rows sharing it; with bf16 pair dots the per-tile conversion is cheaper than the f32
// rows' extra L2 traffic at every row count.
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
constexpr unsigned kDecodePassRows = 0;
constexpr bool kBf16Dot = true;
#else
constexpr unsigned kDecodePassRows = 4;
constexpr bool kBf16Dot = false;
#endif

constexpr IndexScoreKernels make_index_score_kernels() {
  return IndexScoreKernels{kLevelName,    static_cast<unsigned>(kLanes), static_cast<unsigned>(kHv),
                           static_cast<unsigned>(kKeys), kBf16Dot,      &packed_floats,
                           &pack_query,   kDecodePassRows,              &score,
                           &score_f8,     /*score_f8_queries=*/nullptr};
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
