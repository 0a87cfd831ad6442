// cpu back-end of op 3 (MLA prefill branch, FP8).
//
// Steps 1-2 (RoPE on q and the new cache rows, RMSNorm of their latent parts) run the simd
// rope_norm kernels, one task per tile of new tokens (a token's q rows and cache row are its own:
// the validator rejects two tokens writing one cache row). The kernels compute the reference's f64
// arithmetic bit for bit, so the rotated and normalized bf16 values, and with them the FP8 codes
// of steps 3-4, are the reference's. Then per sequence:
//   gather + quantize  the attended buffer rows' latent parts, per bk group, with the spec's exact
//                      f32 steps: the group scale from the quantizer shared with the reference, the
//                      maximum and the codes from the simd fp8_quant kernels (the same bits)
//   KV                 per (128-row tile, head), one call per bk group whose epilogue scales
//                      the group's sums by sa · w_scale and adds them in f32; rounded once to
//                      bf16. On the AMX tiles where the level has them and bk is whole tile steps
//                      (weights packed once per call into the tiles' pair layout; KvGemm); else
//                      on the bf16 NN tile's pair dot against weights widened and zipped in
//                      pairs once per call where it is used (a level with it, on a CPU where it
//                      outruns f32 FMA: cpu/common/bf16_dot.hpp) and bk is even; else on the
//                      panel GEMM against weights widened to f32 panels once per call (all
//                      exact; the panel tiles read their B in order where the f32 NN tile strode
//                      over weight rows at 63-73 % of the FMA peak). K's nope part is stored as the
//                      B of the score products (with the pair dot or the tiles, rows of pairs of
//                      128 keys; else panels of the panel GEMM); its rope part, the same for every
//                      head, once per sequence. K and V hold the bf16 values the spec's rounding
//                      leaves of them: as bf16 words with the pair dot, else widened to f32 once
//                      here (each key is read by every 64-query tile: widening it there cost a
//                      quarter of the attention), V then in column strips as panels of the panel
//                      GEMM (Routes)
//   attention          per (head, 64-query tile): 128-key chunks up to the tile's last visible key,
//                      scores on the AMX tiles where the level has them (the key pairs read in
//                      place), on the bf16 NN tile with the pair dot, else on the panel GEMM over
//                      the widened queries packed in its row groups (the same chains as the f32
//                      NN tile: 3 x 4-vector tiles striding over key rows took 42 % of the time
//                      where its outer-product tiles read panels in order), over the nope part and
//                      then on in the same chains over the rope part; online softmax in f32
//                      (simd scale_max / exp_sum, 2 ulp), P·V in f32 on the NN tile or the panel
//                      GEMM (P stays f32: the spec allows no rounding), or on the tiles with P
//                      split into three bf16 parts against V zipped by key pairs (within 2^-25
//                      |P|: inside the f32 bound). Under a deepseek profile the tile's scores
//                      are kept whole ([64 x keys]) so that each row is normalized before its
//                      weights are rounded to bf16, then one P·V pass.
//                      With topk_indices one bit per (query, window row), built once per sequence
//                      for every head; key chunks that no query of a tile keeps are skipped.
// Steps 2 and 4 under a deepseek profile: DeepSeek's one-rounding RMSNorm in f64 (shared with the
// reference: the same bits), and its act_quant (floored amax, x / sa or a power-of-two scale).
// Heads are taken in groups whose K and V fit the workspace budget. A query that sees no key
// writes 0 (as the reference); scores that are all -inf give NaN (as the reference's
// exp(-inf - (-inf))). Each output depends only on its own head's fixed chunk order: the same
// bits for any thread count.
#include "cpu/mla_prefill_fp8.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu/common/bf16_dot.hpp"
#include "cpu/common/kernels.hpp"
#include "cpu/common/online_softmax.hpp"
#include "cpu/common/parallel.hpp"
#include "cpu/common/tile_gemm.hpp"
#include "mlakit/dtype.hpp"
#include "core/shared/mla_prefill_fp8_norm.hpp"
#include "core/shared/mla_prefill_fp8_quant.hpp"

