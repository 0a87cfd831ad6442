// The AMX tile peak probe, written once against a tile-operations policy (simd/vec/amx_tiles.hpp):
// simd/amx/peak.cpp instantiates it over the real instructions, the tests over the emulation.
//
// Four accumulator tiles (tmm0..3, 16 x 16 f32) each take one TDPBF16PS per trip from a pair of
// operand tiles (A in tmm4/5, B in tmm6/7, loaded once): four independent chains, so that the
// probe measures the tile unit's throughput rather than one instruction's latency. One
// instruction is 16 x 16 outputs x 32 products, a multiply and an add each: 16384 flops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "simd/vec/amx_tiles.hpp"
#include "simd/templates/peak_impl.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {
namespace amx_peak {

constexpr std::size_t kChains = 4;
constexpr double kFlopsPerIter = 2.0 * kTileRows * kTileRows * kChunkDims * kChains;  // 16 x 16 C, 32 dims

// The four chains' start: tile 0 from `seed`, the others from zero.
template <class Tiles>
void start_chains(Tiles& tiles, float seed) {
  alignas(64) float c[16 * 16];
  for (std::size_t i = 0; i < 16 * 16; ++i) c[i] = seed;
  tiles.template load<0>(c, 64);
  tiles.template zero<1>();
  tiles.template zero<2>();
  tiles.template zero<3>();
}
// The result only keeps the chains from being optimised away.
template <class Tiles>
float end_chains(Tiles& tiles) {
  alignas(64) float out[4][16 * 16];
  tiles.template store<0>(out[0], 64);
  tiles.template store<1>(out[1], 64);
  tiles.template store<2>(out[2], 64);
  tiles.template store<3>(out[3], 64);
  return out[0][0] + out[1][17] + out[2][34] + out[3][255];
}

template <class Tiles>
float run(std::size_t iters, float seed) {
  // Operands small enough that no chain overflows over any trip count: 1.0 x 2^-24 per product.
  alignas(64) std::uint16_t a[16 * 32], b[16 * 32];
  for (std::size_t i = 0; i < 16 * 32; ++i) {
    a[i] = 0x3F80;  // 1.0
    b[i] = static_cast<std::uint16_t>(0x3380 + (i & 7));
  }
  Tiles tiles(&kTileConfig);
  start_chains(tiles, seed);
  tiles.template load<4>(a, 64);
  tiles.template load<5>(a, 64);
  tiles.template load<6>(b, 64);
  tiles.template load<7>(b, 64);
  for (std::size_t it = 0; it < iters; ++it) {
    tiles.template dp_bf16<0, 4, 6>();
    tiles.template dp_bf16<1, 4, 7>();
    tiles.template dp_bf16<2, 5, 6>();
    tiles.template dp_bf16<3, 5, 7>();
  }
  return end_chains(tiles);
}

// The tile GEMM's step (simd/peak.hpp, amx_bf16_streamed): the kernel's load order and B
// prefetch (simd/templates/tile_gemm_amx_impl.hpp) over buffers kept per thread.
template <class Tiles>
float run_streamed(std::size_t iters, float seed, std::size_t b_steps) {
  constexpr std::size_t kStep = 2 * 16 * 32;  // two tiles of 16 rows x 32 bf16: 2 KiB
  constexpr std::size_t kASteps = 16;         // the kernel's A block of a pass: 32 KiB
  if (b_steps == 0) b_steps = 1;
  static thread_local std::vector<std::uint16_t> a, b;
  if (a.size() != kASteps * kStep) a.assign(kASteps * kStep, 0x3F80);  // 1.0
  if (b.size() < b_steps * kStep) {
    b.resize(b_steps * kStep);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint16_t>(0x3380 + (i & 7));  // ~2^-24
  }
  Tiles tiles(&kTileConfig);
  start_chains(tiles, seed);
  for (std::size_t it = 0; it < iters; ++it) {
    const std::uint16_t* as = a.data() + (it % kASteps) * kStep;
    const std::uint16_t* bs = b.data() + (it % b_steps) * kStep;
    const char* ahead = reinterpret_cast<const char*>(b.data() + ((it + 2) % b_steps) * kStep);
    tiles.template load<4>(as, 64);
    tiles.template load<6>(bs, 64);
    tiles.template dp_bf16<0, 4, 6>();
    for (int l = 0; l < 16; ++l) __builtin_prefetch(ahead + 64 * l, 0, 3);
    tiles.template load<7>(bs + kStep / 2, 64);
    tiles.template dp_bf16<1, 4, 7>();
    for (int l = 16; l < 32; ++l) __builtin_prefetch(ahead + 64 * l, 0, 3);
    tiles.template load<5>(as + kStep / 2, 64);
    tiles.template dp_bf16<2, 5, 6>();
    tiles.template dp_bf16<3, 5, 7>();
  }
  return end_chains(tiles);
}

}  // namespace amx_peak

// The level's peak table with the tile probe over `Tiles`; `level` names the table ("amx" for the
// real tiles: the vector probes are the avx512bf16 level's code, but the table is the amx level's).
template <class Tiles>
constexpr PeakKernels make_peak_amx_kernels(const char* level) {
  PeakKernels k = make_peak_kernels();
  k.level = level;
  k.amx_bf16 = &amx_peak::run<Tiles>;
  k.amx_flops_per_iter = amx_peak::kFlopsPerIter;
  k.amx_bf16_streamed = &amx_peak::run_streamed<Tiles>;
  return k;
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
