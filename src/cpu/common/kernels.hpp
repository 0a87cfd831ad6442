// Run-time choice of the simd kernel tables for the cpu back-end.
//
// An operator asks for its tables when it plans a call (once per call, not per tile) and then
// calls through the pointers: no ISA #if and no intrinsics outside simd/. Candidates are tried
// fastest first (the order of simd/kernels.inc); a level declines when this CPU lacks one of the
// features its code was compiled for, or when it is above the cap (MLAKIT_MAX_ISA / set_max_isa),
// and the first that does not decline is used. simd/generic never declines.
//
// MLAKIT_VERBOSE=1 prints each family's choice and the declines to stderr (once per family and
// active level).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mlakit/backend.hpp"
#include "simd/kernels.hpp"

namespace mlakit::cpu {

struct Decline {
  Isa level;
  std::string reason;  // "avx512bf16: cpu lacks avx512_bf16 avx512vbmi"
};

// The table of the fastest level not above `level` that this CPU can run; `declines` (optional)
// receives the faster candidates that declined and why.
const simd::Fp8DecodeKernels& fp8_decode_kernels(Isa level, std::vector<Decline>* declines = nullptr);
const simd::GemmKernels& gemm_kernels(Isa level, std::vector<Decline>* declines = nullptr);
const simd::TopkKernels& topk_kernels(Isa level, std::vector<Decline>* declines = nullptr);
const simd::PeakKernels& peak_kernels(Isa level, std::vector<Decline>* declines = nullptr);
const simd::IndexScoreKernels& index_score_kernels(Isa level, std::vector<Decline>* declines = nullptr);
const simd::BlockScoreKernels& block_score_kernels(Isa level, std::vector<Decline>* declines = nullptr);
const simd::RopeNormKernels& rope_norm_kernels(Isa level, std::vector<Decline>* declines = nullptr);
const simd::Fp8QuantKernels& fp8_quant_kernels(Isa level, std::vector<Decline>* declines = nullptr);

// The same for active_isa(): what an operator call planned now uses.
const simd::Fp8DecodeKernels& fp8_decode_kernels();
const simd::GemmKernels& gemm_kernels();
const simd::TopkKernels& topk_kernels();
const simd::IndexScoreKernels& index_score_kernels();
const simd::BlockScoreKernels& block_score_kernels();
const simd::RopeNormKernels& rope_norm_kernels();
const simd::Fp8QuantKernels& fp8_quant_kernels();

// Tests only: the gemm table gemm_kernels() returns from now on, whatever the level (null: the
// dispatched one again). The amx level's tile GEMM over emulated tiles runs the operators' tile
// route with it on CPUs without AMX.
void set_gemm_kernels_for_tests(const simd::GemmKernels* table);

// The table compiled for exactly `level`, or nullptr when the library has none for it (tests and
// benchmarks use this to run every level the CPU supports, whatever the cap).
const simd::Fp8DecodeKernels* fp8_decode_kernels_at(Isa level);
const simd::GemmKernels* gemm_kernels_at(Isa level);
const simd::TopkKernels* topk_kernels_at(Isa level);
const simd::PeakKernels* peak_kernels_at(Isa level);
const simd::IndexScoreKernels* index_score_kernels_at(Isa level);
const simd::BlockScoreKernels* block_score_kernels_at(Isa level);
const simd::RopeNormKernels* rope_norm_kernels_at(Isa level);
const simd::Fp8QuantKernels* fp8_quant_kernels_at(Isa level);

// Levels the library has kernels for, fastest first (from simd/kernels.inc).
std::vector<Isa> kernel_levels();

// For `mlakit info`: each family and the level chosen for active_isa(), e.g.
// {"fp8_decode", "avx2"}, {"gemm", "avx2 (3x4 tile, f32 FMA)"}, ...
std::vector<std::pair<std::string, std::string>> kernel_choices();

}  // namespace mlakit::cpu