namespace mlakit::cpu {
namespace {

constexpr std::size_t kRowTile = 128;   // buffer rows per KV task (each call widens its weight block once)
constexpr std::size_t kQueryTile = 64;  // queries per attention task
constexpr std::size_t kKeyChunk = 128;  // keys per attention step
static_assert(kRowTile % kKeyChunk == 0, "a KV task's rows are whole key chunks");

struct Shape {
  std::size_t H, nope, rope, v, latent, bn, bk, qk, kv_cols, groups;
};

// What the KV projection (steps 5-6) multiplies on: the AMX tiles where the level has them (and
// bk is whole tile steps, so that a group's k never reads the next group's weights), the bf16 pair
// dot where the CPU takes it (and bk is even: a pair never straddles two groups), else the panel
// GEMM on f32 FMA.
enum class KvGemm { tiles, pairs, panels };
// How the attention holds V for P·V, P kept f32 (the spec allows no rounding of it): zipped by key
// pairs for the tiles, P split into three bf16 parts (three products, within the f32 bound); bf16
// rows, widened as read, for the pair dot's levels' NN tile; else f32 panels of the panel GEMM.
enum class VLayout { bf16_rows, f32_panels, zipped_pairs };
// The routes of a call, from the level's kernels and the shape alone (a plan sizes its buffers by
// them). The scores run on the tiles where the level has them and the nope and rope widths are
// whole tile steps (the tiles then read the keys in bf16 pairs in place), else on the pair dot where
// the CPU takes it (keys in pairs too), else on the panel GEMM (keys widened to f32 panels).
struct Routes {
  KvGemm kv;
  bool key_pairs, score_tiles;
  VLayout v;
};
Routes routes_of(const Shape& s, const simd::GemmKernels& g) {
  const bool pairs = bf16_dot::use(g);
  const bool tiles = g.gemm_tiles != nullptr && tile_gemm::use_for(true, 1, 1);
  const bool score_tiles = tiles && s.nope % g.tile_k == 0 && s.rope % g.tile_k == 0;
  Routes r{};
  r.kv = tiles && s.bk % g.tile_k == 0 ? KvGemm::tiles : pairs && s.bk % 2 == 0 ? KvGemm::pairs : KvGemm::panels;
  r.key_pairs = pairs || score_tiles;
  r.score_tiles = score_tiles;
  r.v = tiles ? VLayout::zipped_pairs : pairs ? VLayout::bf16_rows : VLayout::f32_panels;
  return r;
}
// One head's packed strips for the tiles: elements between strips.
std::size_t tile_strip_elems(const Shape& s) { return 16 * simd::tile_pack_k(s.latent); }

// Keys laid out as the B of the score products, by chunks of kKeyChunk keys, a slot being a pair
// of bf16 elements of the reduction (bf16_nn, on the levels with the pair dot: per chunk [slots x
// kKeyChunk]) or one element held as f32 (elsewhere: the bf16 values widened once when the keys
// are made, not in every tile that reads them). f32 chunks are cut into panels of the panel GEMM
// (panel keys each, [slots x panel] inside), which its register tiles read front to back; its
// chains are f32_nn's, so the bits are those of f32_nn over [slots x kKeyChunk] rows. Both are two
// 16-bit words a slot. Each chunk is one contiguous block (with rows the whole key range apart, a
// chunk's rows lay a multiple of 4 KiB apart for the usual lengths and every query tile waited on
// them from L3).
struct KeyRows {
  static constexpr std::size_t width = 2;  // 16-bit words per slot
  std::size_t slots;                        // rows of the reduction per chunk: pairs, or f32 elements
  bool f32;                                 // a slot holds one f32 element
  std::size_t panel;                        // f32: keys per panel (the panel GEMM's columns)
  // n elements of the reduction: in bf16 pairs, or one f32 element a slot in panels of `panel` keys.
  static KeyRows of(std::size_t n, bool pairs, std::size_t panel) {
    return pairs ? KeyRows{(n + 1) / 2, false, kKeyChunk} : KeyRows{n, true, panel};
  }
  std::size_t chunk_words() const { return slots * width * kKeyChunk; }
  std::size_t words(std::size_t rows) const { return num_tiles(std::max<std::size_t>(1, rows), kKeyChunk) * chunk_words(); }
  // The first word of slot j of key r.
  std::size_t at(std::size_t j, std::size_t r) const {
    const std::size_t c = r % kKeyChunk;
    return (r / kKeyChunk) * chunk_words() + width * ((c / panel) * slots * panel + j * panel + c % panel);
  }
  // Slot j of key r of f32 keys (at(j, r) counts 16-bit words).
  static float* f32_at(std::uint16_t* base, std::size_t word) { return reinterpret_cast<float*>(base + word); }
  static const float* f32_at(const std::uint16_t* base, std::size_t word) {
    return reinterpret_cast<const float*>(base + word);
  }
};

// Where each head's K lives: its nope part in its own chunks; the rope part, which every head
// shares, in one set of chunks per sequence (Quantized::rope_rows).
struct KLayout {
  std::size_t rows, head_words;  // head_words: bf16 words per head
  KeyRows nope;
  bool score_tiles;          // the scores on the tile GEMM (keys in pairs)
  VLayout v;                 // f32 panels of v_panel columns, bf16 rows or rows zipped by key pairs
  std::size_t v_panel;
  std::size_t v_head_words;  // 16-bit words of one head's V
};

// One head's V held as f32 (levels without the pair dot) as the panel GEMM's B of P·V: columns in
// strips of `panel`, each strip [rows x panel], so that a key chunk's rows of a strip are one
// contiguous run.
struct VPanels {
  std::size_t rows, panel, floats;
  std::size_t at(std::size_t r, std::size_t e) const { return (e / panel) * rows * panel + r * panel + e % panel; }
};
VPanels v_panels(const Shape& s, std::size_t rows, std::size_t panel) {
  const std::size_t r = std::max<std::size_t>(1, rows);
  return VPanels{r, panel, num_tiles(s.v, panel) * r * panel};
}

// The attended buffer rows of one sequence, quantized: the codes [rows x latent] widened exactly to
// the KV GEMM's A (bf16 for the pair dot, else f32), scales [groups x rows] (a group's scales of
// consecutive rows side by side: the row scales of the GEMM's epilogue), and the rope parts. All
// in the calling thread's call buffers, as are K, V and the laid-out weights.
struct Quantized {
  std::uint16_t* xb;
  float* xf;
  float* sa;
  KeyRows rope;
  std::uint16_t* rope_rows;
};
enum CallSlot { kSlotK, kSlotV, kSlotWeights, kSlotCodes, kSlotScales, kSlotRope, kSlotMask };

// Steps 1-2 on every new token, in place.
void rope_and_norm(const Shape& s, const MlaPrefillFp8Desc& d, const MlaPrefillFp8Args& a) {
  const simd::RopeNormKernels& rn = rope_norm_kernels();
  const std::size_t B = static_cast<std::size_t>(a.input_row_offsets.shape[0] - 1);
  const auto* iro = a.input_row_offsets.as<const std::uint32_t>();
  const auto* cache_lengths = a.kv_cache.cache_lengths.as<const std::uint32_t>();
  const auto* lut = a.kv_cache.lookup_table.as<const std::uint32_t>();
  const std::size_t lut_cols = static_cast<std::size_t>(a.kv_cache.lookup_table.shape[1]);
  const std::int64_t page = a.kv_cache.page_size();
  auto* q = a.q.as<std::uint16_t>();
  auto* blocks = a.kv_cache.blocks.as<std::uint16_t>();
  const auto* gamma = static_cast<const std::uint16_t*>(a.kv_norm_gamma.data);  // bf16 under max
  const bool freqs_f32 = a.freqs_cis.dtype == DType::f32;
  // Each new token's position in its sequence.
  std::vector<std::int64_t> pos(static_cast<std::size_t>(iro[B]));
  std::vector<std::uint32_t> seq(pos.size());
  for (std::size_t b = 0; b < B; ++b)
    for (std::uint32_t t = iro[b]; t < iro[b + 1]; ++t) {
      pos[t] = static_cast<std::int64_t>(cache_lengths[b]) + (t - iro[b]);
      seq[t] = static_cast<std::uint32_t>(b);
    }
  constexpr std::size_t kTokens = 16;
  parallel_for_tiles(pos.size(), kTokens, [&](std::size_t t0, std::size_t t1) {
    auto* cs = static_cast<float*>(thread_scratch(s.rope * sizeof(float), 0));
    for (std::size_t t = t0; t < t1; ++t) {
      const std::size_t at = static_cast<std::size_t>(pos[t]) * s.rope;
      if (freqs_f32) std::memcpy(cs, a.freqs_cis.as<const float>() + at, s.rope * sizeof(float));
      else for (std::size_t i = 0; i < s.rope; ++i) cs[i] = bf16_to_f32(a.freqs_cis.as<const std::uint16_t>()[at + i]);
      rn.rope_bf16(q + t * s.H * s.qk + s.nope, s.qk, s.H, cs, s.rope / 2);
      const std::int64_t blk = lut[seq[t] * lut_cols + static_cast<std::size_t>(pos[t] / page)];
      std::uint16_t* row = blocks + a.kv_cache.row_offset(blk, 0, a.layer_idx, pos[t] % page, 0);
      rn.rope_bf16(row + s.latent, 0, 1, cs, s.rope / 2);
      if (d.numerics == MlaNumerics::max) rn.rms_norm_bf16(row, s.latent, gamma, d.epsilon);
      else mla_prefill_fp8_norm::rms_norm_once(row, static_cast<std::int64_t>(s.latent), a.kv_norm_gamma.data,
                                               a.kv_norm_gamma.dtype == DType::f32, d.epsilon);
    }
  });
}

// Head h's kv_b_proj rows (cols of them) widened and laid out as the B of the KV GEMM along latent:
// bf16 pairs for bf16_nn (wz[q * 2 cols + 2 n + e] = W[n][2q + e], a missing last element 0), or
// f32 panels of the panel GEMM (panel_weights below). Rows are widened 16 at a time, so that each
// output row is written 64 bytes at a time rather than one slot per cols.
void zip_weights(const Shape& s, const simd::Fp8DecodeKernels& dec, const std::uint8_t* w, std::size_t h,
                 std::uint16_t* wz) {
  using E = std::uint16_t;
  constexpr std::size_t kRows = 16, kWidth = 2;
  const std::size_t cols = s.kv_cols, slots = (s.latent + kWidth - 1) / kWidth, ld = slots * kWidth;
  auto* rows = static_cast<E*>(thread_scratch(kRows * ld * sizeof(E), 0));
  for (std::size_t n0 = 0; n0 < cols; n0 += kRows) {
    const std::size_t nn = std::min(kRows, cols - n0);
    for (std::size_t j = 0; j < nn; ++j) {
      rows[j * ld + ld - 1] = E{0};
      dec.to_bf16(w + (h * cols + n0 + j) * s.latent, rows + j * ld, s.latent);
    }
    for (std::size_t q = 0; q < slots; ++q) {
      E* dst = wz + q * kWidth * cols + kWidth * n0;
      for (std::size_t j = 0; j < nn; ++j) std::memcpy(dst + kWidth * j, rows + j * ld + kWidth * q, kWidth * sizeof(E));
    }
  }
}

// Steps 5-6 for head h and buffer rows [r0, r1): K's nope part (laid out as kl.nope) and V (rows
// of bf16 values: bf16 words with the pair dot, else held as f32) of the head. Each bk group's
// product is scaled by sa · w_scale in the NN tile's epilogue, against the head's laid-out weights
// wzf: strips of the tile unit's pair layout on the tiles (each group's tile sums scaled and added
// in f32 here), bf16 pairs on the pair dot, else f32 panels on the panel GEMM (the same bits as the
// NN tile over the same values: one chain per output and group, then the scaled add).
void project(const Shape& s, const simd::GemmKernels& g, const Quantized& qz, KvGemm kv, const void* wzf,
             const float* w_scale, std::size_t h, std::size_t hl, std::size_t r0, std::size_t r1, const KLayout& kl,
             std::uint16_t* k, std::uint16_t* v) {
  const std::size_t rows = kl.rows;
  const std::size_t m = r1 - r0, cols = s.kv_cols;
  auto* acc = static_cast<float*>(thread_scratch((kRowTile + 1) * cols * sizeof(float), 3));
  float* ws = acc + kRowTile * cols;  // this group's weight scale of each column
  const std::size_t n0 = h * cols;
  for (std::size_t gi = 0; gi < s.groups; ++gi) {
    const std::size_t k0 = gi * s.bk, kn = std::min(s.bk, s.latent - k0);
    for (std::size_t n = 0; n < cols; ++n) ws[n] = w_scale[((n0 + n) / s.bn) * s.groups + gi];
    const float* sa = qz.sa + gi * rows + r0;
    if (kv == KvGemm::tiles) {
      auto* part = static_cast<float*>(thread_scratch(kRowTile * cols * sizeof(float), 6));
      g.gemm_tiles(m, cols, kn, qz.xb + r0 * s.latent + k0, s.latent, static_cast<const std::uint16_t*>(wzf) + 16 * k0,
                   tile_strip_elems(s), 32, nullptr, part, cols, false);
      for (std::size_t i = 0; i < m; ++i) {
        const float r = sa[i];
        float* ai = acc + i * cols;
        const float* pi = part + i * cols;
        if (gi == 0)
          for (std::size_t n = 0; n < cols; ++n) ai[n] = (r * ws[n]) * pi[n];
        else
          for (std::size_t n = 0; n < cols; ++n) ai[n] += (r * ws[n]) * pi[n];
      }
    } else if (kv == KvGemm::pairs) {
      g.bf16_nn_scaled(m, cols, kn, qz.xb + r0 * s.latent + k0, s.latent,
                       static_cast<const std::uint16_t*>(wzf) + k0 * cols, 2 * cols, sa, ws, acc, cols, gi > 0);
    } else {
      for (std::size_t c0 = 0; c0 < cols; c0 += g.panel_cols)
        g.gemm_panel_scaled(m, std::min<std::size_t>(g.panel_cols, cols - c0), kn, qz.xf + r0 * s.latent + k0, s.latent,
                            static_cast<const float*>(wzf) + (c0 / g.panel_cols) * s.latent * g.panel_cols +
                                k0 * g.panel_cols,
                            sa, ws + c0, acc + c0, cols, gi > 0);
    }
  }
  std::uint16_t* kh = k + hl * kl.head_words;
  // Keys and values are rounded to bf16 as the spec says; held as pairs or bf16 rows, or widened
  // into the panels the panel GEMM reads (keys: kl.nope; values: v_panels).
  auto* t = static_cast<std::uint16_t*>(thread_scratch(std::max(s.nope * kKeyChunk, s.v) * sizeof(std::uint16_t), 4));
  if (!kl.nope.f32) {
    for (std::size_t c0 = r0; c0 < r1; c0 += kKeyChunk) {  // r0 starts a chunk: kRowTile is whole chunks
      const std::size_t n = std::min(kKeyChunk, r1 - c0);
      g.pack_pairs_bf16(acc + (c0 - r0) * cols, cols, n, s.nope, kh + kl.nope.at(0, c0), kKeyChunk);
    }
  } else {
    // A key's nope row is rounded to bf16, and the panel packer widens a panel's rows into it.
    const std::size_t P = kl.nope.panel;
    for (std::size_t c0 = r0; c0 < r1; c0 += kKeyChunk) {
      const std::size_t n = std::min(kKeyChunk, r1 - c0);
      for (std::size_t i = 0; i < n; ++i) g.round_bf16(acc + (c0 - r0 + i) * cols, t + i * s.nope, s.nope);
      for (std::size_t p0 = 0; p0 < n; p0 += P)
        g.pack_panel_bf16(t + p0 * s.nope, s.nope, std::min(P, n - p0), s.nope,
                          KeyRows::f32_at(kh, kl.nope.at(0, c0 + p0)));
    }
  }
  std::uint16_t* vh = v + hl * kl.v_head_words;
  if (kl.v == VLayout::bf16_rows) {
    for (std::size_t i = 0; i < m; ++i) g.round_bf16(acc + i * cols + s.nope, vh + (r0 + i) * s.v, s.v);
    return;
  }
  if (kl.v == VLayout::zipped_pairs) {
    // Key r's values at (r / 2) * 2v + 2 e + r % 2; the keys past the last, to whole 32-key tile
    // steps, zero (the tiles read whole steps: a stale word there could be an infinity).
    const auto zip_row = [&](std::size_t r, const std::uint16_t* vals) {
      std::uint16_t* dst = vh + (r / 2) * 2 * s.v + r % 2;
      for (std::size_t e = 0; e < s.v; ++e) dst[2 * e] = vals ? vals[e] : std::uint16_t{0};
    };
    for (std::size_t i = 0; i < m; ++i) {
      g.round_bf16(acc + i * cols + s.nope, t, s.v);
      zip_row(r0 + i, t);
    }
    if (r1 == rows)
      for (std::size_t r = rows; r < simd::tile_pack_k(rows); ++r) zip_row(r, nullptr);
    return;
  }
  const std::size_t P = kl.v_panel;
  const VPanels vp = v_panels(s, rows, P);
  float* vf = reinterpret_cast<float*>(vh);
  for (std::size_t i = 0; i < m; ++i) {
    g.round_bf16(acc + i * cols + s.nope, t, s.v);
    for (std::size_t e0 = 0; e0 < s.v; e0 += P) {
      float* dst = vf + vp.at(r0 + i, e0);
      for (std::size_t e = e0; e < std::min(s.v, e0 + P); ++e) dst[e - e0] = bf16_to_f32(t[e]);
    }
  }
}

// The keys each query of a sequence may attend under topk_indices, built once per sequence and
// shared by every head: bit j of a query's `words` is window row j (inside its causal range) named
// by its row of topk_indices, `count` how many it keeps, `live[tile · chunks + c]` whether any query
// of a 64-query tile keeps a key of 128-key chunk c (chunks none keeps are skipped).
struct SeqMask {
  std::size_t words = 0, chunks = 0;
  std::uint32_t* bits = nullptr;   // [seq_len x words]; null: no topk_indices
  std::uint32_t* count = nullptr;  // [seq_len]
  std::uint8_t* live = nullptr;    // [query tiles x chunks]

