// Every kernel table the library is built with, declared from simd/kernels.inc. ISA-neutral:
// no intrinsics. Code outside simd/ reaches kernels only through these tables, chosen at run time
// by src/cpu/common/kernels.hpp; nothing dispatches on build flags.
#pragma once

#include "simd/block_score.hpp"
#include "simd/fp8_decode.hpp"
#include "simd/fp8_quant.hpp"
#include "simd/gemm.hpp"
#include "simd/index_score.hpp"
#include "simd/peak.hpp"
#include "simd/rope_norm.hpp"
#include "simd/topk.hpp"

namespace mlakit::simd {

#define MLAKIT_SIMD_KERNEL(family, Type, level) extern const Type family##_##level;
#include "simd/kernels.inc"
#undef MLAKIT_SIMD_KERNEL

}  // namespace mlakit::simd
