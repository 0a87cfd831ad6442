// FP8 (f8e4m3 "fn") decode kernels: ISA-neutral declarations (no intrinsics).
//
// Every kernel is bit-exact with mlakit::f8e4m3_to_f32 / f32_to_bf16 for all 256 codes:
// subnormals m*2^-9 exactly, 0x80 -> -0, 0x7F / 0xFF -> quiet NaN (sign kept: 0x7FC00000 /
// 0xFFC00000, bf16 0x7FC0 / 0xFFC0). Any n (including 0), any alignment.
//
// Two methods per level; `to_f32` / `to_bf16` are the level's faster one (measured), `*_alt` the
// other, kept for measurement and as a cross-check. The rebias method: the 7 magnitude bits go to f32 bit positions 20..26 and
// a multiply by 2^120 rebiases the exponent (the multiply also turns the f32 subnormals that the
// fp8 subnormals become into the exact fp8 values), then NaN codes are patched and the sign is
// or-ed in. The multiply relies on the default floating-point environment: with MXCSR.DAZ set
// (denormals-are-zero) subnormal codes would decode as 0. The table methods do not depend on
// MXCSR.
//   generic:    main = scalar 256-entry table, alt = rebias (4-lane vector extensions)
//   avx2:       main = rebias, alt = vpgatherdd from the f32 table
//   avx512:     main = rebias, alt = vpgatherdd
//   avx512bf16: main = vpermi2b byte tables (VBMI; 2.8x the rebias to f32, 8.7x to bf16 on Zen 5),
//               alt = rebias
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlakit::simd {

struct Fp8DecodeKernels {
  const char* level;  // ISA level the table was compiled for
  void (*to_f32)(const std::uint8_t* src, float* dst, std::size_t n);
  void (*to_bf16)(const std::uint8_t* src, std::uint16_t* dst, std::size_t n);
  const char* kind;  // method of to_f32 / to_bf16
  void (*to_f32_alt)(const std::uint8_t* src, float* dst, std::size_t n);
  void (*to_bf16_alt)(const std::uint8_t* src, std::uint16_t* dst, std::size_t n);
  const char* alt_kind;
};

}  // namespace mlakit::simd
