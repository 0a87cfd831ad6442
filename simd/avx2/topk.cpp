#include "simd/templates/topk_impl.hpp"

namespace mlakit::simd {
extern const TopkKernels topk_avx2;
const TopkKernels topk_avx2 = {avx2::kLevelName, avx2::topk_select};
}  // namespace mlakit::simd
