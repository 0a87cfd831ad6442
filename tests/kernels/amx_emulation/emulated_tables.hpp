// The amx level's kernel tables over emulated tiles (tests/kernels/amx_emulation/): compiled with
// the avx512bf16 level's flags, so callable only where that level runs. ISA-neutral declarations.
#pragma once

#include "simd/block_score.hpp"
#include "simd/index_score.hpp"
#include "simd/peak.hpp"

namespace mlakit::simd {

// The amx index_score kernel over tiles emulated as Intel's Intrinsics Guide orders TDPBF16PS's
// additions (the emulation the tests run every check on) ...
extern const IndexScoreKernels index_score_amx_emulated;
// ... and as the SDM orders them (used to tell which order a real AMX CPU follows).
extern const IndexScoreKernels index_score_amx_emulated_split_order;

// The same two for the amx block_score kernel.
extern const BlockScoreKernels block_score_amx_emulated;
extern const BlockScoreKernels block_score_amx_emulated_split_order;

// The amx level's peak probes, the tile probe over emulated tiles.
extern const PeakKernels peak_amx_emulated;

// Whether the calling thread holds an emulated tile configuration (a kernel must release it).
bool amx_emulated_tiles_configured();

}  // namespace mlakit::simd
