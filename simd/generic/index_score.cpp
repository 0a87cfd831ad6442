#include "simd/templates/index_score_impl.hpp"

namespace mlakit::simd {
extern const IndexScoreKernels index_score_generic;
const IndexScoreKernels index_score_generic = generic::make_index_score_kernels();
}  // namespace mlakit::simd
