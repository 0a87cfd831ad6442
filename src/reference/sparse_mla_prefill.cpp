#include "reference/sparse_mla_prefill.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "core/shared/cache_rows.hpp"

namespace mlakit::reference {

std::uint16_t bf16_from_f64(double x) {
  float f = static_cast<float>(x);  // nearest
  if (!std::isnan(x) && static_cast<double>(f) != x) {
    // Inexact: redo the f32 step as round-to-odd (toward zero, then force the last bit to 1).
    // f32 keeps 16 more bits than bf16, so the second rounding then gives the correctly
    // rounded bf16 value (rounding twice to nearest could land on a false tie).
    if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
    f = bits_to_f32(f32_to_bits(f) | 1u);
  }
  return f32_to_bf16(f);
}

namespace {

// Index slot value as the spec encodes it: an i32 (a u32 tensor is the same bit pattern).
std::int64_t slot_value(const TensorView& indices, std::int64_t i) {
  if (indices.dtype == DType::u32)
    return static_cast<std::int32_t>(static_cast<const std::uint32_t*>(indices.data)[i]);
  return static_cast<const std::int32_t*>(indices.data)[i];
}

}  // namespace

void sparse_mla_prefill(const SparseMlaPrefillDesc& d, const SparseMlaPrefillArgs& a) {
  const std::int64_t T = a.q.shape[0];
  const std::int64_t Hq = d.num_q_heads, qk = d.qk_depth, vd = d.v_depth, stride = d.indices_stride;
  const PagedKVCacheView& c = a.kv_cache;
  const std::int64_t page = c.page_size();
  const std::int64_t num_rows = c.num_blocks() * page;
  const bool fp8 = c.blocks.dtype == DType::f8e4m3;
  const auto* q = a.q.as<const std::uint16_t>();
  const auto* sink = a.attn_sink.present() ? a.attn_sink.as<const float>() : nullptr;
  auto* out = a.output.as<std::uint16_t>();
  auto* lse = a.lse.present() ? a.lse.as<float>() : nullptr;
  auto* max_logits = a.max_logits.present() ? a.max_logits.as<float>() : nullptr;

  std::vector<double> rows;    // the valid rows of one query token, decoded: [n, qk]
  std::vector<double> qrow(qk), s, acc(vd);
  for (std::int64_t t = 0; t < T; ++t) {
    std::int64_t len = a.topk_lengths.present() ? a.topk_lengths.as<const std::uint32_t>()[t] : stride;
    if (len > stride) len = stride;
    rows.clear();
    std::int64_t n = 0;
    for (std::int64_t p = 0; p < len; ++p) {
      const std::int64_t r = slot_value(a.indices, t * stride + p);
      if (r < 0 || r >= num_rows) continue;  // -1 / out of range: skipped
      const std::int64_t blk = r / page, off = r % page;
      const core::CacheRow at = core::cache_row(c, blk, 0, a.layer_idx, off, 0);
      rows.resize(static_cast<std::size_t>((n + 1) * qk));
      double* dst = rows.data() + n * qk;
      if (fp8) {  // the quantized part: column k has the scale of its group k / quant_granularity
        const std::int64_t wq = c.quantized_size(), g = c.quant_granularity;
        const auto* codes = c.blocks.as<const std::uint8_t>() + at.codes;
        for (std::int64_t k = 0; k < wq; ++k)
          dst[k] = static_cast<double>(f8e4m3_to_f32(codes[k])) * core::cache_scale(c, at.scales + k / g);
        const auto* tail = c.tail_size() > 0 ? c.tail.as<const std::uint16_t>() + at.tail : nullptr;
        for (std::int64_t k = wq; k < qk; ++k) dst[k] = bf16_to_f32(tail[k - wq]);
      } else {
        const auto* vals = c.blocks.as<const std::uint16_t>() + at.codes;
        for (std::int64_t k = 0; k < qk; ++k) dst[k] = bf16_to_f32(vals[k]);
      }
      ++n;
    }

    for (std::int64_t h = 0; h < Hq; ++h) {
      std::uint16_t* o = out + (t * Hq + h) * vd;
      if (n == 0) {
        for (std::int64_t j = 0; j < vd; ++j) o[j] = 0;  // +0.0 in bf16
        if (lse) lse[t * Hq + h] = std::numeric_limits<float>::infinity();
        if (max_logits) max_logits[t * Hq + h] = -std::numeric_limits<float>::infinity();
        continue;
      }
      for (std::int64_t k = 0; k < qk; ++k) qrow[k] = bf16_to_f32(q[(t * Hq + h) * qk + k]);
      s.assign(static_cast<std::size_t>(n), 0.0);
      double m = -std::numeric_limits<double>::infinity();
      for (std::int64_t i = 0; i < n; ++i) {
        const double* row = rows.data() + i * qk;
        double dot = 0;
        for (std::int64_t k = 0; k < qk; ++k) dot += qrow[k] * row[k];
        s[i] = static_cast<double>(d.scale) * dot;
        if (std::isnan(s[i]) || s[i] > m) m = s[i];  // a NaN score makes m NaN; NaN > x is false, so it sticks
      }
      double l = 0;
      for (double& x : acc) x = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const double e = std::exp(s[i] - m);
        l += e;
        const double* row = rows.data() + i * qk;
        for (std::int64_t j = 0; j < vd; ++j) acc[j] += e * row[j];
      }
      const double den = l + (sink ? std::exp(static_cast<double>(sink[h]) - m) : 0.0);
      for (std::int64_t j = 0; j < vd; ++j) o[j] = bf16_from_f64(acc[j] / den);
      if (lse) lse[t * Hq + h] = static_cast<float>(m + std::log(l));
      if (max_logits) max_logits[t * Hq + h] = static_cast<float>(m);
    }
  }
}

}  // namespace mlakit::reference
