// Top-k selection over one row of f32 scores: ISA-neutral declarations (no intrinsics).
//
// Order (docs/lightning_indexer.md §4): higher score first; equal scores by smaller index; +0 == -0;
// NaN ranks below every number (-inf included), and NaNs order among themselves by smaller
// index. The kernel writes m = min(k, eligible) indices (i32, best first) to out[0..m) and
// returns m; out[m..k) is not touched (callers fill their -1 tail).
//   TopkNan::last    — NaNs are eligible (they come after every number): op 1.
//   TopkNan::exclude — NaNs are never selected (a row whose remaining scores are all NaN stops
//                      early): op 2.
// Exact and deterministic: the result depends only on the scores, never on the level.
//
// Method: scores become order-preserving 32-bit keys (NaN -> lowest key, -0 -> +0). For long rows
// a strided sample of the keys gives a threshold that about 1.25 k + a margin of the elements pass;
// one vector pass (key, compare, movemask) collects them in index order. If fewer than k pass
// (unlucky or adversarial data), the pass is redone with no threshold, so the result never depends
// on the sample. Bucket counts over the candidates' key span find the exact key of the k-th best
// and how many of the elements equal to it are taken (the first ones in index order), and a stable
// most-significant-digit radix sort on the key orders the winners (ties keep index order). Digits
// are cut from each set's own span, up to 11 bits, so keys that share their high bits (one row's
// scores mostly share sign and exponent) cost no pass.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlakit::simd {

enum class TopkNan : std::uint8_t { last, exclude };

// Bytes of scratch a call with n scores and k wanted needs (any alignment of `scratch` is fine).
constexpr std::size_t topk_scratch_bytes(std::size_t n, std::size_t k) {
  const std::size_t m = k < n ? k : n;
  return 12 * n + 8 * m + 64;
}

struct TopkKernels {
  const char* level;
  std::size_t (*select)(const float* scores, std::size_t n, std::size_t k, TopkNan nan, std::int32_t* out,
                        void* scratch);
};

}  // namespace mlakit::simd
