#include "simd/templates/rope_norm_impl.hpp"

namespace mlakit::simd {
extern const RopeNormKernels rope_norm_generic;
const RopeNormKernels rope_norm_generic = {"generic", "scalar f64", generic::rope_bf16, generic::rms_norm_bf16};
}  // namespace mlakit::simd
