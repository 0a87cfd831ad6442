// The panel GEMM route of the cpu back-end's large f32 projections (simd/gemm.hpp, "Panel GEMM":
// outer-product register tiles over a packed panel of the weights, dequantized as they are
// packed). An operator takes it for prefills from its own row threshold; MLAKIT_PANEL_GEMM
// ("auto", "off", "on") overrides that for tests and measurements.
#pragma once

#include <cstddef>

#include "cpu/common/route_switch.hpp"

namespace mlakit::cpu::panel_gemm {

RouteMode mode();
void set_mode(RouteMode m);
// Whether a call of `rows` output rows takes the panel route, given the operator's threshold.
bool use_for(std::size_t rows, std::size_t auto_min_rows);

}  // namespace mlakit::cpu::panel_gemm
