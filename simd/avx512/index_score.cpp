#include "simd/templates/index_score_impl.hpp"

namespace mlakit::simd {
extern const IndexScoreKernels index_score_avx512;
const IndexScoreKernels index_score_avx512 = avx512::make_index_score_kernels();
}  // namespace mlakit::simd
