// Which ISA level this translation unit is compiled for. Every file under simd/<level>/ is built
// with that level's -m flags and MLAKIT_SIMD_LEVEL_<level> defined (cmake/MlakitSimd.cmake).
//
// The kernel bodies in simd/templates/*_impl.hpp are written once and compiled once per level by
// inclusion into namespace mlakit::simd::MLAKIT_SIMD_NS, inside an unnamed namespace. That keeps
// every function and every template instantiation made with one level's flags private to that
// level's object files: the linker can never fold an AVX-512 copy of a helper into the generic
// path (the usual way one-binary-many-ISAs programs die with SIGILL on older CPUs). For the same
// reason the impl headers only instantiate standard templates with types or comparators declared
// in that unnamed namespace.
#pragma once

#if defined(MLAKIT_SIMD_LEVEL_generic)
#define MLAKIT_SIMD_NS generic
#elif defined(MLAKIT_SIMD_LEVEL_avx2)
#define MLAKIT_SIMD_NS avx2
#elif defined(MLAKIT_SIMD_LEVEL_avx512)
#define MLAKIT_SIMD_NS avx512
#elif defined(MLAKIT_SIMD_LEVEL_avx512bf16)
#define MLAKIT_SIMD_NS avx512bf16
#elif defined(MLAKIT_SIMD_LEVEL_amx)
#define MLAKIT_SIMD_NS amx
#else
#error "simd/vec/level.hpp: include it only from simd/<level>/*.cpp (MLAKIT_SIMD_LEVEL_<level> is not defined)"
#endif

// Picks the vector wrappers of this level.
#if defined(MLAKIT_SIMD_LEVEL_generic)
#include "simd/vec/vec_generic.hpp"
#elif defined(MLAKIT_SIMD_LEVEL_avx2)
#include "simd/vec/vec_avx2.hpp"
#elif defined(MLAKIT_SIMD_LEVEL_avx512)
#include "simd/vec/vec_avx512.hpp"
#elif defined(MLAKIT_SIMD_LEVEL_avx512bf16) || defined(MLAKIT_SIMD_LEVEL_amx)
#include "simd/vec/vec_avx512bf16.hpp"
#endif
