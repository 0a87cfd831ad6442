// The lightning-indexer score tiles on AMX: the per-head dots as TDPBF16PS tile products, the
// epilogue (ReLU x weight x head sum) in AVX-512 registers. Written once against a tile-operations
// policy (simd/vec/amx_tiles.hpp): simd/amx/index_score.cpp instantiates it over the real
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

#include "simd/vec/amx_tiles.hpp"
#include "simd/vec/fp8_bf16_vbmi.hpp"
#include "simd/templates/fp8_decode_impl.hpp"
#include "simd/templates/index_score_epilogue.hpp"
#include "simd/index_score.hpp"

#if !defined(MLAKIT_SIMD_HAS_BF16_DOT)
#error "simd/templates/index_score_amx_impl.hpp needs the avx512bf16 vector wrappers (levels avx512bf16 and amx)"
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

// r[i] lane j -> r[j] lane i, for 16 x 16 dwords: pairs, then quads, then 128-bit lanes.
inline void transpose_16x16_dwords(__m512i r[16]) {
  __m512i t[16], u[16];
  for (std::size_t i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[4i + k], 128-bit lane L: rows 4i .. 4i+3 of column 4L + k.
  for (std::size_t i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (std::size_t k = 0; k < 4; ++k) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x88), v1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xDD);
    const __m512i w0 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x88), w1 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xDD);
    r[k] = _mm512_shuffle_i32x4(v0, w0, 0x88);
    r[4 + k] = _mm512_shuffle_i32x4(v1, w1, 0x88);
    r[8 + k] = _mm512_shuffle_i32x4(v0, w0, 0xDD);
    r[12 + k] = _mm512_shuffle_i32x4(v1, w1, 0xDD);
  }
}

// Per B tile: the 16 heads' 32 codes of the chunk decoded to bf16 (one register of 16 pair words
// per head), then transposed so that each register holds one pair row of the tile. Once per query
// and work item, so it has to cost little beside the scoring (a scalar scatter of the halves cost
// a tenth of a prefill call).
void pack_query(const std::uint8_t* q, const float* w, std::size_t H, std::size_t D, float* packed) {
  const std::size_t HT = head_tiles(H), S = dim_chunks(D);
  for (std::size_t t = 0; t < HT; ++t) {
    for (std::size_t ch = 0; ch < S; ++ch) {
      const std::size_t d0 = ch * kChunkDims, nd = D - d0 < kChunkDims ? D - d0 : kChunkDims;
      const __mmask32 m = mask32_of(nd);
      __m512i r[kTileHeads];
      for (std::size_t n = 0; n < kTileHeads; ++n) {
        const std::size_t h = t * kTileHeads + n;
        __m512i w1;
        if (h < H)  // codes past D load as 0, which decodes to +0
          fp8x64_to_bf16(_mm512_zextsi256_si512(_mm256_maskz_loadu_epi8(m, q + h * D + d0)), &r[n], &w1);
        else
          r[n] = _mm512_setzero_si512();
      }
      transpose_16x16_dwords(r);
      float* b = packed + (t * S + ch) * kBlockFloats;
      for (std::size_t p = 0; p < kTileRows; ++p) _mm512_storeu_si512(b + p * kTileHeads, r[p]);
    }
  }
  float* wt = packed + HT * S * kBlockFloats;
  for (std::size_t h = 0; h < HT * kTileHeads; ++h) wt[h] = h < H ? w[h] : 0.0f;
}
// The decode entries come with the shared decode header; the conversions here use the byte tables.
[[maybe_unused]] constexpr auto kUnusedFp8ToF32 = &fp8_to_f32;
[[maybe_unused]] constexpr auto kUnusedFp8ToBf16 = &fp8_to_bf16;

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

// Queries r < rows (packed at packed + r * stride) against keys j < n[r] of the same key list:
// where D fits one slab, each block of keys is converted once for every query that sees it (wider
// keys are converted slab by slab inside block(), per query). A query's scores are those one query
// alone gets (the same tile products and fold, key by key).
template <class Tiles, class Keys>
void score_keys(const float* packed, std::size_t stride, std::size_t rows, std::size_t H, std::size_t D,
                const Keys& keys, const float* ks, const std::size_t* n, float* const* out) {
  std::size_t n_max = 0;
  for (std::size_t r = 0; r < rows; ++r) n_max = n[r] > n_max ? n[r] : n_max;
  if (n_max == 0) return;  // and no tile state touched
  const std::size_t HT = head_tiles(H), S = dim_chunks(D);
  Scratch s;
  Tiles tiles(&kTileConfig);
  const std::size_t width = round_up_chunk(D < kSlabDims ? D : kSlabDims);  // of the A rows read
  for (std::size_t j = 0; j < n_max; j += kKeys) {
    const std::size_t nk = n_max - j < kKeys ? n_max - j : kKeys;
    const Keys kj = keys.from(j);
    // The next block's rows, one block ahead: they are read from L2 (or L3) otherwise.
    for (std::size_t c = 0; j + kKeys + c < n_max && c < kKeys; ++c)
      for (std::size_t d = 0; d < D; d += Keys::kLineElems)
        __builtin_prefetch(keys.row(j + kKeys + c) + d, 0, 3);
    // Rows past nk in the last A tile: zeros, so that no stale NaN or inf enters the tile product
    // (their C rows are never read).
    const std::size_t tile_rows = nk > kTileRows ? kKeys : kTileRows;
    for (std::size_t c = nk; c < tile_rows; ++c) std::memset(s.kb + c * kSlabDims, 0, width * sizeof(std::uint16_t));
    if (D <= kSlabDims)
      for (std::size_t c = 0; c < nk; ++c) kj.to_bf16(c, 0, D, s.kb + c * kSlabDims);
    for (std::size_t r = 0; r < rows; ++r) {
      if (n[r] <= j) continue;
      const std::size_t m = n[r] - j < nk ? n[r] - j : nk;
      const float* q = packed + r * stride;
      const Problem pr{q, H, D, HT, S, q + HT * S * kBlockFloats};
      for (std::size_t c = 0; c < m; ++c) s.part[c] = fzero();
      if (m > kTileRows) key_block<2>(tiles, pr, kj, m, s);
      else key_block<1>(tiles, pr, kj, m, s);
      finish_scores(s.part, m, ks + j, out[r] + j);
    }
  }
}

template <class Tiles>
void score(const float* packed, std::size_t H, std::size_t D, const float* k, std::size_t ldk, const float* ks,
           std::size_t n, float* out) {
  score_keys<Tiles>(packed, 0, 1, H, D, F32Keys{k, ldk}, ks, &n, &out);
}

template <class Tiles>
void score_f8(const float* packed, std::size_t H, std::size_t D, const std::uint8_t* const* rows, const float* ks,
              std::size_t n, float* out) {
  score_keys<Tiles>(packed, 0, 1, H, D, Fp8Keys{rows}, ks, &n, &out);
}

template <class Tiles>
void score_f8_queries(const float* packed, std::size_t stride, std::size_t queries, std::size_t H, std::size_t D,
                      const std::uint8_t* const* rows, const float* ks, const std::size_t* n, float* const* out) {
  score_keys<Tiles>(packed, stride, queries, H, D, Fp8Keys{rows}, ks, n, out);
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
                           &score_f8<Tiles>,
                           &score_f8_queries<Tiles>};
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
