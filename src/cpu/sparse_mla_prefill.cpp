// cpu back-end of op 4 (sparse MLA prefill).
//
// Work tiles: (query token, group of up to kHeadTile heads), under oneTBB. A tile lists its
// token's valid slots once, then walks them kSlotChunk at a time (FlashAttention style, online
// softmax):
//   gather   the chunk's cache rows once for every head of the tile: K rows in the score tile's
//            compute type (bf16 where the level has vdpbf16ps: bf16 copied, fp8 decoded exactly;
//            else f32), V rows (the first v_depth columns) as f32; an fp8 row's scale kept aside.
//            A row with several scales or a bf16 tail (FlashMLA's V32 / MODEL1 caches) is
//            dequantized instead, code · scale in f32 (one rounding, within the dot bound), and
//            runs in f32 at every level: a bf16 copy of code · scale would round it coarser than
//            the spec allows
//   S        = Q·Kᵀ: in bf16 on the simd dot tiles (Q read in place), or on the amx level on the
//            tile GEMM (TDPBF16PS) as Sᵀ = K·Qᵀ, the gathered bf16 K rows read in place and Q
//            packed once per tile; in f32 as Sᵀ = K·Qᵀ on the panel GEMM, Q packed once per tile
//            as its panels (heads as columns) and the chunk's gathered K rows as its A (one chain
//            per score over qk in order; 1.1-1.2x faster on avx2 than the dot tiles over the same
//            rows); Sᵀ transposed to rows of heads; then scale (· row scale) and the chunk maximum
//            (simd scale_max)
//   softmax  running maximum m and sum l per head; P = exp(S - m) in f32 (simd exp_sum, 2 ulp),
//            the accumulated output rescaled by exp(m_old - m) when m grows
//   O       += P·V on the simd NN tile: where the level has vdpbf16ps, P rounded to bf16 (as the
//            spec allows, and FlashMLA does) against V row pairs zipped from the bf16 K rows (on
//            the amx level the tiles read the zipped pairs in place);
//            elsewhere in f32 (P not rounded) on the panel GEMM, V gathered into column strips
//            as its panels; for an fp8 cache P carries the row scale, so V is the exact codes
// End: out = bf16(O / (l + exp(sink - m))), lse = m + log(l), max_logits = m; a row with no valid
// slot writes 0, lse = +inf and max_logits = -inf; a row whose scores are all -inf (only with infinite inputs) gives NaN, as the
// reference's exp(-inf - (-inf)) does. Each output element depends only on its own head's chain
// and the fixed slot chunks, never on the tiling or the thread count: the same bits for any.
#include "cpu/sparse_mla_prefill.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cpu/common/bf16_dot.hpp"
#include "cpu/common/kernels.hpp"
#include "cpu/common/online_softmax.hpp"
#include "cpu/common/parallel.hpp"
#include "cpu/common/tile_gemm.hpp"
#include "core/shared/cache_rows.hpp"
#include "mlakit/dtype.hpp"