  static std::size_t bytes(std::size_t seq_len, std::size_t rows) {
    const std::size_t words = (rows + 31) / 32, chunks = num_tiles(std::max<std::size_t>(1, rows), kKeyChunk);
    return seq_len * (words + 1) * sizeof(std::uint32_t) + num_tiles(seq_len, kQueryTile) * chunks + 64;
  }
  bool keeps(std::size_t i, std::size_t j) const { return (bits[i * words + j / 32] >> (j % 32)) & 1u; }
};

template <class Visible>
SeqMask seq_mask(const MlaPrefillFp8Args& a, std::size_t first_t, std::size_t seq_len, std::size_t rows,
                 std::int64_t offset, Visible visible) {
  SeqMask m;
  if (a.topk_indices.data == nullptr) return m;
  m.words = (rows + 31) / 32;
  m.chunks = num_tiles(std::max<std::size_t>(1, rows), kKeyChunk);
  auto* base = call_buffer_of<std::uint32_t>(SeqMask::bytes(seq_len, rows) / sizeof(std::uint32_t) + 1, kSlotMask);
  m.bits = base;
  m.count = base + seq_len * m.words;
  m.live = reinterpret_cast<std::uint8_t*>(m.count + seq_len);
  const std::size_t top_k = static_cast<std::size_t>(a.topk_indices.shape[1]);
  const auto* idx = a.topk_indices.as<const std::int32_t>();
  parallel_for_tiles(num_tiles(seq_len, kQueryTile), 1, [&](std::size_t q0, std::size_t q1) {
    for (std::size_t qt = q0; qt < q1; ++qt) {
      std::uint8_t* live = m.live + qt * m.chunks;
      std::memset(live, 0, m.chunks);
      for (std::size_t i = qt * kQueryTile; i < std::min(seq_len, (qt + 1) * kQueryTile); ++i) {
        std::uint32_t* w = m.bits + i * m.words;
        std::memset(w, 0, m.words * sizeof(std::uint32_t));
        const std::int32_t* row = idx + (first_t + i) * top_k;
        const std::int64_t causal = static_cast<std::int64_t>(visible(i));
        std::uint32_t n = 0;
        for (std::size_t e = 0; e < top_k; ++e) {
          const std::int64_t j = static_cast<std::int64_t>(row[e]) - offset;
          if (row[e] < 0 || j < 0 || j >= causal || ((w[j / 32] >> (j % 32)) & 1u)) continue;
          w[j / 32] |= 1u << (j % 32);
          live[static_cast<std::size_t>(j) / kKeyChunk] = 1;
          ++n;
        }
        m.count[i] = n;
      }
    }
  });
  return m;
}

// Raw (unscaled) scores s[0, n) of keys [j0, j0 + n) of query i: the ones its mask does not keep
// become `fill`, chosen so that times the softmax scale they are -inf (weight 0 whatever their score,
// NaN included): -inf for a positive scale, +inf for a negative one. Branch-free, so that it
// vectorizes; a zero scale (where no fill works: inf · 0 is NaN) takes masked_scaled_max instead.
inline void mask_raw_scores(const simd::GemmKernels& g, float* s, const SeqMask& m, std::size_t i, std::size_t j0,
                            std::size_t n, float fill) {
  g.mask_select(s, m.bits + i * m.words + j0 / 32, n, fill);  // j0: a multiple of the 128-key chunk
}

// The scaled scores of query i's keys [j0, j0 + n) in place, masked keys -inf; returns the maximum
// of the kept ones (NaN if one is NaN), as scale_max does without a mask.
inline float masked_scaled_max(const simd::GemmKernels& g, float* s, const SeqMask& m, std::size_t i, std::size_t j0,
                               std::size_t n, float scale) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (scale != 0.0f) {
    mask_raw_scores(g, s, m, i, j0, n, scale > 0.0f ? -kInf : kInf);
    return g.scale_max(s, nullptr, scale, n);
  }
  g.scale_max(s, nullptr, scale, n);
  float cm = -kInf;
  for (std::size_t j = 0; j < n; ++j) {
    if (!m.keeps(i, j0 + j)) s[j] = -kInf;
    else if (std::isnan(s[j]) || std::isnan(cm)) cm = std::numeric_limits<float>::quiet_NaN();
    else cm = std::max(cm, s[j]);
  }
  return cm;
}

// A query tile's nope and rope parts widened into the panel GEMM's row groups (f32 scores only).
struct PackedQueries {
  float* nope;
  float* rope;
};

// Scores of queries [0, mq) of the tile against keys [j0, j0 + cnt) into c (ldc floats a row).
void tile_scores(const Shape& s, const simd::GemmKernels& g, const KLayout& kl, const std::uint16_t* kh,
                 const Quantized& qz, const std::uint16_t* qt, const PackedQueries& qp, std::size_t mq, std::size_t j0,
                 std::size_t cnt, float* c, std::size_t ldc) {
  // One chain per score over the nope part, then on over the rope part (the second call starts
  // from the first's exact f32 sums).
  const std::uint16_t* kn = kh + kl.nope.at(0, j0);
  const std::uint16_t* kr = qz.rope_rows + qz.rope.at(0, j0);
  if (kl.score_tiles) {
    // The pairs of a chunk read in place as the tiles' B: key j's pair q at q * 2 kKeyChunk + 2 j.
    g.gemm_tiles(mq, cnt, s.nope, qt, s.H * s.qk, kn, 32, 2 * kKeyChunk, nullptr, c, ldc, false);
    g.gemm_tiles(mq, cnt, s.rope, qt + s.nope, s.H * s.qk, kr, 32, 2 * kKeyChunk, nullptr, c, ldc, true);
  } else if (!kl.nope.f32) {
    g.bf16_nn(mq, cnt, s.nope, qt, s.H * s.qk, kn, 2 * kKeyChunk, c, ldc, false);
    g.bf16_nn(mq, cnt, s.rope, qt + s.nope, s.H * s.qk, kr, 2 * kKeyChunk, c, ldc, true);
  } else {
    for (std::size_t p0 = 0; p0 < cnt; p0 += kl.nope.panel) {
      const std::size_t n = std::min(kl.nope.panel, cnt - p0);
      g.gemm_panel_packed(mq, n, s.nope, qp.nope, KeyRows::f32_at(kh, kl.nope.at(0, j0 + p0)), c + p0, ldc, false);
      g.gemm_panel_packed(mq, n, s.rope, qp.rope, KeyRows::f32_at(qz.rope_rows, qz.rope.at(0, j0 + p0)), c + p0, ldc, true);
    }
  }
}

// Step 7 for head h (local index hl) and queries [i0, i1) of a sequence whose query i sees keys
// [0, visible(i)) (of which, with topk_indices, those the mask keeps).
template <class Visible>
void attend(const Shape& s, const simd::GemmKernels& g, const MlaPrefillFp8Desc& d, const MlaPrefillFp8Args& a,
            std::size_t h, std::size_t hl, const KLayout& kl, const std::uint16_t* k, const Quantized& qz,
            const std::uint16_t* v, std::size_t first_t, std::size_t i0, std::size_t i1, const SeqMask& sm,
            Visible visible, std::uint16_t* out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::size_t mq = i1 - i0;
  const float scale = d.scale;
  const std::uint16_t* kh = k + hl * kl.head_words;
  const std::uint16_t* qt = a.q.as<const std::uint16_t>() + ((first_t + i0) * s.H + h) * s.qk;
  // Without the pair dot the scores run on f32 FMA: the tile's queries widened once, into the
  // panel GEMM's packed row groups (nope part, then rope part): the register tiles then read one
  // run of floats a step, not a row each (op 3 1.005-1.08x the speed, one process, 1-2 threads).
  PackedQueries qp{};
  if (kl.nope.f32) {
    qp.nope = static_cast<float*>(thread_scratch(round_up(kQueryTile, g.panel_rows) * s.qk * sizeof(float), 1));
    qp.rope = qp.nope + round_up(mq, g.panel_rows) * s.nope;
    g.pack_rows_bf16(qt, s.H * s.qk, mq, s.nope, qp.nope);
    g.pack_rows_bf16(qt + s.nope, s.H * s.qk, mq, s.rope, qp.rope);
  }
  // P·V over V as the call's Routes lay it out.
  const VPanels vp = v_panels(s, kl.rows, kl.v_panel);
  const std::uint16_t* vh = v + hl * kl.v_head_words;
  const float* vf = reinterpret_cast<const float*>(vh);
  const std::size_t keys = visible(i1 - 1);  // the tile's last query sees the most
  const bool masked = sm.bits != nullptr;
  auto kept = [&](std::size_t r) { return masked ? static_cast<std::size_t>(sm.count[i0 + r]) : visible(i0 + r); };
  auto live = [&](std::size_t j0) { return !masked || sm.live[(i0 / kQueryTile) * sm.chunks + j0 / kKeyChunk]; };
  auto* sbuf = static_cast<float*>(thread_scratch((kQueryTile * kKeyChunk + kQueryTile * s.v + 2 * kQueryTile) *
                                                      sizeof(float), 2));
  float* o = sbuf + kQueryTile * kKeyChunk;
  float* m = o + kQueryTile * s.v;
  float* l = m + kQueryTile;
  std::fill(o, o + mq * s.v, 0.0f);
  std::fill(m, m + mq, kNegInf);
  std::fill(l, l + mq, 0.0f);
  // p_bf16: P's values are bf16 values already (a deepseek profile rounds the weights).
  auto pv = [&](std::size_t cnt, const float* p, std::size_t ldp, std::size_t j0, bool p_bf16) {
    if (kl.v == VLayout::bf16_rows) {
      g.f32_bf16_nn(mq, s.v, cnt, p, ldp, vh + j0 * s.v, s.v, o, s.v, true);
      return;
    }
    if (kl.v == VLayout::zipped_pairs) {
      // P = hi + mid + lo (bf16 parts, within 2^-25 |P|), the smallest part's product first; a P of
      // bf16 values is its own hi part, the one product.
      auto* parts = static_cast<std::uint16_t*>(thread_scratch(3 * kQueryTile * kKeyChunk * sizeof(std::uint16_t), 7));
      std::uint16_t* hi = parts;
      std::uint16_t* mid = hi + kQueryTile * kKeyChunk;
      std::uint16_t* lo = mid + kQueryTile * kKeyChunk;
      for (std::size_t r = 0; r < mq; ++r) {
        if (p_bf16) g.round_bf16(p + r * ldp, hi + r * kKeyChunk, cnt);
        else g.split_bf16x3(p + r * ldp, cnt, hi + r * kKeyChunk, mid + r * kKeyChunk, lo + r * kKeyChunk);
      }
      const std::uint16_t* vz = vh + (j0 / 2) * 2 * s.v;  // j0: a multiple of the chunk, so even
      if (!p_bf16)
        for (const std::uint16_t* part : {lo, mid})
          g.gemm_tiles(mq, s.v, cnt, part, kKeyChunk, vz, 32, 2 * s.v, nullptr, o, s.v, true);
      g.gemm_tiles(mq, s.v, cnt, hi, kKeyChunk, vz, 32, 2 * s.v, nullptr, o, s.v, true);
      return;
    }
    for (std::size_t e0 = 0; e0 < s.v; e0 += vp.panel)
      g.gemm_panel(mq, std::min(vp.panel, s.v - e0), cnt, p, ldp, vf + vp.at(j0, e0), o + e0, s.v, true);
  };

  if (d.numerics == MlaNumerics::max) {
    // Online softmax over 128-key chunks; P stays f32 (the spec allows no rounding).
    for (std::size_t j0 = 0; j0 < keys; j0 += kKeyChunk) {
      const std::size_t cnt = std::min(kKeyChunk, keys - j0);
      if (!live(j0)) continue;
      tile_scores(s, g, kl, kh, qz, qt, qp, mq, j0, cnt, sbuf, kKeyChunk);
      for (std::size_t r = 0; r < mq; ++r) {
        float* sr = sbuf + r * kKeyChunk;
        const std::size_t vis_all = visible(i0 + r);
        const std::size_t vis = vis_all <= j0 ? 0 : std::min(cnt, vis_all - j0);
        std::fill(sr + vis, sr + cnt, 0.0f);  // keys this query does not see weigh 0
        if (vis == 0) continue;
        if (!masked) {
          online_softmax_step(g, sr, nullptr, scale, vis, m[r], l[r], o + r * s.v, s.v);
        } else {
          const float cm = masked_scaled_max(g, sr, sm, i0 + r, j0, vis, scale);
          online_softmax_scaled(g, sr, cm, vis, m[r], l[r], o + r * s.v, s.v);
        }
      }
      pv(cnt, sbuf, kKeyChunk, j0, false);
    }
  } else {
    // deepseek: the row's weights normalized in f32, then rounded to bf16, then P·V. All scores of
    // the tile first (a row's maximum and sum need every key), in one [mq x keys] buffer.
    const std::size_t ld = std::max<std::size_t>(1, keys);
    auto* sall = static_cast<float*>(thread_scratch(mq * ld * sizeof(float), 5));
    for (std::size_t j0 = 0; j0 < keys; j0 += kKeyChunk)
      if (live(j0)) tile_scores(s, g, kl, kh, qz, qt, qp, mq, j0, std::min(kKeyChunk, keys - j0), sall + j0, ld);
    for (std::size_t r = 0; r < mq; ++r) {
      float* sr = sall + r * ld;
      const std::size_t vis = visible(i0 + r);
      if (vis == 0 || kept(r) == 0) {
        std::fill(sr, sr + keys, 0.0f);
        continue;
      }
      // Skipped chunks hold junk: masked here with everything the query does not keep.
      const float cm = masked ? masked_scaled_max(g, sr, sm, i0 + r, 0, vis, scale) : g.scale_max(sr, nullptr, scale, vis);
      std::fill(sr + vis, sr + keys, 0.0f);  // keys this query does not see weigh 0
      m[r] = cm;
      if (cm == kNegInf) continue;           // every score -inf: NaN below, as the reference
      const float sum = g.exp_sum(sr, cm, vis);
      l[r] = sum;
      g.scale_round_bf16(sr, vis, 1.0f / sum);  // normalized as torch's softmax does: times 1/sum
    }
    for (std::size_t j0 = 0; j0 < keys; j0 += kKeyChunk)
      if (live(j0))
        pv(std::min(kKeyChunk, keys - j0), sall + j0, ld, j0, true);
    std::fill(l, l + mq, 1.0f);  // the weights are normalized already
  }

  for (std::size_t r = 0; r < mq; ++r) {
    std::uint16_t* dst = out + ((first_t + i0 + r) * s.H + h) * s.v;
    if (visible(i0 + r) == 0 || kept(r) == 0) {
      std::memset(dst, 0, s.v * sizeof(std::uint16_t));
    } else if (m[r] == kNegInf) {
      for (std::size_t e = 0; e < s.v; ++e) dst[e] = f32_to_bf16(std::numeric_limits<float>::quiet_NaN());
    } else {
      for (std::size_t e = 0; e < s.v; ++e) dst[e] = f32_to_bf16(o[r * s.v + e] / l[r]);
    }
  }
}

Shape shape_of(const MlaPrefillFp8Desc& d) {
  Shape s{};
  s.H = static_cast<std::size_t>(d.num_heads);
  s.nope = static_cast<std::size_t>(d.nope);
  s.rope = static_cast<std::size_t>(d.rope);
  s.v = static_cast<std::size_t>(d.v);
  s.latent = static_cast<std::size_t>(d.latent);
  s.bn = static_cast<std::size_t>(d.bn);
  s.bk = static_cast<std::size_t>(d.bk);
  s.qk = s.nope + s.rope;
  s.kv_cols = s.nope + s.v;
  s.groups = (s.latent + s.bk - 1) / s.bk;
  return s;
}

// Bytes of one head's laid-out weights.
std::size_t weight_bytes(const Shape& s, KvGemm kv, std::size_t panel) {
  switch (kv) {
    case KvGemm::tiles: return num_tiles(s.kv_cols, 16) * tile_strip_elems(s) * sizeof(std::uint16_t);
    case KvGemm::pairs: return (s.latent + 1) / 2 * 2 * s.kv_cols * sizeof(std::uint16_t);
    case KvGemm::panels: break;
  }
  return s.latent * round_up(s.kv_cols, panel) * sizeof(float);
}

// Head h's kv_b_proj rows as f32 panels of the panel GEMM along latent: the columns in strips of
// panel_cols, strip q at wz + q * latent * panel_cols, panel[k * panel_cols + j] = W[q panel_cols + j][k]
// (fp8 decoded exactly; a last strip's missing columns zero).
void panel_weights(const Shape& s, const simd::GemmKernels& g, const simd::Fp8DecodeKernels& dec,
                   const std::uint8_t* w, std::size_t h, float* wz) {
  const std::size_t cols = s.kv_cols, P = g.panel_cols;
  auto* rows = static_cast<float*>(thread_scratch(P * s.latent * sizeof(float), 0));
  for (std::size_t n0 = 0; n0 < cols; n0 += P) {
    const std::size_t nn = std::min(P, cols - n0);
    for (std::size_t j = 0; j < nn; ++j) dec.to_f32(w + (h * cols + n0 + j) * s.latent, rows + j * s.latent, s.latent);
    g.pack_panel_f32(rows, s.latent, nn, s.latent, wz + (n0 / P) * s.latent * P);
  }
}

// The buffer rows sequence b attends: its window, cut at the last new token's position.
std::size_t window_rows(const MlaPrefillFp8Args& a, std::size_t b) {
  const auto* iro = a.input_row_offsets.as<const std::uint32_t>();
  const auto* bro = a.buffer_row_offsets.as<const std::uint32_t>();
  const std::int64_t window = static_cast<std::int64_t>(bro[b + 1]) - bro[b];
  const std::int64_t offset = a.cache_offsets.as<const std::uint32_t>()[b];
  const std::int64_t cache_len = a.kv_cache.cache_lengths.as<const std::uint32_t>()[b];
  const std::int64_t last_pos = cache_len + static_cast<std::int64_t>(iro[b + 1] - iro[b]) - 1;
  return last_pos < offset ? 0 : static_cast<std::size_t>(std::min(window, last_pos - offset + 1));
}

// 16-bit words of one head's V as `v` lays it out.
std::size_t v_words(const Shape& s, std::size_t rows, VLayout v) {
  switch (v) {
    case VLayout::f32_panels: return v_panels(s, rows, gemm_kernels().panel_cols).floats * 2;
    case VLayout::zipped_pairs: return simd::tile_pack_k(std::max<std::size_t>(1, rows)) * s.v;
    case VLayout::bf16_rows: break;
  }
  return std::max<std::size_t>(1, rows) * s.v;
}

// Heads per group: their K, V and laid-out weights within the workspace budget.
std::size_t head_group(const Shape& s, std::size_t head_words, std::size_t rows, VLayout v, std::size_t wz_bytes) {
  const std::size_t head_bytes = (head_words + v_words(s, rows, v)) * sizeof(std::uint16_t) + wz_bytes;
  return items_within_budget(head_bytes, s.H);
}

}  // namespace

