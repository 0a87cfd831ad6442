// The lightning-indexer score tiles on AMX: the per-head dots as TDPBF16PS tile products, the
// epilogue (ReLU x weight x head sum) in AVX-512 registers. Written once against a tile-operations
// policy (simd/common/amx_tiles.hpp): simd/amx/index_score.cpp instantiates it over the real
// instructions, the tests over an emulation of them. See simd/index_score.hpp for the contract.
//
// Tiles (every one 16 rows x 64 bytes):
//   A (tmm4, tmm5)   16 keys x 32 dims, bf16: two key tiles, converted from the key rows into an L1
//                    buffer (fp8 codes by byte tables, decoded f32 values rounded to bf16; both exact)
//   B (tmm6, tmm7)   16 dim pairs x 16 heads x 2 bf16: two head tiles of the query, packed once by
//                    pack_query in the pair layout TDPBF16PS reads
//   C (tmm0..tmm3)   16 keys x 16 heads f32: C[kt][ht] += A[kt] . B[ht], over the dims 32 at a time
// so a block of 32 keys x 32 heads takes 4 loads and 4 tile products per 32 dims. The C tiles are
// stored to L1 and folded head tile by head tile, in head order, into one vector of partial sums
// per key, exactly as the avx512bf16 level's epilogue folds its head vectors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "simd/common/amx_tiles.hpp"
#include "simd/common/fp8_bf16_vbmi.hpp"
#include "simd/common/fp8_decode_impl.hpp"
#include "simd/common/index_score_epilogue.hpp"
#include "simd/index_score.hpp"

