// Peak probes, written once; compiled per level by simd/<level>/peak.cpp. See simd/peak.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "simd/vec/level.hpp"
#include "simd/peak.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// Independent chains: enough to cover FMA latency x ports on every target (4-5 cycles x 2 ports),
// few enough to stay in registers (16 on generic/avx2, 32 on avx512).
#if defined(MLAKIT_SIMD_LEVEL_generic) || defined(MLAKIT_SIMD_LEVEL_avx2)
constexpr std::size_t kChains = 12;
#else
constexpr std::size_t kChains = 24;
#endif

float peak_f32_fma(std::size_t iters, float seed) {
  F acc[kChains];
  for (std::size_t c = 0; c < kChains; ++c) acc[c] = fsplat(seed + static_cast<float>(c));
  const F x = fsplat(1.0f - 0x1p-20f), y = fsplat(seed * 0x1p-30f);
  for (std::size_t it = 0; it < iters; ++it) {
    // Fully unrolled so the chains live in registers: a rolled loop keeps them on the stack and
    // measures store-forwarding latency instead of the FMA ports.
#pragma GCC unroll 32
    for (std::size_t c = 0; c < kChains; ++c) acc[c] = fmadd(acc[c], x, y);
  }
  F s = acc[0];
  for (std::size_t c = 1; c < kChains; ++c) s = s + acc[c];
  return reduce_add(s);
}
constexpr double kF32FlopsPerIter = 2.0 * kChains * kLanes;

#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
float peak_bf16_dot(std::size_t iters, float seed) {
  F acc[kChains];
  for (std::size_t c = 0; c < kChains; ++c) acc[c] = fsplat(seed + static_cast<float>(c));
  std::uint16_t av[kBf16Lanes], bv[kBf16Lanes];
  for (std::size_t l = 0; l < kBf16Lanes; ++l) {
    av[l] = 0x3F80;  // 1.0
    bv[l] = static_cast<std::uint16_t>(0x3000 + l);
  }
  const B a = bload(av), b = bload(bv);
  for (std::size_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (std::size_t c = 0; c < kChains; ++c) acc[c] = bf16_dot(acc[c], a, b);
  }
  F s = acc[0];
  for (std::size_t c = 1; c < kChains; ++c) s = s + acc[c];
  return reduce_add(s);
}
constexpr double kBf16FlopsPerIter = 4.0 * kChains * kLanes;  // 2 products + 2 adds per f32 lane
constexpr const char* kBf16Kind = "vdpbf16ps";
#else
// Widening path: each step loads 2*kLanes bf16 of a and of b from L1, splits them into even
// (shift left 16) and odd (mask high half) f32 lanes, and does two FMAs.
constexpr std::size_t kWideChains = kChains / 2;
constexpr std::size_t kBufPairs = 64;  // 2 * 64 * kLanes bf16 values per operand: L1-resident
float peak_bf16_dot(std::size_t iters, float seed) {
  static thread_local std::int32_t abuf[kBufPairs * kLanes], bbuf[kBufPairs * kLanes];
  for (std::size_t i = 0; i < kBufPairs * kLanes; ++i) {
    abuf[i] = static_cast<std::int32_t>(0x3F803F80u);
    bbuf[i] = static_cast<std::int32_t>(0x30003000u + static_cast<std::uint32_t>(i & 0xFF));
  }
  F acc[kChains];
  for (std::size_t c = 0; c < kChains; ++c) acc[c] = fsplat(seed + static_cast<float>(c));
  const I hi_mask = isplat(static_cast<std::int32_t>(0xFFFF0000u));
  std::size_t pos = 0;
  for (std::size_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (std::size_t c = 0; c < kWideChains; ++c) {
      const I a = iload(abuf + pos), b = iload(bbuf + pos);
      pos = pos + kLanes == kBufPairs * kLanes ? 0 : pos + kLanes;
      acc[2 * c] = fmadd(floats(shl<16>(a)), floats(shl<16>(b)), acc[2 * c]);
      acc[2 * c + 1] = fmadd(floats(a & hi_mask), floats(b & hi_mask), acc[2 * c + 1]);
    }
  }
  F s = acc[0];
  for (std::size_t c = 1; c < kChains; ++c) s = s + acc[c];
  return reduce_add(s);
}
constexpr double kBf16FlopsPerIter = 2.0 * 2.0 * kWideChains * kLanes;
constexpr const char* kBf16Kind = "widen+fma";
#endif

float peak_read_sum(const float* p, std::size_t n) {
  F s0 = fzero(), s1 = fzero(), s2 = fzero(), s3 = fzero();
  std::size_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    s0 = s0 + fload(p + i);
    s1 = s1 + fload(p + i + kLanes);
    s2 = s2 + fload(p + i + 2 * kLanes);
    s3 = s3 + fload(p + i + 3 * kLanes);
  }
  float t = reduce_add((s0 + s1) + (s2 + s3));
  for (; i < n; ++i) t += p[i];
  return t;
}

// The amx level adds its tile probe (simd/templates/peak_amx_impl.hpp) to this table.
constexpr PeakKernels make_peak_kernels() {
  return PeakKernels{kLevelName, &peak_f32_fma, kF32FlopsPerIter, &peak_bf16_dot, kBf16FlopsPerIter, kBf16Kind,
                     &peak_read_sum, nullptr, 0.0, nullptr};
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
