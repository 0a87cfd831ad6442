#include "simd/templates/block_score_impl.hpp"

namespace mlakit::simd {
extern const BlockScoreKernels block_score_avx2;
const BlockScoreKernels block_score_avx2 = avx2::make_block_score_kernels();
}  // namespace mlakit::simd
