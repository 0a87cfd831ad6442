#include "simd/templates/index_score_impl.hpp"

namespace mlakit::simd {
extern const IndexScoreKernels index_score_avx512bf16;
const IndexScoreKernels index_score_avx512bf16 = avx512bf16::make_index_score_kernels();
}  // namespace mlakit::simd
