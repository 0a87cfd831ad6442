// The amx level's kernel tables over emulated tiles (tests/kernels/amx_emulation/): compiled with
// the avx512bf16 level's flags, so callable only where that level runs. ISA-neutral declarations.
#pragma once

#include "simd/block_score.hpp"
#include "simd/gemm.hpp"
#include "simd/index_score.hpp"
#include "simd/peak.hpp"

namespace mlakit::simd {

// The amx index_score and block_score kernels over emulated tiles (emulated_tiles.hpp), which the
// tests run every check on.
extern const IndexScoreKernels index_score_amx_emulated;
extern const BlockScoreKernels block_score_amx_emulated;
// The amx gemm table (the tile GEMM) over emulated tiles.
extern const GemmKernels gemm_amx_emulated;

// The amx level's peak probes, the tile probe over emulated tiles.
extern const PeakKernels peak_amx_emulated;

// Whether the calling thread holds an emulated tile configuration (a kernel must release it).
bool amx_emulated_tiles_configured();

}  // namespace mlakit::simd
