#include "simd/templates/gemm_impl.hpp"

namespace mlakit::simd {
extern const GemmKernels gemm_avx512bf16;
const GemmKernels gemm_avx512bf16 = avx512bf16::make_gemm_kernels();
}  // namespace mlakit::simd
