// RoPE and RMSNorm on bf16 rows in place (op 3's steps 1-2): ISA-neutral declarations.
//
// Both kernels compute the reference back-end's f64 arithmetic bit for bit, so every back-end
// that uses them writes the same rotated and normalized values as the reference:
// * a product of a bf16 value and an f32 value is exact in f64 (at most 8 + 24 significant bits,
//   far from f64's range limits), so x0·c − x1·s is rounded once, to f64;
// * bf16(d) of an f64 d is the nearest bf16 (ties to even; beyond the largest finite value, inf),
//   rounded once: d is first rounded to f32 toward zero with the last bit set when inexact (round
//   to odd), which keeps the second rounding from landing on a false tie. NaN stays a quiet NaN.
// Any alignment; n, rows or pairs may be 0.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlakit::simd {

struct RopeNormKernels {
  const char* level;
  const char* kind;  // how the rounding runs
  // Interleaved RoPE: for each of `rows` vectors x + r·stride and each pair p < pairs,
  //   (x[2p], x[2p+1]) <- (bf16(x0·c − x1·s), bf16(x0·s + x1·c)),  (c, s) = (cs[2p], cs[2p+1]).
  void (*rope_bf16)(std::uint16_t* x, std::size_t stride, std::size_t rows, const float* cs, std::size_t pairs);
  // RMSNorm of n values: r = 1 / sqrt(Σ x² / n + eps) in f64 (the squares exact, summed in index
  // order), then x[i] <- bf16(bf16(x[i]·r)·gamma[i]) (the second product exact).
  void (*rms_norm_bf16)(std::uint16_t* x, std::size_t n, const std::uint16_t* gamma, float eps);
};

}  // namespace mlakit::simd
