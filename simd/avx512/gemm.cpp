#include "simd/templates/gemm_impl.hpp"

namespace mlakit::simd {
extern const GemmKernels gemm_avx512;
const GemmKernels gemm_avx512 = avx512::make_gemm_kernels();
}  // namespace mlakit::simd
