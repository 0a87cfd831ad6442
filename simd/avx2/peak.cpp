#include "simd/templates/peak_impl.hpp"

namespace mlakit::simd {
extern const PeakKernels peak_avx2;
const PeakKernels peak_avx2 = avx2::make_peak_kernels();
}  // namespace mlakit::simd
