// The amx level's peak probes with the tile probe over emulated tiles, compiled with the
// avx512bf16 level's flags and namespace: a private instantiation, test-only.
#include "kernels/amx_emulation/emulated_tables.hpp"

#include "kernels/amx_emulation/emulated_tiles.hpp"
#include "simd/templates/peak_amx_impl.hpp"

namespace mlakit::simd {

constinit const PeakKernels peak_amx_emulated =
    MLAKIT_SIMD_NS::make_peak_amx_kernels<amx_emulation::EmulatedTiles>("amx (emulated tiles)");

}  // namespace mlakit::simd
