#include "simd/templates/block_score_impl.hpp"

namespace mlakit::simd {
extern const BlockScoreKernels block_score_avx512bf16;
const BlockScoreKernels block_score_avx512bf16 = avx512bf16::make_block_score_kernels();
}  // namespace mlakit::simd
