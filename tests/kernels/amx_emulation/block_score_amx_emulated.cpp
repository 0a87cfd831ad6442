// The amx block_score kernel over emulated tiles, compiled with the avx512bf16 level's flags (its
// key conversion and max fold are AVX-512 code) and namespace: a private instantiation, test-only.
#include "kernels/amx_emulation/emulated_tables.hpp"

#include "kernels/amx_emulation/emulated_tiles.hpp"
#include "simd/templates/block_score_amx_impl.hpp"

namespace mlakit::simd {

constinit const BlockScoreKernels block_score_amx_emulated =
    MLAKIT_SIMD_NS::make_block_score_amx_kernels<amx_emulation::EmulatedTiles>("amx (emulated tiles)");

}  // namespace mlakit::simd
