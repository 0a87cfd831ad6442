#include "simd/templates/topk_impl.hpp"

namespace mlakit::simd {
extern const TopkKernels topk_generic;
const TopkKernels topk_generic = {generic::kLevelName, generic::topk_select};
}  // namespace mlakit::simd
