#include "oracle/msa_block_indexer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace mlakit::testing {
namespace {

// Row-major dense matrix of doubles.
struct Matrix {
  std::int64_t rows = 0, cols = 0;
  std::vector<double> v;
  Matrix(std::int64_t r, std::int64_t c, double fill = 0) : rows(r), cols(c), v(static_cast<std::size_t>(r * c), fill) {}
  double& at(std::int64_t r, std::int64_t c) { return v[static_cast<std::size_t>(r * cols + c)]; }
  double at(std::int64_t r, std::int64_t c) const { return v[static_cast<std::size_t>(r * cols + c)]; }
};

// C = A · Bᵀ (A: [m, k], B: [n, k]).
Matrix matmul_nt(const Matrix& a, const Matrix& b) {
  Matrix c(a.rows, b.rows);
  for (std::int64_t d = 0; d < a.cols; ++d)
    for (std::int64_t i = 0; i < a.rows; ++i) {
      const double x = a.at(i, d);
      for (std::int64_t j = 0; j < b.rows; ++j) c.at(i, j) += x * b.at(j, d);
    }
  return c;
}

}  // namespace

void msa_block_indexer_oracle(goldens::Bundle& b) {
  const auto& P = b.params;
  const std::int64_t heads = P.at("num_index_heads").get<std::int64_t>();
  const std::int64_t dim = P.at("idx_head_dim").get<std::int64_t>();
  const std::int64_t bs = P.at("block_size").get<std::int64_t>();
  const std::int64_t topk = P.at("topk").get<std::int64_t>();
  const std::int64_t init = P.at("init_blocks").get<std::int64_t>();
  const std::int64_t local = P.at("local_blocks").get<std::int64_t>();
  const double scale = P.at("scale").get<float>();
  const std::int64_t layer = P.at("layer_idx").get<std::int64_t>();
  const std::int64_t k_heads = P.value("num_k_heads", std::int64_t{1});
  const bool reduce = P.value("reduce_heads", false);

  const goldens::Tensor& q = b.at("q");
  const goldens::Tensor& offsets = b.at("input_row_offsets");
  const goldens::Tensor& prefix = b.at("prefix_lens");
  const goldens::Tensor& blocks = b.at("k_cache.blocks");
  const goldens::Tensor& lut = b.at("k_cache.lookup_table");
  const std::int64_t rows = q.shape()[0];
  const std::int64_t batch = offsets.numel() - 1;
  const auto& bshape = blocks.shape();  // [num_blocks, kv_dim, layers, page, heads, Di]
  const std::int64_t layers = bshape[2], page = bshape[3];

  goldens::Tensor& out = b.add("out.out_idxs", DType::i32, {reduce ? 1 : heads, rows, topk});
  std::fill_n(out.data<std::int32_t>(), out.numel(), -1);
  const double nan = std::numeric_limits<double>::quiet_NaN();

  for (std::int64_t s = 0; s < batch; ++s) {
    const std::int64_t r0 = static_cast<std::int64_t>(offsets.value(s));
    const std::int64_t n = static_cast<std::int64_t>(offsets.value(s + 1)) - r0;
    if (n == 0) continue;
    const std::int64_t p0 = static_cast<std::int64_t>(prefix.value(s));
    const std::int64_t keys = p0 + n;
    // K of the sequence per K head, dequantized: [keys, Di] each.
    std::vector<Matrix> k(static_cast<std::size_t>(k_heads), Matrix(keys, dim));
    for (std::int64_t kh = 0; kh < k_heads; ++kh)
      for (std::int64_t pos = 0; pos < keys; ++pos) {
        const std::int64_t blk = static_cast<std::int64_t>(lut.value(s * lut.shape()[1] + pos / page));
        const std::int64_t base = ((((blk * layers) + layer) * page + pos % page) * k_heads + kh) * dim;  // kv_dim = 1
        for (std::int64_t d = 0; d < dim; ++d) k[kh].at(pos, d) = blocks.value(base + d);
      }
    const std::int64_t nb_max = (keys + bs - 1) / bs;
    // Per head: block maxima [n, nb_max] and the count of visible keys per block.
    std::vector<Matrix> head_max;
    Matrix bcount(n, nb_max, 0);
    for (std::int64_t h = 0; h < heads; ++h) {
      Matrix qm(n, dim);
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t d = 0; d < dim; ++d) qm.at(i, d) = q.value(((r0 + i) * heads + h) * dim + d);
      Matrix scores = matmul_nt(qm, k[h / (heads / k_heads)]);
      // Mask: key j is visible to local row i iff j < p0 + i + 1.
      std::vector<char> visible(static_cast<std::size_t>(n * keys));
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < keys; ++j) {
          visible[static_cast<std::size_t>(i * keys + j)] = j < p0 + i + 1;
          scores.at(i, j) *= scale;
        }
      // Fold keys into [nb_max, bs] and reduce (NaN-propagating max over visible keys).
      Matrix bmax(n, nb_max, -std::numeric_limits<double>::infinity());
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t c = 0; c < nb_max; ++c)
          for (std::int64_t o = 0; o < bs; ++o) {
            const std::int64_t j = c * bs + o;
            if (j >= keys || !visible[static_cast<std::size_t>(i * keys + j)]) continue;
            if (h == 0) bcount.at(i, c) += 1;
            const double x = scores.at(i, j);
            if (std::isnan(x) || std::isnan(bmax.at(i, c))) bmax.at(i, c) = nan;
            else bmax.at(i, c) = std::max(bmax.at(i, c), x);
          }
      head_max.push_back(std::move(bmax));
    }
    // reduce_heads: one score row per query, the NaN-propagating maximum over heads.
    if (reduce) {
      for (std::int64_t h = 1; h < heads; ++h)
        for (std::size_t e = 0; e < head_max[0].v.size(); ++e) {
          double& m = head_max[0].v[e];
          const double x = head_max[h].v[e];
          m = std::isnan(m) || std::isnan(x) ? nan : std::max(m, x);
        }
      head_max.erase(head_max.begin() + 1, head_max.end());
    }
    for (std::int64_t h = 0; h < static_cast<std::int64_t>(head_max.size()); ++h) {
      const Matrix& bmax = head_max[h];
      for (std::int64_t i = 0; i < n; ++i) {
        std::int64_t nb = 0;
        while (nb < nb_max && bcount.at(i, nb) > 0) ++nb;  // candidate blocks: those with a visible key
        std::vector<double> sc(static_cast<std::size_t>(nb));
        for (std::int64_t c = 0; c < nb; ++c) {
          sc[c] = bmax.at(i, c);
          if (c < init) sc[c] = static_cast<double>(1e30f);
        }
        for (std::int64_t c = std::max<std::int64_t>(0, nb - local); c < nb; ++c) sc[c] = static_cast<double>(1e29f);
        std::vector<std::int64_t> order(static_cast<std::size_t>(nb));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](std::int64_t x, std::int64_t y) {
          if (std::isnan(sc[y])) return !std::isnan(sc[x]);
          if (std::isnan(sc[x])) return false;
          return sc[x] > sc[y];
        });
        std::int32_t* row = out.data<std::int32_t>() + (h * rows + r0 + i) * topk;
        for (std::int64_t c = 0; c < nb && c < topk && !std::isnan(sc[order[c]]); ++c)
          row[c] = static_cast<std::int32_t>(order[c]);
      }
    }
  }
}

}  // namespace mlakit::testing
