#include "simd/templates/gemm_impl.hpp"

namespace mlakit::simd {
extern const GemmKernels gemm_avx2;
const GemmKernels gemm_avx2 = avx2::make_gemm_kernels();
}  // namespace mlakit::simd
