// What every block_score kernel body shares around its dots: the order keys its block maxima run
// on and the clamping of the per-row limits. Included by simd/templates/block_score_impl.hpp (every
// level) and simd/templates/block_score_amx_impl.hpp, inside the level's namespace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "simd/vec/level.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// Block maxima run on order keys: a signed integer whose order is the f32 order, with NaN above
// everything (so a NaN is sticky under max) and "no key" below everything.
constexpr std::int32_t kNoKey = static_cast<std::int32_t>(0x80000000u);
constexpr std::int32_t kNanKey = 0x7FFFFFFF;
constexpr std::int32_t kMinusInfKey = static_cast<std::int32_t>(0xFF800000u ^ 0x7FFFFFFFu);

inline I order_key(F s) {
  const I b = bits(s);
  return select(is_nan(s), isplat(kNanKey), b ^ shr<1>(sar<31>(b)));
}
// The inverse; kNoKey becomes -inf, kNanKey the quiet NaN 0x7FFFFFFF.
inline F key_value(I k) {
  k = select(cmpeq(k, isplat(kNoKey)), isplat(kMinusInfKey), k);
  return floats(k ^ shr<1>(sar<31>(k)));
}
inline I imax(I a, I b) { return select(cmpgt(a, b), a, b); }

// Where clamp_limits' arrays sit in a kernel's 64-byte aligned scratch (byte offsets from its
// start); a kernel's own buffers begin at `end`.
struct LimitArrays {
  std::size_t best_at, limits_at, gmin_at, gmax_at, end;
};
inline LimitArrays limit_arrays(std::size_t groups) {
  const auto up64 = [](std::size_t x) { return (x + 63) / 64 * 64; };
  const std::size_t lanes_bytes = up64(groups * kLanes * sizeof(std::int32_t));
  const std::size_t group_bytes = up64(groups * sizeof(std::int32_t));
  LimitArrays a{};
  a.best_at = 0;
  a.limits_at = a.best_at + lanes_bytes;
  a.gmin_at = a.limits_at + lanes_bytes;
  a.gmax_at = a.gmin_at + group_bytes;
  a.end = a.gmax_at + group_bytes;
  return a;
}

// The limits of `groups` groups of kLanes rows (limit null: every row sees all n keys) clamped to
// [0, n] into limits[], every row's running maximum set to "no key", per group the smallest and
// the largest limit; returns the largest of all (keys at or past it are read by no row).
inline std::int32_t clamp_limits(const std::int32_t* limit, std::size_t n, std::size_t groups, std::int32_t* limits,
                                 std::int32_t* best, std::int32_t* gmin, std::int32_t* gmax) {
  const auto nn = static_cast<std::int32_t>(n);
  std::int32_t all_hi = 0;
  for (std::size_t g = 0; g < groups; ++g) {
    std::int32_t lo = nn, hi = 0;
    for (std::size_t l = 0; l < kLanes; ++l) {
      std::int32_t v = limit ? limit[g * kLanes + l] : nn;
      v = v < 0 ? 0 : (v > nn ? nn : v);
      limits[g * kLanes + l] = v;
      best[g * kLanes + l] = kNoKey;
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    gmin[g] = lo;
    gmax[g] = hi;
    all_hi = hi > all_hi ? hi : all_hi;
  }
  return all_hi;
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