CallBufferSizes mla_prefill_fp8_call_buffers(const MlaPrefillFp8Desc& d, const MlaPrefillFp8Args& a) {
  CallBufferSizes sizes;
  const Shape s = shape_of(d);
  const Routes rt = routes_of(s, gemm_kernels());
  const KvGemm kv = rt.kv;
  const std::size_t panel = gemm_kernels().panel_cols;
  const std::size_t wz_bytes = weight_bytes(s, kv, panel);
  const KeyRows rope = KeyRows::of(s.rope, rt.key_pairs, panel), nope = KeyRows::of(s.nope, rt.key_pairs, panel);
  const auto* iro = a.input_row_offsets.as<const std::uint32_t>();
  const std::size_t B = static_cast<std::size_t>(a.input_row_offsets.shape[0] - 1);
  for (std::size_t b = 0; b < B; ++b) {
    if (iro[b + 1] == iro[b]) continue;
    const std::size_t rows = window_rows(a, b);
    sizes.grow(kSlotScales, rows * s.groups * sizeof(float));
    sizes.grow(kSlotCodes, rows * s.latent * (kv != KvGemm::panels ? sizeof(std::uint16_t) : sizeof(float)));
    sizes.grow(kSlotRope, rope.words(rows) * sizeof(std::uint16_t));
    if (a.topk_indices.data != nullptr)
      sizes.grow(kSlotMask, (SeqMask::bytes(iro[b + 1] - iro[b], rows) / sizeof(std::uint32_t) + 1) * sizeof(std::uint32_t));
    const std::size_t head_words = nope.words(rows);
    const std::size_t hg = head_group(s, head_words, rows, rt.v, wz_bytes);
    sizes.grow(kSlotK, hg * head_words * sizeof(std::uint16_t));
    sizes.grow(kSlotV, hg * v_words(s, rows, rt.v) * sizeof(std::uint16_t));
    if (rows > 0) sizes.grow(kSlotWeights, std::min(hg, s.H) * wz_bytes);
  }
  return sizes;
}

