// One dot product as a chain of TDPBF16PS instructions computes it (emulated_tiles.hpp): the dims
// in chunks of 32 (one tile row of bf16 pairs, the last chunk padded with zeros), each chunk's even
// and odd products summed apart from 0, their sum added to the running accumulator; inputs read
// as zero and results flushed where denormal. The scalar model the amx kernels' tests hold them to.
#pragma once

#include <cmath>
#include <cstddef>

namespace mlakit::kernel_tests {

// bf16 and f32 values below 2^-126 in magnitude to a signed zero, as the tile unit reads and writes.
inline float tile_flush(float x) { return std::fabs(x) < 0x1p-126f ? 0.0f * x : x; }

// sum over d < dim of q(d) * k(d), with q and k returning the f32 value of element d.
template <class Q, class K>
float tile_dot(std::size_t dim, Q&& q, K&& k) {
  constexpr std::size_t kChunk = 32;
  float acc = 0.0f;
  for (std::size_t c = 0; c < dim; c += kChunk) {
    float even = 0.0f, odd = 0.0f;
    for (std::size_t d = c; d < c + kChunk && d < dim; d += 2) {
      even = tile_flush(std::fma(tile_flush(q(d)), tile_flush(k(d)), even));
      if (d + 1 < dim) odd = tile_flush(std::fma(tile_flush(q(d + 1)), tile_flush(k(d + 1)), odd));
    }
    acc = tile_flush(acc + tile_flush(even + odd));
  }
  return acc;
}

}  // namespace mlakit::kernel_tests
