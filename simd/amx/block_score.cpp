#include "simd/templates/block_score_amx_impl.hpp"

namespace mlakit::simd {
extern const BlockScoreKernels block_score_amx;
constinit const BlockScoreKernels block_score_amx = amx::make_block_score_amx_kernels<amx::HardwareTiles>("amx");
}  // namespace mlakit::simd
