#include "simd/templates/peak_impl.hpp"

namespace mlakit::simd {
extern const PeakKernels peak_generic;
const PeakKernels peak_generic = generic::make_peak_kernels();
}  // namespace mlakit::simd
