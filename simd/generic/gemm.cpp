#include "simd/templates/gemm_impl.hpp"

namespace mlakit::simd {
extern const GemmKernels gemm_generic;
const GemmKernels gemm_generic = generic::make_gemm_kernels();
}  // namespace mlakit::simd
