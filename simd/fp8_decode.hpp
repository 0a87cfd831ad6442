// FP8 (f8e4m3 "fn") decode kernels: ISA-neutral declarations (no intrinsics).
//
// Every kernel is bit-exact with mlakit::f8e4m3_to_f32 / f32_to_bf16 for all 256 codes:
// subnormals m*2^-9 exactly, 0x80 -> -0, 0x7F / 0xFF -> quiet NaN (sign kept: 0x7FC00000 /
// 0xFFC00000, bf16 0x7FC0 / 0xFFC0). Any n (including 0), any alignment.
//
// Two methods per level; `to_f32` / `to_bf16` are the level's faster one (measured), `*_alt` the
// other, kept for measurement and as a cross-check. The via-f16 method: E4M3's exponent and
// mantissa fields, shifted into f16's, give the f16 of value * 2^-8 for every finite code (fp8
// subnormals become f16 subnormals); the f16 converter (vcvtph2ps; by hand on generic) widens it,
// a multiply by 2^8 scales it back, and NaN codes are patched in f16. No operand is ever an f32
// subnormal, which matters for speed: with the fields moved straight into f32 and a multiply by
// 2^120, subnormal codes made f32 subnormal operands, and on N(0, 1) data (1.2 % subnormal codes)
// that took twice the time. It also keeps the results exact whatever MXCSR says: the converter
// reads f16 subnormals exactly under DAZ, and nothing it produces is subnormal. The table methods
// do not depend on MXCSR either.
//   generic:    main = scalar 256-entry table, alt = via f16 (4-lane vector extensions)
//   avx2:       main = via f16, alt = vpgatherdd from the f32 table
//   avx512:     main = via f16, alt = vpgatherdd
//   avx512bf16: main = vpermi2b byte tables (VBMI), alt = via f16
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
