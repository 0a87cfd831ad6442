// Vector wrappers for the generic level: GCC/Clang vector extensions of 4 lanes, no intrinsics
// and no ISA flags, so the compiler lowers them to the x86-64 baseline (SSE2) or to scalar code
// elsewhere. Four lanes keep the register-blocked kernels inside 16 xmm registers.
//
// Every level provides the same small vocabulary (listed in vec_avx2.hpp); the kernel bodies in
// simd/templates/*_impl.hpp use nothing else.
#pragma once

#if !defined(MLAKIT_SIMD_NS)
#error "include simd/vec/level.hpp, not this header"
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mlakit::simd::MLAKIT_SIMD_NS {

constexpr std::size_t kLanes = 4;
constexpr const char* kLevelName = "generic";

typedef float v4f __attribute__((vector_size(16)));
typedef std::int32_t v4i __attribute__((vector_size(16)));
typedef std::uint32_t v4u __attribute__((vector_size(16)));
typedef std::int16_t v4h __attribute__((vector_size(8)));

struct F { v4f v; };
struct I { v4i v; };
struct M { v4i v; };  // all-ones / all-zeros lanes
struct H { v4h v; };  // kLanes i16 lanes

inline F fzero() { return {v4f{0.0f, 0.0f, 0.0f, 0.0f}}; }
inline F fsplat(float x) { return {v4f{x, x, x, x}}; }
inline F fload(const float* p) { F r; std::memcpy(&r.v, p, sizeof r.v); return r; }
inline F fload_n(const float* p, std::size_t n) {
  F r = fzero();
  std::memcpy(&r.v, p, n * sizeof(float));
  return r;
}
inline F fload_bf16(const std::uint16_t* p) {
  const v4i w = {p[0], p[1], p[2], p[3]};
  return {reinterpret_cast<v4f>(w << 16)};
}
inline F fload_bf16_n(const std::uint16_t* p, std::size_t n) {
  std::uint16_t tmp[4] = {};
  std::memcpy(tmp, p, n * 2);
  return fload_bf16(tmp);
}
inline void fstore(float* p, F a) { std::memcpy(p, &a.v, sizeof a.v); }
inline void fstore_n(float* p, F a, std::size_t n) { std::memcpy(p, &a.v, n * sizeof(float)); }
inline F operator+(F a, F b) { return {a.v + b.v}; }
inline F operator*(F a, F b) { return {a.v * b.v}; }
// IEEE division, correctly rounded (the FP8 quantizer of the deepseek profiles divides).
inline F operator/(F a, F b) { return {a.v / b.v}; }
// a*b + c as a multiply and an add: the generic level is the portable baseline, and the tests
// bound every level against exact sums, so single or double rounding are both within contract.
inline F fmadd(F a, F b, F c) { return {a.v * b.v + c.v}; }
inline F fmax(F a, F b) { return {a.v > b.v ? a.v : b.v}; }
inline F fmin(F a, F b) { return {a.v < b.v ? a.v : b.v}; }
inline F operator-(F a, F b) { return {a.v - b.v}; }
inline M flt(F a, F b) { return {a.v < b.v}; }  // false for NaN
inline M is_nan(F a) { return {a.v != a.v}; }
inline I bits(F a) { return {reinterpret_cast<v4i>(a.v)}; }
inline F floats(I a) { return {reinterpret_cast<v4f>(a.v)}; }
inline float reduce_add(F a) { return (a.v[0] + a.v[2]) + (a.v[1] + a.v[3]); }
inline void reduce_add4(F a, F b, F c, F d, float* out) {
  out[0] = reduce_add(a);
  out[1] = reduce_add(b);
  out[2] = reduce_add(c);
  out[3] = reduce_add(d);
}

inline I isplat(std::int32_t x) { return {v4i{x, x, x, x}}; }
inline I iload(const std::int32_t* p) { I r; std::memcpy(&r.v, p, sizeof r.v); return r; }
inline void istore(std::int32_t* p, I a) { std::memcpy(p, &a.v, sizeof a.v); }
inline void istore_n(std::int32_t* p, I a, std::size_t n) { std::memcpy(p, &a.v, n * 4); }
inline I iload_u8(const std::uint8_t* p) { return {v4i{p[0], p[1], p[2], p[3]}}; }
inline I iload_u8_n(const std::uint8_t* p, std::size_t n) {
  std::uint8_t tmp[4] = {};
  std::memcpy(tmp, p, n);
  return iload_u8(tmp);
}
// Lanes must hold values in [0, 65535].
inline void istore_u16(std::uint16_t* p, I a) {
  for (std::size_t l = 0; l < kLanes; ++l) p[l] = static_cast<std::uint16_t>(a.v[l]);
}
inline void istore_u16_pair(std::uint16_t* p, I a, I b) {
  istore_u16(p, a);
  istore_u16(p + kLanes, b);
}
inline void istore_u16_n(std::uint16_t* p, I a, std::size_t n) {
  for (std::size_t l = 0; l < n; ++l) p[l] = static_cast<std::uint16_t>(a.v[l]);
}
inline void istore_u8_n(std::uint8_t* p, I a, std::size_t n) {
  for (std::size_t l = 0; l < n; ++l) p[l] = static_cast<std::uint8_t>(a.v[l]);
}
inline void istore_u8(std::uint8_t* p, I a) { istore_u8_n(p, a, kLanes); }
inline I operator&(I a, I b) { return {a.v & b.v}; }
inline I operator|(I a, I b) { return {a.v | b.v}; }
inline I operator^(I a, I b) { return {a.v ^ b.v}; }
inline I operator+(I a, I b) { return {reinterpret_cast<v4i>(reinterpret_cast<v4u>(a.v) + reinterpret_cast<v4u>(b.v))}; }
template <int S> inline I shl(I a) { return {reinterpret_cast<v4i>(reinterpret_cast<v4u>(a.v) << S)}; }
template <int S> inline I shr(I a) { return {reinterpret_cast<v4i>(reinterpret_cast<v4u>(a.v) >> S)}; }
template <int S> inline I sar(I a) { return {a.v >> S}; }  // arithmetic on signed vector lanes
inline M cmpeq(I a, I b) { return {a.v == b.v}; }
inline M cmpgt(I a, I b) { return {a.v > b.v}; }
inline M operator|(M a, M b) { return {a.v | b.v}; }
inline I select(M m, I a, I b) { return {(m.v & a.v) | (~m.v & b.v)}; }
inline F select(M m, F a, F b) { return floats(select(m, bits(a), bits(b))); }
inline bool any(M m) { return (m.v[0] | m.v[1] | m.v[2] | m.v[3]) != 0; }

inline H hsplat(std::int16_t x) { return {v4h{x, x, x, x}}; }
inline H hload_s8(const std::uint8_t* p) {
  return {v4h{static_cast<std::int8_t>(p[0]), static_cast<std::int8_t>(p[1]), static_cast<std::int8_t>(p[2]),
              static_cast<std::int8_t>(p[3])}};
}
inline H hload_s8_n(const std::uint8_t* p, std::size_t n) {
  std::uint8_t tmp[4] = {};
  std::memcpy(tmp, p, n);
  return hload_s8(tmp);
}
inline H operator&(H a, H b) { return {a.v & b.v}; }
inline H operator|(H a, H b) { return {a.v | b.v}; }
inline H operator^(H a, H b) { return {a.v ^ b.v}; }
inline H operator+(H a, H b) {
  typedef std::uint16_t v4uh __attribute__((vector_size(8)));
  return {reinterpret_cast<v4h>(reinterpret_cast<v4uh>(a.v) + reinterpret_cast<v4uh>(b.v))};
}
template <int S> inline H shl(H a) {
  typedef std::uint16_t v4uh __attribute__((vector_size(8)));
  return {reinterpret_cast<v4h>(static_cast<v4uh>(reinterpret_cast<v4uh>(a.v) << S))};
}
inline H hcmpeq(H a, H b) { return {a.v == b.v}; }
inline bool any_set(H a) { return (a.v[0] | a.v[1] | a.v[2] | a.v[3]) != 0; }
// Whether any of the n bytes at p has (byte & mask) == value.
inline bool any_byte_masked_eq(const std::uint8_t* p, std::size_t n, std::uint8_t mask, std::uint8_t value) {
  bool any = false;
  for (std::size_t i = 0; i < n; ++i) any |= (p[i] & mask) == value;
  return any;
}
// No converter at this level: the f16 fields moved by hand. Subnormals (exponent 0) go through an
// exact int -> f32 conversion, so no f32 subnormal is ever an operand.
inline F f16_to_f32(H a) {
  const v4i h = __builtin_convertvector(a.v, v4i) & 0xFFFF;
  const v4i e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const v4i normal = ((h & 0x7FFF) << 13) + (112 << 23);
  const v4i special = (m << 13) | 0x7F800000;  // infinities and NaNs, payload kept
  const v4i sub = reinterpret_cast<v4i>(__builtin_convertvector(m, v4f) * 0x1p-24f);
  const v4i mag = e == 0 ? sub : (e == 31 ? special : normal);
  return {reinterpret_cast<v4f>(mag | ((h & 0x8000) << 16))};
}
inline std::uint32_t movemask(M m) {
  std::uint32_t r = 0;
  for (std::size_t l = 0; l < kLanes; ++l) r |= (static_cast<std::uint32_t>(m.v[l]) >> 31) << l;
  return r;
}

}  // namespace mlakit::simd::MLAKIT_SIMD_NS
