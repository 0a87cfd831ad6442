// Whether the GEMM-shaped work of ops 3-5 takes the level's bf16 pair dot (vdpbf16ps) or its f32
// paths. The avx512bf16 and amx levels have both; which is faster depends on the CPU, not on the
// level: AMD Zen 4 / Zen 5 run vdpbf16ps at the f32 FMA's instruction rate (twice its flops), Intel
// (Cooper Lake to Emerald Rapids) at half the f32 FMA's flop rate, where the f32 panel GEMM and
// OpenBLAS outrun it 1.1-1.6x (bench/RESULTS.md). MLAKIT_BF16_DOT ("auto", "off", "on") overrides:
// auto takes the pair dot on AMD CPUs only.
#pragma once

#include "cpu/common/route_switch.hpp"
#include "simd/gemm.hpp"

namespace mlakit::cpu::bf16_dot {

RouteMode mode();
void set_mode(RouteMode m);
// Whether work with the kernels `g` takes their bf16 pair dot (never where they have none).
bool use(const simd::GemmKernels& g);

}  // namespace mlakit::cpu::bf16_dot
