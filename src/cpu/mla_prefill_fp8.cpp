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
//   KV                 per (128-row tile, head), one call per bk group, scaled by sa · w_scale and
//                      summed in f32, rounded once to bf16: on the bf16 NN tile against weights
//                      widened and zipped once per call where the level has the pair dot and bk is
//                      even, the scales applied in the tile's epilogue; on the fp8 x fp8 dot tiles
//                      and a pass of scaling otherwise. K's nope part is stored pair-major where
//                      the level has the pair dot (its rope part, the same for every head, once per
//                      sequence), else row-major with the rope part appended; V rows are kept in
//                      bf16, which is what the spec's rounding leaves of them
//   attention          per (head, 64-query tile): 64-key chunks up to the tile's last visible key,
//                      scores on the bf16 NN tile against pair-major K (nope pairs, then on in the
//                      same chains over the rope pairs; the dot tiles elsewhere), online softmax in
//                      f32 (simd scale_max / exp_sum, 2 ulp), P·V on the f32 NN tile reading the
//                      bf16 V rows widened (P stays f32: the spec allows no rounding)
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
#include <memory>
#include <vector>

#include "cpu/common/kernels.hpp"
#include "cpu/common/online_softmax.hpp"
#include "cpu/common/parallel.hpp"
#include "mlakit/dtype.hpp"
#include "reference/mla_prefill_fp8_quant.hpp"

namespace mlakit::cpu {
namespace {

constexpr std::size_t kRowTile = 128;   // buffer rows per KV task (each call widens its weight block once)
constexpr std::size_t kQueryTile = 64;  // queries per attention task
constexpr std::size_t kKeyChunk = 64;   // keys per attention step
static_assert(kRowTile % kKeyChunk == 0, "a KV task's rows are whole key chunks");

struct Shape {
  std::size_t H, nope, rope, v, latent, bn, bk, qk, kv_cols, groups, ldk;
};

// Pair-major rows of keys by chunks of kKeyChunk keys: per chunk [pairs x kKeyChunk] words of two
// bf16 dims, the zipped B of bf16_nn. Each chunk is one contiguous block, read front to back (with
// pair rows the whole key range apart, a chunk's rows lay a multiple of 4 KiB apart for the usual
// lengths and every query tile waited on them from L3).
struct PairChunks {
  std::size_t npairs;
  std::size_t chunk_words() const { return 2 * npairs * kKeyChunk; }
  std::size_t words(std::size_t rows) const { return num_tiles(std::max<std::size_t>(1, rows), kKeyChunk) * chunk_words(); }
  // The word of pair p of key r.
  std::size_t pair_word(std::size_t p, std::size_t r) const {
    return (r / kKeyChunk) * chunk_words() + 2 * (p * kKeyChunk + r % kKeyChunk);
  }
};

// Where each head's K lives. Row-major ([rows x ldk] bf16, nope then rope, rows along the
// reduction: B of the dot tiles) or, where the level has the bf16 pair dot, pair-major: the head's
// nope part in its own chunks and the rope part, which every head shares, in one set of chunks per
// sequence (Quantized::rope_pairs); the scores then run without the dot tile's horizontal
// reductions, and the rope part is laid out once rather than once per head.
struct KLayout {
  bool pairs;
  std::size_t rows, head_words;  // head_words: bf16 words per head
  PairChunks nope;               // the head's nope pairs (pairs)
};

// The attended buffer rows of one sequence, quantized: codes [rows x latent], scales [rows x groups],
// rope parts [rows x rope].
struct Quantized {
  std::vector<std::uint8_t> codes;
  std::vector<std::uint16_t> xb;  // the codes as bf16 (exact), where the KV GEMM runs on the NN tile
  std::vector<float> sa;          // [groups x rows]: a group's scales of consecutive rows side by side
  std::vector<std::uint16_t> rope;
  PairChunks rope_chunks;
  std::vector<std::uint16_t> rope_pairs;  // the rope parts pair-major (where K is)
};

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
  const auto* gamma = a.kv_norm_gamma.as<const std::uint16_t>();
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
      rn.rms_norm_bf16(row, s.latent, gamma, d.epsilon);
    }
  });
}

