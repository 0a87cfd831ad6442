#include "reference/msa_block_indexer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace mlakit::reference {
namespace {

// The forced scores, as the f32 constants an f32 kernel uses.
constexpr double kInitScore = static_cast<double>(1e30f);
constexpr double kLocalScore = static_cast<double>(1e29f);

// Key rows 0 .. count-1 of K head kh of sequence b, decoded exactly to f64, row-major [count, Di].
std::vector<double> gather_keys(const MsaBlockIndexerArgs& a, std::int64_t b, std::int64_t kh, std::int64_t count) {
  const PagedKVCacheView& c = a.k_cache;
  const std::int64_t dim = c.head_size();
  const std::int64_t page = c.page_size();
  const std::int64_t max_pages = c.lookup_table.shape[1];
  const auto* lut = c.lookup_table.as<const std::uint32_t>();
  std::vector<double> k(static_cast<std::size_t>(count * dim));
  for (std::int64_t p = 0; p < count; ++p) {
    const std::int64_t blk = lut[b * max_pages + p / page];
    const std::int64_t at = c.row_offset(blk, 0, a.layer_idx, p % page, kh);
    for (std::int64_t d = 0; d < dim; ++d) {
      double v;
      if (c.blocks.dtype == DType::f8e4m3)
        v = f8e4m3_to_f32(c.blocks.as<const std::uint8_t>()[at + d]);
      else
        v = bf16_to_f32(c.blocks.as<const std::uint16_t>()[at + d]);
      k[static_cast<std::size_t>(p * dim + d)] = v;
    }
  }
  return k;
}

}  // namespace

void msa_block_indexer(const MsaBlockIndexerDesc& desc, const MsaBlockIndexerArgs& a) {
  const std::int64_t heads = desc.num_index_heads;
  const std::int64_t group = heads / desc.num_k_heads;  // index heads per K head
  const std::int64_t dim = desc.idx_head_dim;
  const std::int64_t bs = desc.block_size;
  const std::int64_t topk = desc.topk;
  const std::int64_t rows = a.q.shape[0];
  const std::int64_t batch = a.input_row_offsets.shape[0] - 1;
  const double scale = desc.scale;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto* offsets = a.input_row_offsets.as<const std::uint32_t>();
  const auto* prefix = a.prefix_lens.as<const std::uint32_t>();
  const auto* q = a.q.as<const std::uint16_t>();
  auto* out = a.out_idxs.as<std::int32_t>();

  std::vector<double> qrow(static_cast<std::size_t>(dim));
  std::vector<double> s, head_s;
  std::vector<char> taken;
  std::vector<std::vector<double>> k(static_cast<std::size_t>(desc.num_k_heads));
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t r0 = offsets[b], r1 = offsets[b + 1];
    if (r0 == r1) continue;
    const std::int64_t p0 = prefix[b];
    for (std::int64_t kh = 0; kh < desc.num_k_heads; ++kh) k[kh] = gather_keys(a, b, kh, p0 + (r1 - r0));
    for (std::int64_t t = r0; t < r1; ++t) {
      const std::int64_t nk = p0 + (t - r0) + 1;  // causal: this token's key included
      const std::int64_t nb = (nk + bs - 1) / bs;
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::vector<double>& kk = k[h / group];
        for (std::int64_t d = 0; d < dim; ++d) qrow[d] = bf16_to_f32(q[(t * heads + h) * dim + d]);
        head_s.assign(static_cast<std::size_t>(nb), 0.0);
        for (std::int64_t c = 0; c < nb; ++c) {
          double best = -std::numeric_limits<double>::infinity();
          bool is_nan = false;
          const std::int64_t j_end = (c + 1) * bs < nk ? (c + 1) * bs : nk;
          for (std::int64_t j = c * bs; j < j_end; ++j) {
            double dot = 0.0;
            for (std::int64_t d = 0; d < dim; ++d) dot += qrow[d] * kk[static_cast<std::size_t>(j * dim + d)];
            const double score = scale * dot;
            if (std::isnan(score)) is_nan = true;
            else if (score > best) best = score;
          }
          head_s[c] = is_nan ? nan : best;
        }
        // reduce_heads: the IEEE maximum over heads, a NaN head score sticking.
        if (!desc.reduce_heads || h == 0) s = head_s;
        else
          for (std::int64_t c = 0; c < nb; ++c)
            s[c] = std::isnan(s[c]) || std::isnan(head_s[c]) ? nan : std::max(s[c], head_s[c]);
        if (desc.reduce_heads && h + 1 < heads) continue;

        for (std::int64_t c = 0; c < nb; ++c) {
          if (c < desc.init_blocks) s[c] = kInitScore;
          if (c >= nb - desc.local_blocks) s[c] = kLocalScore;  // applied second: wins over init
        }
        // Selection: repeatedly the best remaining non-NaN block; strict '>' keeps the smaller
        // block on ties (+0 == -0 included).
        std::int32_t* o = out + ((desc.reduce_heads ? 0 : h) * rows + t) * topk;
        taken.assign(static_cast<std::size_t>(nb), 0);
        const std::int64_t want = topk < nb ? topk : nb;
        std::int64_t n = 0;
        for (; n < want; ++n) {
          std::int64_t pick = -1;
          for (std::int64_t c = 0; c < nb; ++c) {
            if (taken[c] || std::isnan(s[c])) continue;
            if (pick < 0 || s[c] > s[pick]) pick = c;
          }
          if (pick < 0) break;  // only NaN left: the row stops early
          taken[pick] = 1;
          o[n] = static_cast<std::int32_t>(pick);
        }
        for (; n < topk; ++n) o[n] = -1;
      }
    }
  }
}

}  // namespace mlakit::reference