Status mla_prefill_fp8(const MlaPrefillFp8Desc& d, const MlaPrefillFp8Args& a) {
  namespace quant = mla_prefill_fp8_quant;
  const Shape s = shape_of(d);

  rope_and_norm(s, d, a);

  const simd::GemmKernels& g = gemm_kernels();
  const simd::Fp8DecodeKernels& dec = fp8_decode_kernels();
  const simd::Fp8QuantKernels& fq = fp8_quant_kernels();
  const Routes rt = routes_of(s, g);
  const KvGemm kv = rt.kv;
  const std::size_t wz_bytes = weight_bytes(s, kv, g.panel_cols);
  const std::size_t B = static_cast<std::size_t>(a.input_row_offsets.shape[0] - 1);
  const auto* iro = a.input_row_offsets.as<const std::uint32_t>();
  const auto* cache_offsets = a.cache_offsets.as<const std::uint32_t>();
  const auto* cache_lengths = a.kv_cache.cache_lengths.as<const std::uint32_t>();
  const auto* lut = a.kv_cache.lookup_table.as<const std::uint32_t>();
  const std::size_t lut_cols = static_cast<std::size_t>(a.kv_cache.lookup_table.shape[1]);
  const std::int64_t page = a.kv_cache.page_size();
  const auto* blocks = a.kv_cache.blocks.as<const std::uint16_t>();
  const auto* w = a.kv_b_proj.as<const std::uint8_t>();
  const auto* w_scale = a.kv_b_proj_scale.as<const float>();
  auto* out = a.output.as<std::uint16_t>();

  Quantized qz{};
  qz.rope = KeyRows::of(s.rope, rt.key_pairs, g.panel_cols);
  KLayout kl{};
  kl.nope = KeyRows::of(s.nope, rt.key_pairs, g.panel_cols);
  kl.score_tiles = rt.score_tiles;
  kl.v = rt.v;
  kl.v_panel = g.panel_cols;
  // Laid-out weights of heads [wz_h0, wz_h0 + wz_hn): they depend on the weights alone, so a head
  // group that fits every sequence is laid out once per call.
  std::byte* wz = nullptr;
  bool wz_valid = false;
  std::size_t wz_h0 = 0, wz_hn = 0;
  for (std::size_t b = 0; b < B; ++b) {
    const std::size_t first_t = iro[b], seq_len = iro[b + 1] - first_t;
    if (seq_len == 0) continue;
    const std::int64_t offset = cache_offsets[b], cache_len = cache_lengths[b];
    const std::size_t rows = window_rows(a, b);
    auto visible = [&](std::size_t i) -> std::size_t {
      const std::int64_t pos = cache_len + static_cast<std::int64_t>(i);
      return pos < offset ? 0 : std::min<std::size_t>(rows, static_cast<std::size_t>(pos - offset + 1));
    };

    const SeqMask mask = seq_mask(a, first_t, seq_len, rows, offset, visible);

    // Steps 3-4.
    qz.sa = call_buffer_of<float>(rows * s.groups, kSlotScales);
    if (kv != KvGemm::panels) qz.xb = call_buffer_of<std::uint16_t>(rows * s.latent, kSlotCodes);
    else qz.xf = call_buffer_of<float>(rows * s.latent, kSlotCodes);
    qz.rope_rows = call_buffer_of<std::uint16_t>(qz.rope.words(rows), kSlotRope);
    parallel_for_tiles(rows, kRowTile, [&](std::size_t r0, std::size_t r1) {
      auto* codes = static_cast<std::uint8_t*>(thread_scratch(s.latent, 0));
      for (std::size_t j = r0; j < r1; ++j) {
        const std::int64_t pos = offset + static_cast<std::int64_t>(j);
        const std::int64_t blk = lut[b * lut_cols + static_cast<std::size_t>(pos / page)];
        const std::uint16_t* row = blocks + a.kv_cache.row_offset(blk, 0, a.layer_idx, pos % page, 0);
        for (std::size_t gi = 0; gi < s.groups; ++gi) {
          const std::size_t k0 = gi * s.bk, kn = std::min(s.bk, s.latent - k0);
          const float amax = fq.amax_bf16(row + k0, kn);
          float sa;
          if (d.numerics == MlaNumerics::max) {
            sa = quant::group_scale(amax);
            fq.encode_bf16(row + k0, kn, quant::group_inverse(sa), codes + k0);
          } else if (d.numerics == MlaNumerics::deepseek_ue8m0) {
            sa = quant::deepseek_scale(amax, true);
            fq.encode_bf16(row + k0, kn, 1.0f / sa, codes + k0);  // a power of two: the same as x / sa
          } else {
            sa = quant::deepseek_scale(amax, false);
            fq.encode_div_bf16(row + k0, kn, sa, codes + k0);
          }
          qz.sa[gi * rows + j] = sa;
        }
        if (kv != KvGemm::panels) dec.to_bf16(codes, qz.xb + j * s.latent, s.latent);
        else dec.to_f32(codes, qz.xf + j * s.latent, s.latent);
        if (qz.rope.f32) {
          for (std::size_t e = 0; e < s.rope; ++e) *KeyRows::f32_at(qz.rope_rows, qz.rope.at(e, j)) = bf16_to_f32(row[s.latent + e]);
        } else {
          for (std::size_t e = 0; e < s.rope; ++e) qz.rope_rows[qz.rope.at(e / 2, j) + e % 2] = row[s.latent + e];
          if (s.rope % 2) qz.rope_rows[qz.rope.at(s.rope / 2, j) + 1] = 0;
        }
      }
    });

    // Heads in groups whose K, V and laid-out weights fit the workspace budget.
    kl.rows = rows;
    kl.head_words = kl.nope.words(rows);
    kl.v_head_words = v_words(s, rows, kl.v);
    const std::size_t hg = head_group(s, kl.head_words, rows, kl.v, wz_bytes);
    std::uint16_t* const k = call_buffer_of<std::uint16_t>(hg * kl.head_words, kSlotK);
    std::uint16_t* const v = call_buffer_of<std::uint16_t>(hg * kl.v_head_words, kSlotV);
    for (std::size_t h0 = 0; h0 < s.H; h0 += hg) {
      const std::size_t hn = std::min(hg, s.H - h0);
      if (rows > 0 && (!wz_valid || wz_h0 != h0 || wz_hn != hn)) {
        wz = call_buffer_of<std::byte>(hn * wz_bytes, kSlotWeights);
        wz_valid = true;
        parallel_for_tiles(hn, 1, [&](std::size_t hb, std::size_t he) {
          for (std::size_t hl = hb; hl < he; ++hl) {
            std::byte* wh = wz + hl * wz_bytes;
            if (kv == KvGemm::tiles)
              g.pack_tiles_f8(w + (h0 + hl) * s.kv_cols * s.latent, s.latent, s.kv_cols, s.latent,
                              reinterpret_cast<std::uint16_t*>(wh), tile_strip_elems(s));
            else if (kv == KvGemm::pairs)
              zip_weights(s, dec, w, h0 + hl, reinterpret_cast<std::uint16_t*>(wh));
            else
              panel_weights(s, g, dec, w, h0 + hl, reinterpret_cast<float*>(wh));
          }
        });
        wz_h0 = h0;
        wz_hn = hn;
      }
      const std::size_t row_tiles = num_tiles(rows, kRowTile);
      parallel_for_tiles(row_tiles * hn, 1, [&](std::size_t t0, std::size_t t1) {
        for (std::size_t t = t0; t < t1; ++t) {
          const std::size_t hl = t / row_tiles, r0 = (t % row_tiles) * kRowTile;
          project(s, g, qz, kv, wz + hl * wz_bytes, w_scale, h0 + hl, hl, r0, std::min(rows, r0 + kRowTile),
                  kl, k, v);
        }
      });
      const std::size_t q_tiles = num_tiles(seq_len, kQueryTile);
      parallel_for_tiles(q_tiles * hn, 1, [&](std::size_t t0, std::size_t t1) {
        for (std::size_t t = t0; t < t1; ++t) {
          const std::size_t hl = t / q_tiles, i0 = (t % q_tiles) * kQueryTile;
          attend(s, g, d, a, h0 + hl, hl, kl, k, qz, v, first_t, i0, std::min(seq_len, i0 + kQueryTile), mask,
                 visible, out);
        }
      });
    }
  }
  return Status::success();
}

}  // namespace mlakit::cpu
