#include "reference/lightning_indexer.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "mlakit/dtype.hpp"

namespace mlakit::reference {
namespace {

// Exact f64 value of every fp8 code (NaN codes decode to NaN).
std::array<double, 256> fp8_table() {
  std::array<double, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = static_cast<double>(f8e4m3_to_f32(static_cast<std::uint8_t>(c)));
  return t;
}

// IEEE 754 maximum(x, +0): NaN stays NaN, −0 becomes +0.
double relu(double x) { return std::isnan(x) ? x : (x > 0.0 ? x : 0.0); }

// Spec order: higher score first; equal scores (+0 == −0) by smaller position; NaN after every
// number, NaNs by smaller position.
struct RanksBefore {
  const std::vector<double>* score;
  bool operator()(std::int32_t a, std::int32_t b) const {
    const double sa = (*score)[a], sb = (*score)[b];
    const bool na = std::isnan(sa), nb = std::isnan(sb);
    if (na != nb) return nb;
    if (!na && sa != sb) return sa > sb;
    return a < b;
  }
};

}  // namespace

void lightning_indexer(const LightningIndexerDesc& desc, const LightningIndexerArgs& args) {
  static const std::array<double, 256> kDecode = fp8_table();
  const std::int64_t H = desc.num_heads, D = desc.head_dim, top_k = desc.top_k;
  const PagedKVCacheView& cache = args.k_cache;
  const auto* q = args.q.as<const std::uint8_t>();
  const auto* q_s = args.q_s.as<const float>();
  const auto* offsets = args.input_row_offsets.as<const std::uint32_t>();
  const auto* blocks = cache.blocks.as<const std::uint8_t>();
  const auto* k_scales = cache.scales.as<const float>();
  const auto* lut = cache.lookup_table.as<const std::uint32_t>();
  const auto* cache_lengths = cache.cache_lengths.as<const std::uint32_t>();
  auto* out = args.output_indices.as<std::int32_t>();
  const std::int64_t B = args.input_row_offsets.shape[0] - 1;
  const std::int64_t max_pages = cache.lookup_table.shape[1];
  const std::int64_t page_size = cache.page_size();
  const std::int64_t layer = args.layer_idx;

  std::vector<double> qd(static_cast<std::size_t>(H * D)), kd(static_cast<std::size_t>(D));
  std::vector<double> score;
  std::vector<std::int32_t> order;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t first = offsets[b], last = offsets[b + 1];
    const std::int64_t cache_len = cache_lengths[b];
    for (std::int64_t t = first; t < last; ++t) {
      const std::int64_t i = t - first;
      const std::int64_t n = desc.mask == IndexerMask::causal ? cache_len + i + 1 : cache_len + (last - first);
      for (std::int64_t e = 0; e < H * D; ++e) qd[e] = kDecode[q[t * H * D + e]];
      score.assign(static_cast<std::size_t>(n), 0.0);
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t blk = lut[b * max_pages + j / page_size];
        const std::int64_t off = j % page_size;
        const std::uint8_t* k = blocks + cache.row_offset(blk, 0, layer, off, 0);
        for (std::int64_t d = 0; d < D; ++d) kd[d] = kDecode[k[d]];
        const double k_scale = k_scales[cache.scale_offset(blk, 0, layer, off, 0)];
        double sum = 0.0;
        for (std::int64_t h = 0; h < H; ++h) {
          double dot = 0.0;  // exact: see the header
          for (std::int64_t d = 0; d < D; ++d) dot += qd[h * D + d] * kd[d];
          sum += relu(dot) * static_cast<double>(q_s[t * H + h]);
        }
        score[j] = k_scale * sum;
      }
      const std::int64_t m = std::min(top_k, n);
      order.resize(static_cast<std::size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + m, order.end(), RanksBefore{&score});
      std::int32_t* row = out + t * top_k;
      for (std::int64_t c = 0; c < m; ++c) row[c] = order[c];
      for (std::int64_t c = m; c < top_k; ++c) row[c] = -1;
    }
  }
}

}  // namespace mlakit::reference
