// The amx gemm table over emulated tiles, compiled with the avx512bf16 level's flags (its packing
// and block-scale sums are AVX-512 code) and namespace: a private instantiation, test-only.
#include "kernels/amx_emulation/emulated_tables.hpp"

#include "kernels/amx_emulation/emulated_tiles.hpp"
#include "simd/templates/tile_gemm_amx_impl.hpp"

namespace mlakit::simd {

constinit const GemmKernels gemm_amx_emulated =
    MLAKIT_SIMD_NS::make_gemm_amx_kernels<amx_emulation::EmulatedTiles>("amx (emulated tiles)");

}  // namespace mlakit::simd