namespace mlakit::cpu {
namespace {

constexpr std::size_t kSlotChunk = 64;  // gathered rows per step: K chunk + V chunk ~200 KiB at qk 576
constexpr std::size_t kHeadTile = 128;  // heads per tile (fewer for short calls, so threads have tiles)

struct Plan {
  const SparseMlaPrefillDesc* d;
  const SparseMlaPrefillArgs* a;
  const simd::GemmKernels* gemm;
  const simd::Fp8DecodeKernels* fp8dec;
  std::size_t T, Hq, qk, vd, stride, head_tile, ldk, ldv;
  std::int64_t page, num_rows;
  bool fp8;
  bool grouped;  // fp8 rows with several scales or a tail: dequantized into f32 rows
  bool tiles;    // the bf16 products on the tile GEMM (amx; MLAKIT_TILE_GEMM=off keeps the dot tiles)
  std::size_t wq, wt, gran;
};

// The valid slots of one query token: element offsets of each row's codes, scales and tail, and
// its one scale (1 for a bf16 cache or a grouped one, whose scales are applied when it is gathered).
struct SlotRows {
  std::int64_t* base;
  std::int64_t* scale_at;
  std::int64_t* tail_at;
  float* rscale;
  static std::size_t bytes(std::size_t n) { return n * (3 * sizeof(std::int64_t) + sizeof(float)); }
  explicit SlotRows(void* mem, std::size_t n)
      : base(static_cast<std::int64_t*>(mem)), scale_at(base + n), tail_at(scale_at + n),
        rscale(reinterpret_cast<float*>(tail_at + n)) {}
};

void bf16_row_to_f32(const std::uint16_t* s, float* d, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
}

// Asks for every cache line of [p, p + bytes) to be fetched.
void prefetch_lines(const void* p, std::size_t bytes) {
  const auto first = reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t{63};
  const auto end = reinterpret_cast<std::uintptr_t>(p) + bytes;
  for (std::uintptr_t a = first; a < end; a += 64) __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 3);
}

// The valid slots of token t, in slot order (duplicates kept). Returns their number.
std::size_t valid_rows(const Plan& p, std::size_t t, SlotRows rows) {
  const SparseMlaPrefillArgs& a = *p.a;
  const PagedKVCacheView& c = a.kv_cache;
  std::size_t len = p.stride;
  if (a.topk_lengths.present()) len = std::min<std::size_t>(len, a.topk_lengths.as<const std::uint32_t>()[t]);
  const auto* idx = static_cast<const std::int32_t*>(a.indices.data) + t * p.stride;  // u32: the same bits
  std::size_t n = 0;
  for (std::size_t s = 0; s < len; ++s) {
    const std::int64_t r = idx[s];
    if (r < 0 || r >= p.num_rows) continue;
    const core::CacheRow at = core::cache_row(c, r / p.page, 0, a.layer_idx, r % p.page, 0);
    rows.base[n] = at.codes;
    rows.scale_at[n] = at.scales;
    rows.tail_at[n] = at.tail;
    rows.rscale[n] = p.fp8 && !p.grouped ? core::cache_scale(c, at.scales) : 1.0f;
    ++n;
  }
  return n;
}

// Row i of the slots, dequantized into f32: codes · their group's scale, then the tail.
void dequantize_row(const Plan& p, const SlotRows& rows, std::size_t i, float* dst) {
  const PagedKVCacheView& c = p.a->kv_cache;
  p.fp8dec->to_f32(c.blocks.as<const std::uint8_t>() + rows.base[i], dst, p.wq);
  for (std::size_t g0 = 0, j = 0; g0 < p.wq; g0 += p.gran, ++j) {
    const float sc = core::cache_scale(c, rows.scale_at[i] + static_cast<std::int64_t>(j));
    const std::size_t g1 = std::min(p.wq, g0 + p.gran);
    for (std::size_t k = g0; k < g1; ++k) dst[k] *= sc;
  }
  if (p.wt > 0) bf16_row_to_f32(c.tail.as<const std::uint16_t>() + rows.tail_at[i], dst + p.wq, p.wt);
}

template <class CT>
void run_tile(const Plan& p, std::size_t t, std::size_t h0, std::size_t hn) {
  const SparseMlaPrefillArgs& a = *p.a;
  const simd::GemmKernels& g = *p.gemm;
  const std::size_t qk = p.qk, vd = p.vd, ldk = p.ldk, ldv = p.ldv;
  constexpr bool kBf16 = std::is_same_v<CT, std::uint16_t>;

  const SlotRows rows(thread_scratch(SlotRows::bytes(p.stride), 0), p.stride);
  const std::int64_t* base = rows.base;
  const float* rscale = rows.rscale;
  const std::size_t n = valid_rows(p, t, rows);

  auto* out = a.output.as<std::uint16_t>() + (t * p.Hq + h0) * vd;
  float* lse = a.lse.present() ? a.lse.as<float>() + t * p.Hq + h0 : nullptr;
  float* max_logits = a.max_logits.present() ? a.max_logits.as<float>() + t * p.Hq + h0 : nullptr;
  if (n == 0) {
    std::memset(out, 0, hn * vd * sizeof(std::uint16_t));
    for (std::size_t h = 0; h < hn; ++h) {
      if (lse) lse[h] = std::numeric_limits<float>::infinity();
      if (max_logits) max_logits[h] = -std::numeric_limits<float>::infinity();
    }
    return;
  }

  // Scratch: K chunk, then (bf16) the zipped V rows and P; S, O, m and l.
  const std::size_t k_bytes = round_up(kSlotChunk * ldk * sizeof(CT), 64);
  const std::size_t vz_words = round_up(kSlotChunk * ldv, 32);  // kSlotChunk / 2 pairs of rows, 2 ldv words each
  const std::size_t extra_bytes = kBf16 ? (vz_words + round_up(hn * kSlotChunk, 32)) * sizeof(std::uint16_t) : 0;
  auto* kbuf = static_cast<CT*>(thread_scratch(k_bytes + extra_bytes, 1));
  auto* vz = reinterpret_cast<std::uint16_t*>(reinterpret_cast<unsigned char*>(kbuf) + k_bytes);
  std::uint16_t* pbuf = vz + vz_words;
  const std::size_t s_floats = round_up(hn * kSlotChunk, 16);
  auto* sbuf = static_cast<float*>(thread_scratch((s_floats + hn * ldv + 2 * hn) * sizeof(float), 2));
  float* obuf = sbuf + s_floats;
  float* m = obuf + hn * ldv;
  float* l = m + hn;

  const auto* q = a.q.as<const std::uint16_t>() + (t * p.Hq + h0) * qk;
  const std::size_t ldq = qk;
  // f32: Q packed once as panels of the panel GEMM (the heads are its columns), which computes
  // Sᵀ = K·Qᵀ chunk by chunk over K rows as they were gathered; V is gathered into column strips,
  // the panels of P·V. Both products keep one chain per output over k in order.
  const std::size_t P = g.panel_cols;
  const std::size_t hp = round_up(hn, P), vstrips = num_tiles(vd, P);
  float *qpanels = nullptr, *st = nullptr, *vs = nullptr;
  if constexpr (!kBf16) {
    auto* f = static_cast<float*>(
        thread_scratch((hp * qk + kSlotChunk * hp + vstrips * kSlotChunk * P) * sizeof(float), 3));
    qpanels = f;
    st = qpanels + hp * qk;
    vs = st + kSlotChunk * hp;
    for (std::size_t h = 0; h < hn; h += P) g.pack_panel_bf16(q + h * ldq, ldq, std::min(P, hn - h), qk, qpanels + h * qk);
  }
  // Tiles (amx): Q packed once into the tile unit's pair layout (heads as its columns), so that
  // Sᵀ = K·Qᵀ reads the gathered K rows in place as the tiles' A, then is transposed to rows of
  // heads; P·V reads the zipped V row pairs in place as the tiles' B.
  std::uint16_t* qtiles = nullptr;
  float* stt = nullptr;
  std::size_t ldqt = 0;
  if constexpr (kBf16) {
    if (p.tiles) {
      ldqt = 16 * simd::tile_pack_k(qk);
      const std::size_t words = round_up(num_tiles(hn, 16) * ldqt, 32);
      qtiles = static_cast<std::uint16_t*>(thread_scratch(words * sizeof(std::uint16_t) + kSlotChunk * hn * sizeof(float), 3));
      stt = reinterpret_cast<float*>(qtiles + words);
      g.pack_tiles_bf16(q, ldq, hn, qk, qtiles, ldqt);
    }
  }
  std::fill(obuf, obuf + hn * ldv, 0.0f);
  std::fill(m, m + hn, -std::numeric_limits<float>::infinity());
  std::fill(l, l + hn, 0.0f);

  const auto* blocks8 = a.kv_cache.blocks.as<const std::uint8_t>();
  const auto* blocks16 = a.kv_cache.blocks.as<const std::uint16_t>();
  const float scale = p.d->scale;
  const std::size_t row_bytes = p.wq * (p.fp8 ? 1 : 2);
  for (std::size_t c0 = 0; c0 < n; c0 += kSlotChunk) {
    const std::size_t cnt = std::min(kSlotChunk, n - c0);
    for (std::size_t i = 0; i < cnt; ++i) {
      // The next chunk's row i is fetched while this chunk is multiplied: rows are scattered over
      // the cache, so no hardware prefetcher sees them coming.
      if (const std::size_t j = c0 + kSlotChunk + i; j < n) {
        prefetch_lines(p.fp8 ? static_cast<const void*>(blocks8 + base[j]) : static_cast<const void*>(blocks16 + base[j]),
                       row_bytes);
        if (p.grouped) {  // a split row's scales and tail live apart from its codes (MODEL1) or after them
          prefetch_lines(static_cast<const char*>(a.kv_cache.scales.data) +
                             rows.scale_at[j] * static_cast<std::int64_t>(dtype_size(a.kv_cache.scales.dtype)),
                         1);
          if (p.wt > 0) prefetch_lines(a.kv_cache.tail.as<const std::uint16_t>() + rows.tail_at[j], p.wt * 2);
        }
      }
      const std::int64_t b = base[c0 + i];
      CT* kr = kbuf + i * ldk;
      if constexpr (kBf16) {  // V: zipped from these rows below
        if (p.fp8) p.fp8dec->to_bf16(blocks8 + b, kr, qk);
        else std::memcpy(kr, blocks16 + b, qk * sizeof(std::uint16_t));
      } else {
        // f32: the row widened (or decoded, or dequantized) once; V is its first v_depth columns.
        if (p.grouped) dequantize_row(p, rows, c0 + i, kr);
        else if (p.fp8) p.fp8dec->to_f32(blocks8 + b, kr, qk);
        else g.widen_bf16(blocks16 + b, kr, qk);
      }
      if constexpr (!kBf16)
        for (std::size_t e0 = 0; e0 < vd; e0 += P)
          std::memcpy(vs + (e0 / P * kSlotChunk + i) * P, kr + e0, std::min(P, vd - e0) * sizeof(float));
    }
    // Sᵀ (cnt rows of lds scores) where a product computes it, transposed into S below.
    const float* s_t = nullptr;
    std::size_t lds = 0;
    if constexpr (kBf16) {
      if (qtiles) {
        g.gemm_tiles(cnt, hn, qk, kbuf, ldk, qtiles, ldqt, 32, nullptr, stt, hn, false);
        s_t = stt;
        lds = hn;
      } else {
        g.bf16_bf16(hn, cnt, qk, q, ldq, kbuf, ldk, sbuf, kSlotChunk, false);
      }
    } else {
      for (std::size_t h = 0; h < hn; h += P)
        g.gemm_panel(cnt, std::min(P, hn - h), qk, kbuf, ldk, qpanels + h * qk, st + h, hp, false);
      s_t = st;
      lds = hp;
    }
    if (s_t) g.transpose_f32(s_t, lds, cnt, hn, sbuf, kSlotChunk);

    for (std::size_t h = 0; h < hn; ++h) {
      float* s = sbuf + h * kSlotChunk;
      const float* rs = p.fp8 && !p.grouped ? rscale + c0 : nullptr;
      online_softmax_step(g, s, rs, scale, cnt, m[h], l[h], obuf + h * ldv, vd);
      if constexpr (kBf16) {
        g.to_bf16_scaled(s, rs, pbuf + h * kSlotChunk, cnt);
      } else if (rs) {
        for (std::size_t i = 0; i < cnt; ++i) s[i] *= rscale[c0 + i];
      }
    }
    if constexpr (kBf16) {
      for (std::size_t i = 0; i < cnt; i += 2)
        g.zip_rows_bf16(kbuf + i * ldk, i + 1 < cnt ? kbuf + (i + 1) * ldk : nullptr, vd, vz + i * ldv);
      if (qtiles) {
        // The tiles read whole steps of 16 row pairs: the pairs past the chunk's rows are zeroed
        // (P is read as zero there, but stale rows could hold infinities).
        const std::size_t pairs = (cnt + 1) / 2, padded = simd::tile_pack_k(cnt) / 2;
        std::memset(vz + pairs * 2 * ldv, 0, (padded - pairs) * 2 * ldv * sizeof(std::uint16_t));
        g.gemm_tiles(hn, vd, cnt, pbuf, kSlotChunk, vz, 32, 2 * ldv, nullptr, obuf, ldv, true);
      } else {
        g.bf16_nn(hn, vd, cnt, pbuf, kSlotChunk, vz, 2 * ldv, obuf, ldv, true);
      }
    } else {
      for (std::size_t e0 = 0; e0 < vd; e0 += P)
        g.gemm_panel(hn, std::min(P, vd - e0), cnt, sbuf, kSlotChunk, vs + e0 / P * kSlotChunk * P, obuf + e0, ldv, true);
    }
  }

  const float* sink = a.attn_sink.present() ? a.attn_sink.as<const float>() + h0 : nullptr;
  for (std::size_t h = 0; h < hn; ++h) {
    std::uint16_t* o = out + h * vd;
    const float mh = m[h];
    if (max_logits) max_logits[h] = mh;
    if (mh == -std::numeric_limits<float>::infinity()) {
      for (std::size_t j = 0; j < vd; ++j) o[j] = f32_to_bf16(std::numeric_limits<float>::quiet_NaN());
      if (lse) lse[h] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const float den = l[h] + (sink ? std::exp(sink[h] - mh) : 0.0f);
    const float* acc = obuf + h * ldv;
    for (std::size_t j = 0; j < vd; ++j) o[j] = f32_to_bf16(acc[j] / den);
    if (lse) lse[h] = mh + std::log(l[h]);
  }
}

}  // namespace

Status sparse_mla_prefill(const SparseMlaPrefillDesc& d, const SparseMlaPrefillArgs& a) {
  Plan p{};
  p.d = &d;
  p.a = &a;
  p.gemm = &gemm_kernels();
  p.fp8dec = &fp8_decode_kernels();
  p.T = static_cast<std::size_t>(a.q.shape[0]);
  p.Hq = static_cast<std::size_t>(d.num_q_heads);
  p.qk = static_cast<std::size_t>(d.qk_depth);
  p.vd = static_cast<std::size_t>(d.v_depth);
  p.stride = static_cast<std::size_t>(d.indices_stride);
  p.page = a.kv_cache.page_size();
  p.num_rows = a.kv_cache.num_blocks() * p.page;
  p.fp8 = a.kv_cache.blocks.dtype == DType::f8e4m3;
  p.wq = static_cast<std::size_t>(a.kv_cache.quantized_size());
  p.wt = static_cast<std::size_t>(a.kv_cache.tail_size());
  p.gran = p.fp8 ? static_cast<std::size_t>(a.kv_cache.quant_granularity) : p.wq;
  p.grouped = p.fp8 && (p.wt > 0 || p.gran < p.wq);
  p.tiles = tile_gemm::use_for(p.gemm->gemm_tiles != nullptr, 1, 1);
  p.ldk = round_up(p.qk, 32);  // 64-byte rows in bf16, 128-byte in f32
  p.ldv = round_up(p.vd, 16);
  if (p.T == 0 || p.Hq == 0) return Status::success();
  // Short calls get smaller head groups so that every thread has tiles; the bits do not depend on it.
  const std::size_t want_tiles = 4 * static_cast<std::size_t>(num_threads());
  p.head_tile = std::min(kHeadTile, p.Hq);
  while (p.head_tile > 16 && p.T * ((p.Hq + p.head_tile - 1) / p.head_tile) < want_tiles) p.head_tile /= 2;
  const std::size_t groups = (p.Hq + p.head_tile - 1) / p.head_tile;
  // bf16 rows on the tiles (amx), or on the pair dot where it outruns the f32 paths here.
  const bool bf16 = (p.tiles || bf16_dot::use(*p.gemm)) && !p.grouped;
  parallel_for_tiles(p.T * groups, 1, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      const std::size_t t = i / groups, h0 = (i % groups) * p.head_tile;
      const std::size_t hn = std::min(p.head_tile, p.Hq - h0);
      if (bf16) run_tile<std::uint16_t>(p, t, h0, hn);
      else run_tile<float>(p, t, h0, hn);
    }
  });
  return Status::success();
}

}  // namespace mlakit::cpu