#if !defined(MLAKIT_SIMD_HAS_BF16_DOT)
#error "simd/common/index_score_amx_impl.hpp needs the avx512bf16 vector wrappers (levels avx512bf16 and amx)"
#endif

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {
namespace amx_index_score {

static_assert(kLanes == 16, "a C tile row of 16 f32 is one head vector");

constexpr std::size_t kTileHeads = 16;  // heads of a B or C tile
constexpr std::size_t kKeyTiles = kATiles, kHeadTiles = kBTiles;
// Key rows are converted to bf16 kSlabDims dims at a time: 32 keys x 256 dims = 16 KiB of L1.
constexpr std::size_t kSlabDims = 256;
constexpr std::size_t kBlockFloats = kTileRows * kTileHeads;  // one B tile (or C tile) in floats


inline std::size_t head_tiles(std::size_t H) { return (H + kTileHeads - 1) / kTileHeads; }
inline std::size_t dim_chunks(std::size_t D) { return (D + kChunkDims - 1) / kChunkDims; }
inline std::size_t round_up_chunk(std::size_t d) { return dim_chunks(d) * kChunkDims; }

// Packed query: the B tile of head tile t and dim chunk s at floats (t*S + s)*256, S = dim_chunks(D):
// row k (the pair p = 32s/2 + k) holds, per head n of the tile, the bf16 patterns of q[h, 2p] (low
// half) and q[h, 2p+1] (high half) in one 32-bit word. The weights follow, head_tiles(H)*16
// floats. Padded heads and dims hold 0.
std::size_t packed_floats(std::size_t H, std::size_t D) {
  return head_tiles(H) * (dim_chunks(D) * kBlockFloats + kTileHeads);
}

void pack_query(const std::uint8_t* q, const float* w, std::size_t H, std::size_t D, float* packed) {
  const std::size_t HT = head_tiles(H), S = dim_chunks(D);
  std::memset(packed, 0, packed_floats(H, D) * sizeof(float));
  constexpr std::size_t kChunk = 64;
  std::uint16_t row[kChunk];
  // The bf16 halves go into the bytes of the float slots (a uint16_t store into a float object
  // would break the aliasing rules); little-endian: element 2p is the low half.
  auto* bytes = reinterpret_cast<unsigned char*>(packed);
  for (std::size_t h = 0; h < H; ++h) {
    const std::size_t t = h / kTileHeads, n = h % kTileHeads;
    for (std::size_t d0 = 0; d0 < D; d0 += kChunk) {
      const std::size_t nd = D - d0 < kChunk ? D - d0 : kChunk;
      fp8_to_bf16(q + h * D + d0, row, nd);  // exact: fp8 values have 4 significant bits
      for (std::size_t i = 0; i < nd; ++i) {
        const std::size_t d = d0 + i, p = d / 2;
        const std::size_t word = (t * S + p / kTileRows) * kBlockFloats + (p % kTileRows) * kTileHeads + n;
        std::memcpy(bytes + 4 * word + 2 * (d % 2), &row[i], sizeof row[i]);
      }
    }
    packed[HT * S * kBlockFloats + h] = w[h];
  }
}
// Only the bf16 decode is used here; the f32 one comes with the shared decode header.
[[maybe_unused]] constexpr auto kUnusedFp8ToF32 = &fp8_to_f32;

// Key sources: key c's dims [d0, d0 + nd) as bf16 into dst, zero-filled to a whole chunk of 32
// (the query is 0 there too, and 0 * 0 keeps a NaN or inf out of the padding).
struct F32Keys {
  const float* k;
  std::size_t ldk;
  const float* row(std::size_t c) const { return k + c * ldk; }
  F32Keys from(std::size_t j) const { return {k + j * ldk, ldk}; }
  static constexpr std::size_t kLineElems = 64 / sizeof(float);
  // Decoded fp8 values are exact in bf16 (the rounding to nearest even changes nothing).
  void to_bf16(std::size_t c, std::size_t d0, std::size_t nd, std::uint16_t* dst) const {
    const float* src = k + c * ldk + d0;
    for (std::size_t i = 0; i < nd; i += kChunkDims) {
      const std::size_t r = nd - i;
      const F a = r >= kLanes ? fload(src + i) : fload_n(src + i, r);
      const F b = r >= 2 * kLanes ? fload(src + i + kLanes)
                  : r > kLanes    ? fload_n(src + i + kLanes, r - kLanes)
                                  : fzero();
      bstore(dst + i, bf16_from_f32(a, b));
    }
  }
};

struct Fp8Keys {
  const std::uint8_t* const* rows;
  const std::uint8_t* row(std::size_t c) const { return rows[c]; }
  Fp8Keys from(std::size_t j) const { return {rows + j}; }
  static constexpr std::size_t kLineElems = 64;
  void to_bf16(std::size_t c, std::size_t d0, std::size_t nd, std::uint16_t* dst) const {
    fp8_to_bf16_vbmi(rows[c] + d0, dst, nd);
    for (std::size_t i = nd; i < round_up_chunk(nd); ++i) dst[i] = 0;
  }
};

// The working set of one call, on the stack (about 22 KiB, all of it L1).
struct Scratch {
  alignas(64) std::uint16_t kb[kKeys * kSlabDims];                        // A rows, stride kSlabDims
  alignas(64) float cb[kKeyTiles * kHeadTiles][kTileRows * kTileHeads];  // C tiles stored
  F part[kKeys];                                                          // per key, over the heads
};

struct Problem {
  const float* packed;
  std::size_t H, D, HT, S;
  const float* w;
};

// KT key tiles x HN head tiles (head tiles t0, t0 + 1) over every dim, then the fold of the HN
// head tiles into part[], head tile by head tile, of the nk (<= KT*16) valid keys.
template <std::size_t KT, std::size_t HN, class Tiles, class Keys>
void block(Tiles& tiles, const Problem& pr, std::size_t t0, const Keys& keys, std::size_t nk, Scratch& s) {
  unroll<KT>([&](auto kt) { unroll<HN>([&](auto ht) { tiles.template zero<c_tile(kt, ht)>(); }); });
  for (std::size_t d0 = 0; d0 < pr.D; d0 += kSlabDims) {
    const std::size_t nd = pr.D - d0 < kSlabDims ? pr.D - d0 : kSlabDims;
    if (pr.D > kSlabDims)  // one slab: converted once by the caller for every head block
      for (std::size_t c = 0; c < nk; ++c) keys.to_bf16(c, d0, nd, s.kb + c * kSlabDims);
    const float* b0 = pr.packed + (t0 * pr.S + d0 / kChunkDims) * kBlockFloats;
    for (std::size_t ch = 0; ch < dim_chunks(nd); ++ch) {
      unroll<KT>([&](auto kt) {
        tiles.template load<a_tile(kt)>(s.kb + kt * kTileRows * kSlabDims + ch * kChunkDims, kSlabDims * 2);
      });
      unroll<HN>([&](auto ht) { tiles.template load<b_tile(ht)>(b0 + (ht * pr.S + ch) * kBlockFloats, kRowBytes); });
      unroll<KT>([&](auto kt) {
        unroll<HN>([&](auto ht) { tiles.template dp_bf16<c_tile(kt, ht), a_tile(kt), b_tile(ht)>(); });
      });
    }
  }
  unroll<KT>([&](auto kt) {
    unroll<HN>([&](auto ht) { tiles.template store<c_tile(kt, ht)>(s.cb[c_tile(kt, ht)], kRowBytes); });
  });
  for (std::size_t ht = 0; ht < HN; ++ht) {
    const std::size_t t = t0 + ht;
    const F wv = fload(pr.w + t * kTileHeads);
    const std::size_t valid = t + 1 == pr.HT ? pr.H - t * kTileHeads : kTileHeads;
    const M keep = head_lanes_below(valid);
    for (std::size_t kt = 0; kt < KT; ++kt) {
      const float* c = s.cb[c_tile(kt, ht)];
      for (std::size_t m = 0; m < kTileRows && kt * kTileRows + m < nk; ++m) {
        F x = relu(fload(c + m * kTileHeads));
        if (valid < kTileHeads) x = floats(select(keep, bits(x), isplat(0)));
        F& p = s.part[kt * kTileRows + m];
        p = fmadd(x, wv, p);
      }
    }
  }
}

template <std::size_t KT, class Tiles, class Keys>
void key_block(Tiles& tiles, const Problem& pr, const Keys& keys, std::size_t nk, Scratch& s) {
  for (std::size_t t0 = 0; t0 < pr.HT; t0 += kHeadTiles) {
    if (pr.HT - t0 >= 2) block<KT, 2>(tiles, pr, t0, keys, nk, s);
    else block<KT, 1>(tiles, pr, t0, keys, nk, s);
  }
}

template <class Tiles, class Keys>
void score_keys(const float* packed, std::size_t H, std::size_t D, const Keys& keys, const float* ks, std::size_t n,
                float* out) {
  if (n == 0) return;  // and no tile state touched
  const std::size_t HT = head_tiles(H), S = dim_chunks(D);
  const Problem pr{packed, H, D, HT, S, packed + HT * S * kBlockFloats};
  Scratch s;
  Tiles tiles(&kTileConfig);
  const std::size_t width = round_up_chunk(D < kSlabDims ? D : kSlabDims);  // of the A rows read
  for (std::size_t j = 0; j < n; j += kKeys) {
    const std::size_t nk = n - j < kKeys ? n - j : kKeys;
    const Keys kj = keys.from(j);
    // The next block's rows, one block ahead: they are read from L2 (or L3) otherwise.
    for (std::size_t c = 0; j + kKeys + c < n && c < kKeys; ++c)
      for (std::size_t d = 0; d < D; d += Keys::kLineElems)
        __builtin_prefetch(keys.row(j + kKeys + c) + d, 0, 3);
    // Rows past nk in the last A tile: zeros, so that no stale NaN or inf enters the tile product
    // (their C rows are never read).
    const std::size_t rows = nk > kTileRows ? kKeys : kTileRows;
    for (std::size_t c = nk; c < rows; ++c) std::memset(s.kb + c * kSlabDims, 0, width * sizeof(std::uint16_t));
    if (D <= kSlabDims)
      for (std::size_t c = 0; c < nk; ++c) kj.to_bf16(c, 0, D, s.kb + c * kSlabDims);
    for (std::size_t c = 0; c < nk; ++c) s.part[c] = fzero();
    if (nk > kTileRows) key_block<2>(tiles, pr, kj, nk, s);
    else key_block<1>(tiles, pr, kj, nk, s);
    finish_scores(s.part, nk, ks + j, out + j);
  }
}

template <class Tiles>
void score(const float* packed, std::size_t H, std::size_t D, const float* k, std::size_t ldk, const float* ks,
           std::size_t n, float* out) {
  score_keys<Tiles>(packed, H, D, F32Keys{k, ldk}, ks, n, out);
}

template <class Tiles>
void score_f8(const float* packed, std::size_t H, std::size_t D, const std::uint8_t* const* rows, const float* ks,
              std::size_t n, float* out) {
  score_keys<Tiles>(packed, H, D, Fp8Keys{rows}, ks, n, out);
}

}  // namespace amx_index_score

// `level` names the table: "amx" for the real tiles. Scoring fp8 rows in place always wins: each
// block converts its keys to bf16 anyway, and an f32 decode pass would only add traffic.
template <class Tiles>
constexpr IndexScoreKernels make_index_score_amx_kernels(const char* level) {
  using namespace amx_index_score;
  return IndexScoreKernels{level,
                           static_cast<unsigned>(kTileHeads),
                           static_cast<unsigned>(kHeadTiles),
                           static_cast<unsigned>(kKeys),
                           /*bf16_dot=*/true,
                           &packed_floats,
                           &pack_query,
                           /*decode_pass_rows=*/0,
                           &score<Tiles>,
                           &score_f8<Tiles>};
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
