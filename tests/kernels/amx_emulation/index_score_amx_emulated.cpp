// The amx index_score kernel over emulated tiles, compiled with the avx512bf16 level's flags (its
// conversions and epilogue are AVX-512 code) and namespace: a private instantiation, test-only.
#include "kernels/amx_emulation/emulated_tables.hpp"

#include "kernels/amx_emulation/emulated_tiles.hpp"
#include "simd/common/index_score_amx_impl.hpp"

namespace mlakit::simd {

constinit const IndexScoreKernels index_score_amx_emulated =
    MLAKIT_SIMD_NS::make_index_score_amx_kernels<amx_emulation::EmulatedTiles<amx_emulation::DpOrder::in_order>>(
        "amx (emulated tiles)");
constinit const IndexScoreKernels index_score_amx_emulated_split_order =
    MLAKIT_SIMD_NS::make_index_score_amx_kernels<amx_emulation::EmulatedTiles<amx_emulation::DpOrder::split_even_odd>>(
        "amx (emulated tiles, SDM order)");

}  // namespace mlakit::simd
