#include "simd/templates/index_score_amx_impl.hpp"

namespace mlakit::simd {
extern const IndexScoreKernels index_score_amx;
constinit const IndexScoreKernels index_score_amx = amx::make_index_score_amx_kernels<amx::HardwareTiles>("amx");
}  // namespace mlakit::simd
