#include "simd/templates/peak_impl.hpp"

namespace mlakit::simd {
extern const PeakKernels peak_avx512bf16;
const PeakKernels peak_avx512bf16 = avx512bf16::make_peak_kernels();
}  // namespace mlakit::simd
