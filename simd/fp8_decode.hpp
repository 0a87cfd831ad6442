// FP8 (f8e4m3 "fn") decode kernels: ISA-neutral declarations (no intrinsics).
//
// Every kernel is bit-exact with mlakit::f8e4m3_to_f32 / f32_to_bf16 for all 256 codes:
// subnormals m*2^-9 exactly, 0x80 -> -0, 0x7F / 0xFF -> quiet NaN (sign kept: 0x7FC00000 /
// 0xFFC00000, bf16 0x7FC0 / 0xFFC0). Any n (including 0), any alignment.
//
// The main kernels use the rebias trick: the 7 magnitude bits go to f32 bit positions 20..26 and
// a multiply by 2^120 rebiases the exponent (the multiply also turns the f32 subnormals that the
// fp8 subnormals become into the exact fp8 values), then NaN codes are patched and the sign is
// or-ed in. The multiply relies on the default floating-point environment: with MXCSR.DAZ set
// (denormals-are-zero) subnormal codes would decode as 0. The table variants (`*_lut`) do not
// depend on MXCSR.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlakit::simd {

struct Fp8DecodeKernels {
  const char* level;  // ISA level the table was compiled for
  void (*to_f32)(const std::uint8_t* src, float* dst, std::size_t n);
  void (*to_bf16)(const std::uint8_t* src, std::uint16_t* dst, std::size_t n);
  // Table-lookup variants (kept for measurement and as an MXCSR-independent path):
  // generic: scalar 256-entry table; avx2/avx512: vpgatherdd; avx512bf16: vpermi2b byte tables.
  void (*to_f32_lut)(const std::uint8_t* src, float* dst, std::size_t n);
  void (*to_bf16_lut)(const std::uint8_t* src, std::uint16_t* dst, std::size_t n);
  const char* lut_kind;
};

}  // namespace mlakit::simd
