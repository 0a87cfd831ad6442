// The epilogue of the lightning-indexer score tiles, shared by the vector-register kernels
// (index_score_impl.hpp) and the AMX tile kernel (index_score_amx_impl.hpp): both must reduce a
// key's per-head dots to its score with the same operations, in the same order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "simd/vec/level.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// IEEE maximum(x, +0): NaN stays NaN (either sign), -0 and negatives become +0.
inline F relu(F x) {
  const I b = bits(x);
  return floats(select(cmpgt(b, isplat(0)) | is_nan(x), b, isplat(0)));
}

struct Lanes {
  std::int32_t v[kLanes];
  constexpr Lanes() : v() {
    for (std::size_t i = 0; i < kLanes; ++i) v[i] = static_cast<std::int32_t>(i);
  }
};
constexpr Lanes kLaneIndex{};

// Lanes [0, valid) of a head vector hold real heads; the others are padding, whose dot may be NaN
// when a key holds NaN or inf (0 * inf), so they are kept out of the sum.
inline M head_lanes_below(std::size_t valid) {
  return cmpgt(isplat(static_cast<std::int32_t>(valid)), iload(kLaneIndex.v));
}

// part[c] holds key c's relu(dot) * w, lane-wise summed over the head vectors in head order.
// The lane sums go four keys at a time (reduce_add4 sums each vector on its own, so a key's score
// does not depend on its neighbours), then times the key scales.
inline void finish_scores(const F* part, std::size_t count, const float* ks, float* out) {
  for (std::size_t c0 = 0; c0 < count; c0 += 4) {
    const F z = fzero();
    float sum[4];
    // (The inner index stays in bounds even where a constant count lets the compiler see both arms.)
    const auto at = [&](std::size_t c) { return c < count ? part[c < count ? c : 0] : z; };
    reduce_add4(part[c0], at(c0 + 1), at(c0 + 2), at(c0 + 3), sum);
    for (std::size_t i = 0; i < 4 && c0 + i < count; ++i) out[c0 + i] = ks[c0 + i] * sum[i];
  }
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
