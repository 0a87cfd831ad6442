// One step of an online (FlashAttention-style) softmax for one query row, shared by the cpu
// attention operators: the chunk's raw scores become weights exp(s - m) in place, the running
// maximum m and sum l move on, and the row's accumulated output is rescaled to the new maximum.
//
// NaN follows the reference: a NaN score makes m NaN for the rest of the row (so the output and
// lse become NaN). Scores that are all -inf so far leave nothing to add: the weights are 0 and m
// stays -inf (the caller's end of row then gives what the reference's exp(-inf - (-inf)) gives).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "simd/gemm.hpp"

namespace mlakit::cpu {

// s[0, n): the chunk's scores before scaling, times f[i] (when f is not null) and `scale`, replaced
// by the weights; m, l: the row's running maximum and sum (start at -inf and 0); o[0, width): the
// row's output so far, rescaled when m grows.
inline void online_softmax_scaled(const simd::GemmKernels& g, float* s, float cm, std::size_t n, float& m, float& l,
                                  float* o, std::size_t width);

inline void online_softmax_step(const simd::GemmKernels& g, float* s, const float* f, float scale, std::size_t n,
                                float& m, float& l, float* o, std::size_t width) {
  online_softmax_scaled(g, s, g.scale_max(s, f, scale, n), n, m, l, o, width);
}

// The same step on scores already scaled, whose maximum (NaN if any is NaN) is cm.
inline void online_softmax_scaled(const simd::GemmKernels& g, float* s, float cm, std::size_t n, float& m, float& l,
                                  float* o, std::size_t width) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const float mn = std::isnan(m) || std::isnan(cm) ? std::numeric_limits<float>::quiet_NaN() : std::max(m, cm);
  if (mn == kNegInf) {
    std::fill(s, s + n, 0.0f);
    return;
  }
  const float alpha = m == kNegInf ? 0.0f : std::exp(m - mn);
  l = l * alpha + g.exp_sum(s, mn, n);
  m = mn;
  if (alpha != 1.0f)
    for (std::size_t j = 0; j < width; ++j) o[j] *= alpha;
}

}  // namespace mlakit::cpu