// Head h's kv_b_proj rows (cols of them) widened to bf16 and zipped in pairs along latent: the B
// of bf16_nn, wz[q * 2 cols + 2 n + e] = W[n][2q + e] (a missing last element 0). Rows are widened
// 16 at a time, so that each output row of pairs is written 64 bytes at a time rather than one
// pair per 2·cols words.
void zip_weights(const Shape& s, const simd::Fp8DecodeKernels& dec, const std::uint8_t* w, std::size_t h,
                 std::uint16_t* wz) {
  constexpr std::size_t kRows = 16;
  const std::size_t cols = s.kv_cols, npairs = (s.latent + 1) / 2;
  auto* rows = static_cast<std::uint16_t*>(thread_scratch(kRows * 2 * npairs * sizeof(std::uint16_t), 0));
  for (std::size_t n0 = 0; n0 < cols; n0 += kRows) {
    const std::size_t nn = std::min(kRows, cols - n0);
    for (std::size_t j = 0; j < nn; ++j) {
      rows[j * 2 * npairs + 2 * npairs - 1] = 0;
      dec.to_bf16(w + (h * cols + n0 + j) * s.latent, rows + j * 2 * npairs, s.latent);
    }
    for (std::size_t q = 0; q < npairs; ++q) {
      std::uint16_t* dst = wz + q * 2 * cols + 2 * n0;
      for (std::size_t j = 0; j < nn; ++j) std::memcpy(dst + 2 * j, rows + j * 2 * npairs + 2 * q, 2 * sizeof(std::uint16_t));
    }
  }
}

// Steps 5-6 for head h and buffer rows [r0, r1): K (bf16: the latent-projected nope part, and in
// the row-major layout the rope part after it) and V (f32, v) of the head. wz: the head's zipped
// weights (the NN tile, each group's scales applied in the tile's epilogue), or null (the dot
// tiles, then a pass of scaling).
void project(const Shape& s, const simd::GemmKernels& g, const Quantized& qz, const std::uint8_t* w,
             const std::uint16_t* wz, const float* w_scale, std::size_t h, std::size_t hl, std::size_t r0,
             std::size_t r1, const KLayout& kl, std::uint16_t* k, std::uint16_t* v) {
  const std::size_t rows = kl.rows;
  const std::size_t m = r1 - r0, cols = s.kv_cols;
  auto* tmp = static_cast<float*>(thread_scratch((2 * kRowTile + 1) * cols * sizeof(float), 3));
  float* acc = tmp + kRowTile * cols;
  float* ws = acc + kRowTile * cols;  // this group's weight scale of each column
  const std::size_t n0 = h * cols;
  for (std::size_t gi = 0; gi < s.groups; ++gi) {
    const std::size_t k0 = gi * s.bk, kn = std::min(s.bk, s.latent - k0);
    for (std::size_t n = 0; n < cols; ++n) ws[n] = w_scale[((n0 + n) / s.bn) * s.groups + gi];
    const float* sa = qz.sa.data() + gi * rows + r0;
    if (wz) {
      g.bf16_nn_scaled(m, cols, kn, qz.xb.data() + r0 * s.latent + k0, s.latent, wz + k0 * cols, 2 * cols, sa, ws, acc,
                       cols, gi > 0);
      continue;
    }
    g.f8_f8(m, cols, kn, qz.codes.data() + r0 * s.latent + k0, s.latent, w + n0 * s.latent + k0, s.latent, tmp, cols,
            false);
    for (std::size_t i = 0; i < m; ++i) {
      float* ar = acc + i * cols;
      const float* tr = tmp + i * cols;
      for (std::size_t n = 0; n < cols; ++n) ar[n] = (gi > 0 ? ar[n] : 0.0f) + (sa[i] * ws[n]) * tr[n];
    }
  }
  std::uint16_t* kh = k + hl * kl.head_words;
  std::uint16_t* vh = v + hl * rows * s.v;
  if (kl.pairs)
    for (std::size_t c0 = r0; c0 < r1; c0 += kKeyChunk)  // r0 starts a chunk: kRowTile is whole chunks
      g.pack_pairs_bf16(acc + (c0 - r0) * cols, cols, std::min(kKeyChunk, r1 - c0), s.nope, kh + kl.nope.pair_word(0, c0),
                        kKeyChunk);
  for (std::size_t i = 0; i < m; ++i) {
    const float* a = acc + i * cols;
    if (!kl.pairs) {
      std::uint16_t* kr = kh + (r0 + i) * s.ldk;
      g.round_bf16(a, kr, s.nope);
      std::memcpy(kr + s.nope, qz.rope.data() + (r0 + i) * s.rope, s.rope * sizeof(std::uint16_t));
    }
    g.round_bf16(a + s.nope, vh + (r0 + i) * s.v, s.v);
  }
}

