// Step 2 of mla_prefill_fp8 under the deepseek profiles (docs/mla_prefill_fp8.md §9): DeepSeek's
// RMSNorm, y = gamma · (x · 1/sqrt(mean(x²) + eps)), rounded once to bf16. The reference and the
// cpu back-end both compute it here in f64 (squares summed in ascending order, then each element's
// two products), so their normalized rows agree bit for bit; gamma may be bf16 or f32.
#pragma once

#include <cmath>
#include <cstdint>

#include "mlakit/dtype.hpp"

namespace mlakit::mla_prefill_fp8_norm {

// f64 -> bf16 with a single rounding (nearest, ties to even). Going through f32 with plain
// rounding could round twice; rounding to f32 "to odd" first keeps the result exact, because f32
// carries more than two bits beyond bf16's precision.
inline std::uint16_t bf16_once(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d)) return f32_to_bf16(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // toward zero
  std::uint32_t bits = f32_to_bits(f);
  if (static_cast<double>(f) != d) bits |= 1u;  // inexact: make the last bit odd
  return f32_to_bf16(bits_to_f32(bits));
}

// The latent part x[0, n) of one cache row, normalized in place with one rounding per element.
// gamma: n bf16 values, or n f32 values when gamma_f32.
inline void rms_norm_once(std::uint16_t* x, std::int64_t n, const void* gamma, bool gamma_f32, float epsilon) {
  double sum_sq = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    const double v = static_cast<double>(bf16_to_f32(x[k]));
    sum_sq += v * v;
  }
  const double r = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + static_cast<double>(epsilon));
  for (std::int64_t k = 0; k < n; ++k) {
    const double g = gamma_f32 ? static_cast<double>(static_cast<const float*>(gamma)[k])
                               : static_cast<double>(bf16_to_f32(static_cast<const std::uint16_t*>(gamma)[k]));
    x[k] = bf16_once(g * (static_cast<double>(bf16_to_f32(x[k])) * r));
  }
}

}  // namespace mlakit::mla_prefill_fp8_norm
