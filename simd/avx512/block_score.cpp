#include "simd/templates/block_score_impl.hpp"

namespace mlakit::simd {
extern const BlockScoreKernels block_score_avx512;
const BlockScoreKernels block_score_avx512 = avx512::make_block_score_kernels();
}  // namespace mlakit::simd
