#include "simd/templates/block_score_impl.hpp"

namespace mlakit::simd {
extern const BlockScoreKernels block_score_generic;
const BlockScoreKernels block_score_generic = generic::make_block_score_kernels();
}  // namespace mlakit::simd
