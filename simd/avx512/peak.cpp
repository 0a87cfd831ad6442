#include "simd/templates/peak_impl.hpp"

namespace mlakit::simd {
extern const PeakKernels peak_avx512;
const PeakKernels peak_avx512 = avx512::make_peak_kernels();
}  // namespace mlakit::simd