// Step 7 for head h (local index hl) and queries [i0, i1) of a sequence whose query i sees keys
// [0, visible(i)).
template <class Visible>
void attend(const Shape& s, const simd::GemmKernels& g, const std::uint16_t* q, std::size_t h, std::size_t hl,
            const KLayout& kl, const std::uint16_t* k, const Quantized& qz, const std::uint16_t* v, std::size_t first_t,
            std::size_t i0,
            std::size_t i1, float scale, Visible visible, std::uint16_t* out) {
  const std::size_t mq = i1 - i0;
  const std::uint16_t* kh = k + hl * kl.head_words;
  const std::uint16_t* vh = v + hl * kl.rows * s.v;
  auto* sbuf = static_cast<float*>(thread_scratch((kQueryTile * kKeyChunk + kQueryTile * s.v + 2 * kQueryTile) *
                                                      sizeof(float), 2));
  float* o = sbuf + kQueryTile * kKeyChunk;
  float* m = o + kQueryTile * s.v;
  float* l = m + kQueryTile;
  std::fill(o, o + mq * s.v, 0.0f);
  std::fill(m, m + mq, -std::numeric_limits<float>::infinity());
  std::fill(l, l + mq, 0.0f);
  const std::uint16_t* qt = q + ((first_t + i0) * s.H + h) * s.qk;
  const std::size_t keys = visible(i1 - 1);  // the tile's last query sees the most
  for (std::size_t j0 = 0; j0 < keys; j0 += kKeyChunk) {
    const std::size_t cnt = std::min(kKeyChunk, keys - j0);
    if (kl.pairs) {
      // One chain per score over the nope pairs, then on over the rope pairs (the second call
      // starts from the first's exact f32 sums).
      g.bf16_nn(mq, cnt, s.nope, qt, s.H * s.qk, kh + kl.nope.pair_word(0, j0), 2 * kKeyChunk, sbuf, kKeyChunk, false);
      g.bf16_nn(mq, cnt, s.rope, qt + s.nope, s.H * s.qk, qz.rope_pairs.data() + qz.rope_chunks.pair_word(0, j0),
                2 * kKeyChunk, sbuf, kKeyChunk, true);
    } else {
      g.bf16_bf16(mq, cnt, s.qk, qt, s.H * s.qk, kh + j0 * s.ldk, s.ldk, sbuf, kKeyChunk, false);
    }
    for (std::size_t r = 0; r < mq; ++r) {
      float* sr = sbuf + r * kKeyChunk;
      const std::size_t vis_all = visible(i0 + r);
      const std::size_t vis = vis_all <= j0 ? 0 : std::min(cnt, vis_all - j0);
      std::fill(sr + vis, sr + cnt, 0.0f);  // keys this query does not see weigh 0
      if (vis > 0) online_softmax_step(g, sr, nullptr, scale, vis, m[r], l[r], o + r * s.v, s.v);
    }
    g.f32_bf16_nn(mq, s.v, cnt, sbuf, kKeyChunk, vh + j0 * s.v, s.v, o, s.v, true);
  }
  for (std::size_t r = 0; r < mq; ++r) {
    std::uint16_t* dst = out + ((first_t + i0 + r) * s.H + h) * s.v;
    if (visible(i0 + r) == 0) {
      std::memset(dst, 0, s.v * sizeof(std::uint16_t));
    } else if (m[r] == -std::numeric_limits<float>::infinity()) {
      for (std::size_t d = 0; d < s.v; ++d) dst[d] = f32_to_bf16(std::numeric_limits<float>::quiet_NaN());
    } else {
      for (std::size_t d = 0; d < s.v; ++d) dst[d] = f32_to_bf16(o[r * s.v + d] / l[r]);
    }
  }
}

}  // namespace

