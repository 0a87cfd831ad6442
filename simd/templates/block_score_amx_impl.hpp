// The block-max score kernels on AMX: the query-key dots as TDPBF16PS tile products, the scale and
// the max fold in AVX-512 registers. Written once against a tile-operations policy
// (simd/vec/amx_tiles.hpp): simd/amx/block_score.cpp instantiates it over the real
// instructions, the tests over an emulation of them. See simd/block_score.hpp for the contract.
//
// Tiles (every one 16 rows x 64 bytes), for a pass over 32 keys x 32 query rows:
//   A (tmm4, tmm5)   16 keys x 32 dims, bf16: two key tiles. A tile row is a key row as it lies in
//                    the page, so bf16 keys of a dim that is a multiple of 32 are loaded in place
//                    (stride ldk); other bf16 keys, fp8 keys (byte-table decode, exact) and a last
//                    tile of fewer than 16 keys go through an L1 buffer, zero-padded.
//   B (tmm6, tmm7)   16 dim pairs x 16 query rows x 2 bf16: two groups of the packed query. A
//                    group's packed steps (one pair per row, rows in lanes) are already the pair
//                    layout TDPBF16PS reads, 64 bytes a step; pack_q pads each group to whole
//                    tiles of 16 steps so that the last dim chunk reads zeros.
//   C (tmm0..tmm3)   16 keys x 16 rows f32: C[kt][gt] += A[kt] . B[gt], over the dims 32 at a time.
// Keys in the tile rows and query rows in the columns make a stored C tile row one vector of the
// 16 rows of a group for one key: the per-row maximum over the keys is the vertical max of the
// other levels, with the same order keys and the same per-row limit mask; keys that every row of
// the group sees under a positive finite scale take a plain max of the unscaled dots, scaled once.
//
// Every call runs on the tiles, a decode token's few rows too: one TDPBF16PS is 16 x 16 x 32
// multiply-adds, so even a tile with half its columns empty out-runs the avx512bf16 level's
// two-keys-per-vector path several times, and one arithmetic for every call keeps a row's
// scores the same in a decode call and in a prefill call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "simd/block_score.hpp"
#include "simd/vec/amx_tiles.hpp"
#include "simd/templates/block_max_keys.hpp"
#include "simd/vec/scratch.hpp"
#include "simd/vec/fp8_bf16_vbmi.hpp"
#include "simd/templates/fp8_decode_impl.hpp"

