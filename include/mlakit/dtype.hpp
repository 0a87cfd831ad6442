// Element types and their exact conversions (docs/README.md §2).
// Header-only and free of intrinsics so that host code, CUDA device code and the
// reference back-end all share one definition of every rounding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__CUDACC__)
#define MLAKIT_HD __host__ __device__ __forceinline__
#else
#define MLAKIT_HD inline
#endif

namespace mlakit {

// e8m0: an unsigned power-of-two scale byte (OCP MX "E8M0"): value 2^(e - 127), 0xFF is NaN.
enum class DType : std::uint8_t { f32, f64, bf16, f16, f8e4m3, i32, u32, u8, e8m0 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: case DType::i32: case DType::u32: return 4;
    case DType::bf16: case DType::f16: return 2;
    case DType::f8e4m3: case DType::u8: case DType::e8m0: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f8e4m3: return "f8e4m3";
    case DType::i32: return "i32";
    case DType::u32: return "u32";
    case DType::u8: return "u8";
    case DType::e8m0: return "e8m0";
  }
  return "?";
}

// Storage types: plain bit containers, so that buffers can be reinterpreted freely.
struct bf16_t { std::uint16_t bits; };
struct f16_t { std::uint16_t bits; };
struct f8e4m3_t { std::uint8_t bits; };

MLAKIT_HD float bits_to_f32(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

MLAKIT_HD std::uint32_t f32_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

// ---- bf16 -------------------------------------------------------------------
MLAKIT_HD float bf16_to_f32(std::uint16_t b) { return bits_to_f32(std::uint32_t(b) << 16); }

// Round to nearest, ties to even; NaN stays a quiet NaN of the same sign.
MLAKIT_HD std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = f32_to_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return std::uint16_t((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}

MLAKIT_HD float round_to_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// ---- f16 (IEEE binary16; GPTQ scales) -----------------------------------------
MLAKIT_HD float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  const std::uint32_t man = h & 0x3FFu;
  if (exp == 0x1Fu) return bits_to_f32(sign | 0x7F800000u | (man << 13));
  if (exp != 0) return bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
  // Subnormal: man * 2^-24, exact in f32.
  const float mag = float(man) * 5.9604644775390625e-8f;
  return sign ? -mag : mag;
}

MLAKIT_HD std::uint16_t f32_to_f16(float f) {
  const std::uint32_t u = f32_to_bits(f);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return std::uint16_t(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return std::uint16_t(sign | 0x7C00u);  // rounds past 65504 -> inf
  if (a < 0x38800000u) {                                        // result is f16-subnormal
    const float mag = bits_to_f32(a) * 16777216.0f;               // exact: scale by 2^24
    // Round to nearest even integer in [0, 1024].
    const float r = mag + 12582912.0f - 12582912.0f;              // 1.5·2^23 trick
    return std::uint16_t(sign | std::uint16_t(r));
  }
  std::uint32_t v = a - 0x38000000u;  // rebias exponent 127 -> 15
  v += 0xFFFu + ((v >> 13) & 1u);
  return std::uint16_t(sign | (v >> 13));
}

// ---- e8m0 (scale bytes) -----------------------------------------------------
// Exact: 2^(e - 127) for e < 255 (e = 0 is the f32 subnormal 2^-127), NaN for 0xFF.
MLAKIT_HD float e8m0_to_f32(std::uint8_t e) {
  if (e == 0xFFu) return bits_to_f32(0x7FC00000u);
  if (e == 0) return bits_to_f32(0x00400000u);
  return bits_to_f32(std::uint32_t(e) << 23);
}

// ---- f8e4m3 (OCP "fn") ------------------------------------------------------
// Exact decode: every code maps to its value; 0x7F/0xFF are NaN; subnormals m·2^-9.
MLAKIT_HD float f8e4m3_to_f32(std::uint8_t c) {
  const std::uint32_t sign = std::uint32_t(c & 0x80u) << 24;
  const std::uint32_t exp = (c >> 3) & 0xFu;
  const std::uint32_t man = c & 0x7u;
  if (exp == 0xFu && man == 0x7u) return bits_to_f32(sign | 0x7FC00000u);
  if (exp != 0) return bits_to_f32(sign | ((exp + 120u) << 23) | (man << 20));
  const float mag = float(man) * 0.001953125f;  // 2^-9
  return sign ? -mag : mag;
}

// Round to nearest even, saturate to ±448, NaN -> 0x7F.
MLAKIT_HD std::uint8_t f32_to_f8e4m3(float f) {
  const std::uint32_t u = f32_to_bits(f);
  const std::uint8_t sign = std::uint8_t((u >> 24) & 0x80u);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;
  if (a >= 0x43E00000u) return std::uint8_t(sign | 0x7E);  // |f| >= 448 (inf too): saturate
  if (a < 0x3C800000u) {                                   // |f| < 2^-6: subnormal range
    const float mag = bits_to_f32(a) * 512.0f;              // exact: in units of 2^-9
    const float r = mag + 12582912.0f - 12582912.0f;        // nearest even integer in [0, 8]
    return std::uint8_t(sign | std::uint8_t(r));            // 8 carries into the exponent field
  }
  std::uint32_t v = a - 0x3C000000u;  // rebias exponent 127 -> 7
  v += 0x7FFFFu + ((v >> 20) & 1u);
  std::uint32_t code = v >> 20;
  if (code > 0x7Eu) code = 0x7Eu;  // rounding up past 448 saturates
  return std::uint8_t(sign | code);
}

}  // namespace mlakit
