#include "simd/templates/peak_impl.hpp"
#include "simd/templates/peak_amx_impl.hpp"

namespace mlakit::simd {
extern const PeakKernels peak_amx;
constinit const PeakKernels peak_amx = amx::make_peak_amx_kernels<amx::HardwareTiles>("amx");
}  // namespace mlakit::simd