#if !defined(MLAKIT_SIMD_HAS_BF16_DOT)
#error "simd/templates/block_score_amx_impl.hpp needs the avx512bf16 vector wrappers (levels avx512bf16 and amx)"
#endif

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {
namespace amx_block_score {

static_assert(kLanes == 16, "a C tile row of 16 f32 is one vector of a group's rows");

// kTileRows (amx_tiles.hpp) is also the rows of a group: B tiles hold groups, A tiles keys.
constexpr std::size_t kKeyTiles = kATiles, kGroupTiles = kBTiles;
constexpr std::size_t kTileFloats = kTileRows * kTileRows;  // one C tile
constexpr std::size_t kGroupStepBytes = kLanes * 4;         // one packed step of a group: 16 pairs

inline std::size_t groups_of(std::size_t rows) { return (rows + kLanes - 1) / kLanes; }
inline std::size_t dim_chunks(std::size_t dim) { return (dim + kChunkDims - 1) / kChunkDims; }
inline std::size_t group_bytes(std::size_t dim) { return dim_chunks(dim) * kTileRows * kGroupStepBytes; }

// ---- packed queries and scratch --------------------------------------------------------------------
std::size_t packed_q_bytes(std::size_t rows, std::size_t dim) {
  return groups_of(rows) * group_bytes(dim);
}

// Group g at g * group_bytes(dim); in it, step s (the pair 2s, 2s+1) at s * 64 bytes, row g*16 + l
// at 4l bytes, element 2s in the low half. Rows past `rows`, dims past `dim` and the steps that
// pad the group to whole tiles are 0.
void pack_q(const std::uint16_t* q, std::size_t rows, std::size_t dim, std::size_t ldq, void* packed) {
  auto* bytes = static_cast<unsigned char*>(packed);
  const std::size_t gb = group_bytes(dim);
  std::memset(bytes, 0, groups_of(rows) * gb);
  for (std::size_t r = 0; r < rows; ++r) {
    unsigned char* g = bytes + (r / kLanes) * gb + (r % kLanes) * 4;
    for (std::size_t d = 0; d < dim; ++d) std::memcpy(g + (d / 2) * kGroupStepBytes + 2 * (d % 2), &q[r * ldq + d], 2);
  }
}

struct Layout {
  std::size_t ld;  // bf16 elements per buffered key row: whole dim chunks
  std::size_t best_at, limits_at, gmin_at, gmax_at, c_at, kb_at, total;  // byte offsets from the aligned base
};

inline Layout layout_of(std::size_t groups, std::size_t dim) {
  Layout L{};
  L.ld = dim_chunks(dim) * kChunkDims;
  const LimitArrays a = limit_arrays(groups);
  L.best_at = a.best_at;
  L.limits_at = a.limits_at;
  L.gmin_at = a.gmin_at;
  L.gmax_at = a.gmax_at;
  L.c_at = a.end;
  L.kb_at = L.c_at + kKeyTiles * kGroupTiles * kTileFloats * sizeof(float);
  L.total = L.kb_at + kKeys * L.ld * sizeof(std::uint16_t);
  return L;
}

std::size_t scratch_bytes(std::size_t rows, std::size_t dim) {
  return layout_of(groups_of(rows), dim).total + 64;
}

// ---- key rows in the A tile layout -------------------------------------------------------------------
inline void to_bf16_row(const std::uint16_t* s, std::uint16_t* d, std::size_t dim) {
  std::memcpy(d, s, dim * sizeof(std::uint16_t));
}
inline void to_bf16_row(const std::uint8_t* s, std::uint16_t* d, std::size_t dim) { fp8_to_bf16_vbmi(s, d, dim); }
// Only the VBMI decode is used here; the scalar-table ones come with the shared decode header.
[[maybe_unused]] constexpr auto kUnusedFp8ToBf16 = &fp8_to_bf16;
[[maybe_unused]] constexpr auto kUnusedFp8ToF32 = &fp8_to_f32;

// Where A tile kt of a key pass reads: a key row every `stride` bytes from `at`.
struct KeyTile {
  const std::uint16_t* at;
  std::size_t stride;
  std::size_t count;  // keys of the tile (its C rows that are folded)
};

struct Call {
  std::size_t dim, chunks, gbytes;
  const unsigned char* qt;
  const std::int32_t* limits;
  const std::int32_t* gmin;
  const std::int32_t* gmax;
  std::int32_t* best;
  float* cb;
  F scale;
  bool scale_keeps_order;  // 0 < scale < inf: round(scale * x) never decreases as x grows
};

// The next block's lines (next_k), prefetched a few at a time after every A tile load and every
// chunk's products: a decode token's sweep waits on memory, not on the tiles, and the rate at
// which a core's misses drain is what it gets. Spread this way the misses keep pace with the key
// rows the tiles consume; issued in one burst per pass they queue ahead of the tile loads, which
// then wait for free miss slots (bench/RESULTS.md, op 2 decode on the AMX host).
struct NextBlockPrefetch {
  const char* at = nullptr;
  const char* end = nullptr;
  std::size_t per_step = 0;
  void step() {
    for (std::size_t u = 0; u < per_step && at < end; ++u, at += 64) __builtin_prefetch(at, 0, 2);
  }
  // Whatever the steps left (passes skipped for groups that see no key): every line is asked for.
  void rest() {
    for (; at < end; at += 64) __builtin_prefetch(at, 0, 2);
  }
};

// KT key tiles x GN groups (g, g + 1) over every dim chunk, then the fold of the C tiles into the
// groups' running maxima. Key j0 + 16 kt + m is the C row m of key tile kt.
template <std::size_t KT, std::size_t GN, class Tiles>
void pass(Tiles& tiles, const Call& c, const KeyTile (&kt_of)[kKeyTiles], std::size_t j0, std::size_t g,
          NextBlockPrefetch& pf) {
  unroll<KT>([&](auto kt) { unroll<GN>([&](auto gt) { tiles.template zero<c_tile(kt, gt)>(); }); });
  const unsigned char* q0 = c.qt + g * c.gbytes;
  for (std::size_t ch = 0; ch < c.chunks; ++ch) {
    unroll<KT>([&](auto kt) {
      tiles.template load<a_tile(kt)>(kt_of[kt].at + ch * kChunkDims, kt_of[kt].stride);
      pf.step();
    });
    unroll<GN>([&](auto gt) {
      tiles.template load<b_tile(gt)>(q0 + gt * c.gbytes + ch * kTileRows * kGroupStepBytes, kRowBytes);
    });
    unroll<KT>([&](auto kt) {
      unroll<GN>([&](auto gt) { tiles.template dp_bf16<c_tile(kt, gt), a_tile(kt), b_tile(gt)>(); });
    });
    pf.step();
  }
  unroll<KT>([&](auto kt) {
    unroll<GN>([&](auto gt) { tiles.template store<c_tile(kt, gt)>(c.cb + c_tile(kt, gt) * kTileFloats, kRowBytes); });
  });
  for (std::size_t gt = 0; gt < GN; ++gt) {
    const std::size_t gg = g + gt;
    const I lim = iload(c.limits + gg * kLanes);
    I m = iload(c.best + gg * kLanes);
    // Keys below every limit of the group take the unmasked fold.
    const bool masked = static_cast<std::int64_t>(j0 + KT * kTileRows) > c.gmin[gg];
    // fn(dots of the group's rows with key j0 + i, i) for every key of the pass.
    const auto each_key = [&](auto&& fn) {
      for (std::size_t kt = 0; kt < KT; ++kt) {
        const float* ct = c.cb + c_tile(kt, gt) * kTileFloats;
        for (std::size_t r = 0; r < kt_of[kt].count; ++r) fn(fload(ct + r * kLanes), kt * kTileRows + r);
      }
    };
    if (!masked && c.scale_keeps_order) {
      // The largest score is then the scaled largest dot, bit for bit: one max and one NaN test
      // per key, one scaling per pass. The NaN mask is what keeps a NaN dot: vmaxps returns its
      // second operand when either is NaN, so a NaN in mx is dropped by the next key.
      F mx = fsplat(-std::numeric_limits<float>::infinity());
      M nan{0};
      each_key([&](F x, std::size_t) {
        nan = nan | is_nan(x);
        mx = fmax(mx, x);
      });
      m = imax(m, select(nan, isplat(kNanKey), order_key(mx * c.scale)));
    } else {
      each_key([&](F x, std::size_t i) {
        I key = order_key(x * c.scale);
        if (masked) key = select(cmpgt(lim, isplat(static_cast<std::int32_t>(j0 + i))), key, isplat(kNoKey));
        m = imax(m, key);
      });
    }
    istore(c.best + gg * kLanes, m);
  }
}

template <std::size_t KT, class Tiles>
void key_pass(Tiles& tiles, const Call& c, const KeyTile (&kt_of)[kKeyTiles], std::size_t j0, std::size_t groups,
              NextBlockPrefetch& pf) {
  for (std::size_t g = 0; g < groups; g += kGroupTiles) {
    const std::size_t gn = groups - g < kGroupTiles ? groups - g : kGroupTiles;
    std::int32_t hi = c.gmax[g];
    if (gn == 2 && c.gmax[g + 1] > hi) hi = c.gmax[g + 1];
    if (static_cast<std::int64_t>(j0) >= hi) continue;  // no row of these groups sees these keys
    if (gn == 2 && static_cast<std::int64_t>(j0) < c.gmax[g] && static_cast<std::int64_t>(j0) < c.gmax[g + 1])
      pass<KT, 2>(tiles, c, kt_of, j0, g, pf);
    else if (gn == 2 && static_cast<std::int64_t>(j0) >= c.gmax[g])
      pass<KT, 1>(tiles, c, kt_of, j0, g + 1, pf);
    else
      pass<KT, 1>(tiles, c, kt_of, j0, g, pf);
  }
}

// Keys [0, hi) of the call (hi > 0), 32 at a time.
template <class Tiles, class TK>
void sweep(const Call& c, std::size_t groups, const TK* k, std::size_t ldk, std::size_t hi, std::uint16_t* kb,
           std::size_t ld, const TK* next_k, std::size_t next_n) {
  NextBlockPrefetch pf;
  if (next_k && next_n) {
    // The steps of a sweep whose passes all run (a pass of KT key tiles has KT + 1 per chunk).
    const std::size_t steps =
        (hi + kKeys - 1) / kKeys * c.chunks * (kKeyTiles + 1) * ((groups + kGroupTiles - 1) / kGroupTiles);
    pf.at = reinterpret_cast<const char*>(next_k);
    pf.end = reinterpret_cast<const char*>(next_k + (next_n - 1) * ldk + c.dim);
    pf.per_step = (static_cast<std::size_t>(pf.end - pf.at) / 64 + 1 + steps - 1) / steps;
  }
  Tiles tiles(&kTileConfig);
  for (std::size_t j0 = 0; j0 < hi; j0 += kKeys) {
    const std::size_t nk = hi - j0 < kKeys ? hi - j0 : kKeys;
    KeyTile kt_of[kKeyTiles];
    for (std::size_t kt = 0; kt < kKeyTiles; ++kt) {
      const std::size_t first = kt * kTileRows;
      const std::size_t count = nk > first ? (nk - first < kTileRows ? nk - first : kTileRows) : 0;
      const TK* src = k + (j0 + first) * ldk;
      if constexpr (sizeof(TK) == 2) {
        // In place: every tile row is a whole key row of whole chunks, and 16 rows exist.
        if (count == kTileRows && c.dim % kChunkDims == 0) {
          kt_of[kt] = {reinterpret_cast<const std::uint16_t*>(src), ldk * sizeof(std::uint16_t), count};
          continue;
        }
      }
      std::uint16_t* dst = kb + first * ld;
      if (count > 0) {
        for (std::size_t r = 0; r < count; ++r) to_bf16_row(src + r * ldk, dst + r * ld, c.dim);
        if (ld > c.dim)  // a dim that is not whole chunks: the rest of each row's last chunk is 0
          for (std::size_t r = 0; r < count; ++r)
            std::memset(dst + r * ld + c.dim, 0, (ld - c.dim) * sizeof(std::uint16_t));
        // Rows past the last key: zeros, so that no stale NaN or inf reaches a C row (never folded).
        std::memset(dst + count * ld, 0, (kTileRows - count) * ld * sizeof(std::uint16_t));
      }
      kt_of[kt] = {dst, ld * sizeof(std::uint16_t), count};
    }
    if (nk > kTileRows) key_pass<2>(tiles, c, kt_of, j0, groups, pf);
    else key_pass<1>(tiles, c, kt_of, j0, groups, pf);
  }
  pf.rest();
}

template <class Tiles, class TK>
void block_max(std::size_t rows, std::size_t dim, const void* packed, const TK* k, std::size_t ldk, std::size_t n,
               const std::int32_t* limit, float scale, float* out, void* scratch, const TK* next_k,
               std::size_t next_n) {
  if (rows == 0) return;
  const std::size_t groups = groups_of(rows);
  const Layout L = layout_of(groups, dim);
  auto* base = cache_line_start(scratch);
  auto* best = reinterpret_cast<std::int32_t*>(base + L.best_at);
  auto* limits = reinterpret_cast<std::int32_t*>(base + L.limits_at);
  auto* gmin = reinterpret_cast<std::int32_t*>(base + L.gmin_at);
  auto* gmax = reinterpret_cast<std::int32_t*>(base + L.gmax_at);

  const std::int32_t all_hi = clamp_limits(limit, n, groups, limits, best, gmin, gmax);
  if (all_hi > 0) {  // else no key is converted and no tile state touched
    const Call c{dim, dim_chunks(dim), group_bytes(dim), static_cast<const unsigned char*>(packed), limits, gmin, gmax,
                 best, reinterpret_cast<float*>(base + L.c_at), fsplat(scale),
                 scale > 0.0f && scale < std::numeric_limits<float>::infinity()};
    sweep<Tiles, TK>(c, groups, k, ldk, static_cast<std::size_t>(all_hi),
                     reinterpret_cast<std::uint16_t*>(base + L.kb_at), L.ld, next_k, next_n);
  }
  for (std::size_t g = 0; g < groups; ++g) fstore(out + g * kLanes, key_value(iload(best + g * kLanes)));
}

}  // namespace amx_block_score

// `level` names the table: "amx" for the real tiles.
template <class Tiles>
constexpr BlockScoreKernels make_block_score_amx_kernels(const char* level) {
  using namespace amx_block_score;
  return BlockScoreKernels{level,
                           static_cast<unsigned>(kLanes),
                           &packed_q_bytes,
                           &pack_q,
                           &scratch_bytes,
                           &block_max<Tiles, std::uint16_t>,
                           &block_max<Tiles, std::uint8_t>,
                           static_cast<unsigned>(kGroupTiles),
                           static_cast<unsigned>(kKeys),
                           /*pair_rows=*/0u,
                           /*bf16_dot=*/true};
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