Status mla_prefill_fp8(const MlaPrefillFp8Desc& d, const MlaPrefillFp8Args& a) {
  namespace quant = mla_prefill_fp8_quant;
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
  s.ldk = round_up(s.qk, 32);

  rope_and_norm(s, d, a);

  const simd::GemmKernels& g = gemm_kernels();
  const simd::Fp8DecodeKernels& dec = fp8_decode_kernels();
  const simd::Fp8QuantKernels& fq = fp8_quant_kernels();
  // The KV GEMM on the bf16 NN tile where the level has it and no pair straddles a scale group.
  const bool nn = g.bf16_nn != nullptr && s.bk % 2 == 0;
  const std::size_t wz_words = nn ? (s.latent + 1) / 2 * 2 * s.kv_cols : 0;
  const std::size_t B = static_cast<std::size_t>(a.input_row_offsets.shape[0] - 1);
  const auto* iro = a.input_row_offsets.as<const std::uint32_t>();
  const auto* bro = a.buffer_row_offsets.as<const std::uint32_t>();
  const auto* cache_offsets = a.cache_offsets.as<const std::uint32_t>();
  const auto* cache_lengths = a.kv_cache.cache_lengths.as<const std::uint32_t>();
  const auto* lut = a.kv_cache.lookup_table.as<const std::uint32_t>();
  const std::size_t lut_cols = static_cast<std::size_t>(a.kv_cache.lookup_table.shape[1]);
  const std::int64_t page = a.kv_cache.page_size();
  const auto* blocks = a.kv_cache.blocks.as<const std::uint16_t>();
  const auto* q = a.q.as<const std::uint16_t>();
  const auto* w = a.kv_b_proj.as<const std::uint8_t>();
  const auto* w_scale = a.kv_b_proj_scale.as<const float>();
  auto* out = a.output.as<std::uint16_t>();

  Quantized qz;
  // Zipped weights of heads [wz_h0, wz_h0 + wz_hn): they depend on the weights alone, so a head
  // group that fits every sequence is zipped once per call.
  std::vector<std::uint16_t> wz;
  std::size_t wz_h0 = 0, wz_hn = 0;
  for (std::size_t b = 0; b < B; ++b) {
    const std::size_t first_t = iro[b], seq_len = iro[b + 1] - first_t;
    if (seq_len == 0) continue;
    const std::int64_t window = static_cast<std::int64_t>(bro[b + 1]) - bro[b];
    const std::int64_t offset = cache_offsets[b], cache_len = cache_lengths[b];
    const std::int64_t last_pos = cache_len + static_cast<std::int64_t>(seq_len) - 1;
    const std::size_t rows = last_pos < offset ? 0 : static_cast<std::size_t>(std::min(window, last_pos - offset + 1));
    auto visible = [&](std::size_t i) -> std::size_t {
      const std::int64_t pos = cache_len + static_cast<std::int64_t>(i);
      return pos < offset ? 0 : std::min<std::size_t>(rows, static_cast<std::size_t>(pos - offset + 1));
    };

    // Steps 3-4.
    qz.codes.resize(rows * s.latent);
    const bool pairs = g.bf16_nn != nullptr;
    qz.sa.resize(rows * s.groups);
    qz.rope.resize(rows * s.rope);
    qz.xb.resize(nn ? rows * s.latent : 0);
    qz.rope_chunks.npairs = (s.rope + 1) / 2;
    qz.rope_pairs.resize(pairs ? qz.rope_chunks.words(rows) : 0);
    parallel_for_tiles(rows, kRowTile, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t j = r0; j < r1; ++j) {
        const std::int64_t pos = offset + static_cast<std::int64_t>(j);
        const std::int64_t blk = lut[b * lut_cols + static_cast<std::size_t>(pos / page)];
        const std::uint16_t* row = blocks + a.kv_cache.row_offset(blk, 0, a.layer_idx, pos % page, 0);
        for (std::size_t gi = 0; gi < s.groups; ++gi) {
          const std::size_t k0 = gi * s.bk, kn = std::min(s.bk, s.latent - k0);
          const float sa = quant::group_scale(fq.amax_bf16(row + k0, kn));
          fq.encode_bf16(row + k0, kn, quant::group_inverse(sa), qz.codes.data() + j * s.latent + k0);
          qz.sa[gi * rows + j] = sa;
        }
        std::memcpy(qz.rope.data() + j * s.rope, row + s.latent, s.rope * sizeof(std::uint16_t));
        if (pairs)
          for (std::size_t e = 0; e < s.rope; ++e) qz.rope_pairs[qz.rope_chunks.pair_word(e / 2, j) + e % 2] = row[s.latent + e];
        if (pairs && s.rope % 2) qz.rope_pairs[qz.rope_chunks.pair_word(s.rope / 2, j) + 1] = 0;
        if (nn) dec.to_bf16(qz.codes.data() + j * s.latent, qz.xb.data() + j * s.latent, s.latent);
      }
    });

    // Heads in groups whose K and V fit the workspace budget.
    KLayout kl{};
    kl.pairs = pairs;
    kl.rows = rows;
    kl.nope.npairs = (s.nope + 1) / 2;
    kl.head_words = kl.pairs ? kl.nope.words(rows) : std::max<std::size_t>(1, rows) * s.ldk;
    const std::size_t head_bytes = (kl.head_words + wz_words) * sizeof(std::uint16_t) +
                                   std::max<std::size_t>(1, rows) * s.v * sizeof(std::uint16_t);
    const std::size_t hg = items_within_budget(head_bytes, s.H);
    const auto k = std::make_unique_for_overwrite<std::uint16_t[]>(hg * kl.head_words);
    const auto v = std::make_unique_for_overwrite<std::uint16_t[]>(hg * std::max<std::size_t>(1, rows) * s.v);
    for (std::size_t h0 = 0; h0 < s.H; h0 += hg) {
      const std::size_t hn = std::min(hg, s.H - h0);
      if (nn && rows > 0 && (wz_h0 != h0 || wz_hn != hn)) {
        wz.resize(hn * wz_words);
        parallel_for_tiles(hn, 1, [&](std::size_t hb, std::size_t he) {
          for (std::size_t hl = hb; hl < he; ++hl) zip_weights(s, dec, w, h0 + hl, wz.data() + hl * wz_words);
        });
        wz_h0 = h0;
        wz_hn = hn;
      }
      const std::size_t row_tiles = num_tiles(rows, kRowTile);
      parallel_for_tiles(row_tiles * hn, 1, [&](std::size_t t0, std::size_t t1) {
        for (std::size_t t = t0; t < t1; ++t) {
          const std::size_t hl = t / row_tiles, r0 = (t % row_tiles) * kRowTile;
          project(s, g, qz, w, nn ? wz.data() + hl * wz_words : nullptr, w_scale, h0 + hl, hl, r0,
                  std::min(rows, r0 + kRowTile), kl, k.get(), v.get());
        }
      });
      const std::size_t q_tiles = num_tiles(seq_len, kQueryTile);
      parallel_for_tiles(q_tiles * hn, 1, [&](std::size_t t0, std::size_t t1) {
        for (std::size_t t = t0; t < t1; ++t) {
          const std::size_t hl = t / q_tiles, i0 = (t % q_tiles) * kQueryTile;
          attend(s, g, q, h0 + hl, hl, kl, k.get(), qz, v.get(), first_t, i0, std::min(seq_len, i0 + kQueryTile),
                 d.scale, visible, out);
        }
      });
    }
  }
  return Status::success();
}

}  // namespace mlakit::cpu
