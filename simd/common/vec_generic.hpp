// Vector wrappers for the generic level: plain arrays and loops, no intrinsics. The compiler may
// still use the x86-64 baseline (SSE2) for them. Lane count 4 keeps register pressure of the
// register-blocked kernels inside 16 xmm registers.
//
// Every level provides the same small vocabulary (see vec_avx2.hpp for the list); the kernel
// bodies in simd/common/*_impl.hpp use nothing else.
#pragma once

#if !defined(MLAKIT_SIMD_NS)
#error "include simd/common/level.hpp, not this header"
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mlakit::simd::MLAKIT_SIMD_NS {

constexpr std::size_t kLanes = 4;
constexpr const char* kLevelName = "generic";

struct F { float v[kLanes]; };
struct I { std::int32_t v[kLanes]; };
struct M { bool v[kLanes]; };

#define MLAKIT_LANES for (std::size_t l = 0; l < kLanes; ++l)

inline F fzero() { F r; MLAKIT_LANES r.v[l] = 0.0f; return r; }
inline F fsplat(float x) { F r; MLAKIT_LANES r.v[l] = x; return r; }
inline F fload(const float* p) { F r; std::memcpy(r.v, p, sizeof r.v); return r; }
inline F fload_n(const float* p, std::size_t n) {
  F r = fzero();
  std::memcpy(r.v, p, n * sizeof(float));
  return r;
}
inline F fload_bf16(const std::uint16_t* p) {
  F r;
  MLAKIT_LANES { const std::uint32_t u = std::uint32_t(p[l]) << 16; std::memcpy(&r.v[l], &u, 4); }
  return r;
}
inline F fload_bf16_n(const std::uint16_t* p, std::size_t n) {
  F r = fzero();
  for (std::size_t l = 0; l < n; ++l) { const std::uint32_t u = std::uint32_t(p[l]) << 16; std::memcpy(&r.v[l], &u, 4); }
  return r;
}
inline void fstore(float* p, F a) { std::memcpy(p, a.v, sizeof a.v); }
inline void fstore_n(float* p, F a, std::size_t n) { std::memcpy(p, a.v, n * sizeof(float)); }
inline F operator+(F a, F b) { MLAKIT_LANES a.v[l] += b.v[l]; return a; }
inline F operator*(F a, F b) { MLAKIT_LANES a.v[l] *= b.v[l]; return a; }
// a*b + c. Plain multiply-add: the generic level is the portable baseline, and the tests bound
// every level against exact sums, so a single or a double rounding are both within contract.
inline F fmadd(F a, F b, F c) { MLAKIT_LANES c.v[l] += a.v[l] * b.v[l]; return c; }
inline M is_nan(F a) { M m; MLAKIT_LANES m.v[l] = a.v[l] != a.v[l]; return m; }
inline I bits(F a) { I r; std::memcpy(r.v, a.v, sizeof r.v); return r; }
inline F floats(I a) { F r; std::memcpy(r.v, a.v, sizeof r.v); return r; }
inline float reduce_add(F a) { return (a.v[0] + a.v[2]) + (a.v[1] + a.v[3]); }
inline void reduce_add4(F a, F b, F c, F d, float* out) {
  out[0] = reduce_add(a); out[1] = reduce_add(b); out[2] = reduce_add(c); out[3] = reduce_add(d);
}

inline I isplat(std::int32_t x) { I r; MLAKIT_LANES r.v[l] = x; return r; }
inline I iload(const std::int32_t* p) { I r; std::memcpy(r.v, p, sizeof r.v); return r; }
inline void istore(std::int32_t* p, I a) { std::memcpy(p, a.v, sizeof a.v); }
inline void istore_n(std::int32_t* p, I a, std::size_t n) { std::memcpy(p, a.v, n * 4); }
inline I iload_u8(const std::uint8_t* p) { I r; MLAKIT_LANES r.v[l] = p[l]; return r; }
inline I iload_u8_n(const std::uint8_t* p, std::size_t n) {
  I r = isplat(0);
  for (std::size_t l = 0; l < n; ++l) r.v[l] = p[l];
  return r;
}
// Lanes must hold values in [0, 65535].
inline void istore_u16(std::uint16_t* p, I a) { MLAKIT_LANES p[l] = std::uint16_t(a.v[l]); }
inline void istore_u16_n(std::uint16_t* p, I a, std::size_t n) {
  for (std::size_t l = 0; l < n; ++l) p[l] = std::uint16_t(a.v[l]);
}
inline I operator&(I a, I b) { MLAKIT_LANES a.v[l] &= b.v[l]; return a; }
inline I operator|(I a, I b) { MLAKIT_LANES a.v[l] |= b.v[l]; return a; }
inline I operator^(I a, I b) { MLAKIT_LANES a.v[l] ^= b.v[l]; return a; }
inline I operator+(I a, I b) {
  MLAKIT_LANES a.v[l] = std::int32_t(std::uint32_t(a.v[l]) + std::uint32_t(b.v[l]));
  return a;
}
template <int S> inline I shl(I a) { MLAKIT_LANES a.v[l] = std::int32_t(std::uint32_t(a.v[l]) << S); return a; }
template <int S> inline I shr(I a) { MLAKIT_LANES a.v[l] = std::int32_t(std::uint32_t(a.v[l]) >> S); return a; }
template <int S> inline I sar(I a) {
  // Arithmetic shift written without relying on implementation-defined >> of negatives.
  MLAKIT_LANES a.v[l] = a.v[l] < 0 ? ~std::int32_t(~std::uint32_t(a.v[l]) >> S) : std::int32_t(std::uint32_t(a.v[l]) >> S);
  return a;
}
inline M cmpeq(I a, I b) { M m; MLAKIT_LANES m.v[l] = a.v[l] == b.v[l]; return m; }
inline M cmpgt(I a, I b) { M m; MLAKIT_LANES m.v[l] = a.v[l] > b.v[l]; return m; }
inline M operator|(M a, M b) { MLAKIT_LANES a.v[l] = a.v[l] || b.v[l]; return a; }
inline I select(M m, I a, I b) { MLAKIT_LANES b.v[l] = m.v[l] ? a.v[l] : b.v[l]; return b; }
inline std::uint32_t movemask(M m) {
  std::uint32_t r = 0;
  MLAKIT_LANES r |= std::uint32_t(m.v[l]) << l;
  return r;
}

#undef MLAKIT_LANES

}  // namespace mlakit::simd::MLAKIT_SIMD_NS
