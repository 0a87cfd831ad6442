// Where a register tile's sums go, for the NN tiles and the panel GEMM: C (+)= sum, or, with row
// and column scales, C (+)= (rs[i] * cs[j]) * sum (the scale product, then one fused multiply-add
// per output; a scaled sum starts from zero, so the scale applies to the call's sum alone).
#pragma once

#include <cstddef>

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

struct TileOut {
  float* c;
  std::size_t ldc;
  bool accumulate;
  const float* rs = nullptr;  // the tile's rows' scales, or null
  const float* cs = nullptr;  // the tile's columns' scales (with rs)
};

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
