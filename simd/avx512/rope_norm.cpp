#include "simd/templates/rope_norm_impl.hpp"

namespace mlakit::simd {
extern const RopeNormKernels rope_norm_avx512;
const RopeNormKernels rope_norm_avx512 = {"avx512", "8 f64 lanes", avx512::rope_bf16, avx512::rms_norm_bf16};
}  // namespace mlakit::simd
