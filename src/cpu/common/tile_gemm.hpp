// The tile GEMM route of the cpu back-end's bf16 projections (simd/gemm.hpp, "Tile GEMM": AMX
// tile products over weights packed once into the tile unit's pair layout), where the level has
// tiles. An operator takes it for prefills from its own row threshold; MLAKIT_TILE_GEMM ("auto",
// "off", "on") overrides that for tests and measurements.
#pragma once

#include <cstddef>

#include "cpu/common/route_switch.hpp"

namespace mlakit::cpu::tile_gemm {

RouteMode mode();
void set_mode(RouteMode m);
// Whether a call of `rows` output rows takes the tile route, given whether the kernels have it
// and the operator's threshold.
bool use_for(bool available, std::size_t rows, std::size_t auto_min_rows);

}  // namespace mlakit::cpu::tile_gemm
