#include "simd/templates/topk_impl.hpp"

namespace mlakit::simd {
extern const TopkKernels topk_avx512;
const TopkKernels topk_avx512 = {avx512::kLevelName, avx512::topk_select};
}  // namespace mlakit::simd
