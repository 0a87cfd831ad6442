#include "simd/templates/tile_gemm_amx_impl.hpp"

namespace mlakit::simd {
extern const GemmKernels gemm_amx;
constinit const GemmKernels gemm_amx = amx::make_gemm_amx_kernels<amx::HardwareTiles>("amx");
}  // namespace mlakit::simd
