// The oracle of fused_qkv_paged (docs/fused_qkv_paged.md): every weight element is decoded where it is used, every
// product x·w is exact in f64 (bf16/f32 activations times a bf16, f32 or fp8·f32 weight), the sum
// is accumulated in f64, and each result is rounded once to the dtype.
#include "reference/fused_qkv_paged.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace mlakit::reference {
namespace {

// f64 -> f32 rounding to odd: the nearest f32 toward zero, with its last bit forced to 1 when the
// conversion is inexact. Rounding that to bf16 (ties to even) equals rounding the f64 to bf16
// directly, because f32 keeps more than two extra bits.
float to_f32_round_odd(double v) {
  if (std::isnan(v) || std::isinf(v)) return static_cast<float>(v);
  float f = static_cast<float>(v);  // nearest even
  if (static_cast<double>(f) == v) return f;
  if (std::isinf(f)) f = std::copysign(std::numeric_limits<float>::max(), f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= 1u;
  std::memcpy(&f, &u, 4);
  return f;
}

void store(DType dt, void* base, std::int64_t i, double v) {
  if (dt == DType::f32)
    static_cast<float*>(base)[i] = static_cast<float>(v);
  else
    static_cast<std::uint16_t*>(base)[i] = f32_to_bf16(to_f32_round_odd(v));
}

double load_act(DType dt, const void* base, std::int64_t i) {
  return dt == DType::f32 ? static_cast<const float*>(base)[i] : bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
}

std::uint32_t nibble(std::uint32_t word, std::int64_t i) { return (word >> (4 * i)) & 0xFu; }

// W[n, k] of the validated weight, exactly.
struct Weight {
  const FusedQkvPagedDesc& d;
  const FusedQkvPagedArgs& a;
  std::int64_t N, K;

  double operator()(std::int64_t n, std::int64_t k) const {
    switch (d.weight_format) {
      case WeightFormat::dense:
        return load_act(a.weight.dtype, a.weight.data, n * K + k);
      case WeightFormat::fp8_block: {
        const double code = f8e4m3_to_f32(static_cast<const std::uint8_t*>(a.weight.data)[n * K + k]);
        const std::int64_t kb = (K + 127) / 128;
        return code * static_cast<const float*>(a.weight_scale.data)[(n / 128) * kb + k / 128];
      }
      case WeightFormat::gptq: {
        const auto* qw = static_cast<const std::uint32_t*>(a.qweight.data);
        const std::int64_t q = nibble(qw[(k / 8) * N + n], k % 8);
        const std::int64_t g =
            a.g_idx.data != nullptr ? static_cast<const std::int32_t*>(a.g_idx.data)[k] : k / d.group_size;
        std::int64_t z = 8;
        if (d.has_zp)
          z = nibble(static_cast<const std::uint32_t*>(a.qzeros.data)[g * (N / 8) + n / 8], n % 8) + zero_bias(d);
        const std::uint16_t sbits = static_cast<const std::uint16_t*>(a.scales.data)[g * N + n];
        const float s = a.scales.dtype == DType::f16 ? f16_to_f32(sbits) : bf16_to_f32(sbits);
        // (q − z) has 5 significant bits and s at most 11: the f32 product is exact.
        return round_to_bf16(static_cast<float>(q - z) * s);
      }
    }
    return 0;
  }
};

}  // namespace

void fused_qkv_paged(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a) {
  const DType dt = a.hidden_state.dtype;
  const std::int64_t K = a.hidden_state.shape[1];
  const PagedKVCacheView& kc = a.kv_cache;
  const std::int64_t hd = kc.head_size(), hkv = kc.num_kv_heads(), ps = kc.page_size();
  const std::int64_t N = d.q_dim + kc.kv_dim() * hkv * hd;
  const std::int64_t B = a.input_row_offsets.shape[0] - 1;
  const std::int64_t max_pages = kc.lookup_table.shape[1];
  const auto* iro = static_cast<const std::uint32_t*>(a.input_row_offsets.data);
  const auto* lut = static_cast<const std::uint32_t*>(kc.lookup_table.data);
  const auto* lens = static_cast<const std::uint32_t*>(kc.cache_lengths.data);
  const Weight w{d, a, N, K};

  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t t = iro[b]; t < std::int64_t(iro[b + 1]); ++t) {
      const std::int64_t pos = std::int64_t(lens[b]) + (t - iro[b]);
      const std::int64_t blk = lut[b * max_pages + pos / ps];
      for (std::int64_t c = 0; c < N; ++c) {
        double acc = 0;
        for (std::int64_t k = 0; k < K; ++k) acc += load_act(dt, a.hidden_state.data, t * K + k) * w(c, k);
        if (c < d.q_dim) {
          store(dt, a.output.data, t * d.q_dim + c, acc);
          continue;
        }
        const std::int64_t j = c - d.q_dim;  // MLA: kv = 0, h = 0, d = j
        const std::int64_t kv = j / (hkv * hd), h = (j / hd) % hkv, e = j % hd;
        store(dt, kc.blocks.data, kc.row_offset(blk, kv, a.layer_idx, pos % ps, h) + e, acc);
      }
    }
  }
}

}  // namespace mlakit::reference
