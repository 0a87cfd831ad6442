// The oracle decodes fp8 from the bit fields with ldexp (not the library's decoder), gathers each
// sequence's keys into a dense f64 matrix, builds the [rows, positions] score matrix one head at a
// time (S += w_h · maximum(Q_h·Kᵀ, 0), then a column scaling by k_scale), and orders each row with a
// full stable sort, so ties and NaNs keep position order by stability rather than by an explicit
// tie-break.
#include "oracle/lightning_indexer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace mlakit::oracle {
namespace {

double decode_e4m3(std::uint8_t code) {
  const int sign = code >> 7, exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::nan("");
  const double magnitude = exponent == 0 ? std::ldexp(double(mantissa), -9)
                                         : std::ldexp(double(8 + mantissa), exponent - 10);
  return sign ? -magnitude : magnitude;
}

}  // namespace

void lightning_indexer(goldens::Bundle& b) {
  const auto& p = b.params;
  const std::int64_t H = p.at("num_heads"), D = p.at("head_dim"), top_k = p.at("top_k");
  const std::int64_t layer = p.at("layer_idx");
  const bool causal = p.at("mask").get<std::string>() == "causal";
  const goldens::Tensor& q = b.at("q");
  const goldens::Tensor& q_s = b.at("q_s");
  const goldens::Tensor& offsets = b.at("input_row_offsets");
  const goldens::Tensor& blocks = b.at("k_cache.blocks");
  const goldens::Tensor& scales = b.at("k_cache.scales");
  const goldens::Tensor& lut = b.at("k_cache.lookup_table");
  const goldens::Tensor& lens = b.at("k_cache.cache_lengths");
  const std::int64_t T = q.shape()[0];
  const std::int64_t num_layers = blocks.shape()[2], page_size = blocks.shape()[3];
  const std::int64_t scales_per_row = scales.shape()[5];
  const std::int64_t cols = lut.shape()[1];
  goldens::Tensor& out = b.add("out.output_indices", DType::i32, {T, top_k});

  for (std::int64_t s = 0; s + 1 < offsets.numel(); ++s) {
    const std::int64_t row0 = offsets.data<std::uint32_t>()[s];
    const std::int64_t rows = std::int64_t(offsets.data<std::uint32_t>()[s + 1]) - row0;
    if (rows == 0) continue;
    const std::int64_t cached = lens.data<std::uint32_t>()[s];
    const std::int64_t total = cached + rows;

    // Dense K [total, D] and its scales, gathered through the page table.
    std::vector<double> K(total * D), k_scale(total);
    for (std::int64_t j = 0; j < total; ++j) {
      const std::int64_t block = lut.data<std::uint32_t>()[s * cols + j / page_size];
      const std::int64_t token = (block * num_layers + layer) * page_size + j % page_size;  // kv_dim = heads = 1
      for (std::int64_t d = 0; d < D; ++d) K[j * D + d] = decode_e4m3(blocks.data<std::uint8_t>()[token * D + d]);
      k_scale[j] = scales.data<float>()[token * scales_per_row];
    }
    // Dense score matrix [rows, total], head by head.
    std::vector<double> S(rows * total, 0.0), Qh(rows * D);
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t d = 0; d < D; ++d)
          Qh[r * D + d] = decode_e4m3(q.data<std::uint8_t>()[((row0 + r) * H + h) * D + d]);
      for (std::int64_t r = 0; r < rows; ++r) {
        const double w = q_s.data<float>()[(row0 + r) * H + h];
        for (std::int64_t j = 0; j < total; ++j) {
          double acc = 0.0;
          for (std::int64_t d = 0; d < D; ++d) acc += Qh[r * D + d] * K[j * D + d];
          const double clipped = std::isnan(acc) ? acc : std::fmax(acc, 0.0);  // fmax is safe once NaN is excluded
          S[r * total + j] += clipped * w;
        }
      }
    }
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < total; ++j) S[r * total + j] *= k_scale[j];

    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t n = causal ? cached + r + 1 : total;
      const double* sc = &S[r * total];
      std::vector<std::int32_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [sc](std::int32_t a, std::int32_t c) {
        if (std::isnan(sc[a])) return false;
        return std::isnan(sc[c]) || sc[a] > sc[c];
      });
      std::int32_t* o = out.data<std::int32_t>() + (row0 + r) * top_k;
      for (std::int64_t col = 0; col < top_k; ++col) o[col] = col < n ? order[col] : -1;
    }
  }
}

}  // namespace mlakit::oracle
