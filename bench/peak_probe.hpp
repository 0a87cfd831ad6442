// The peak probe: what this machine can do, measured in the benchmark's own process, so that
// every benchmark can report its share of it (`pct_peak`).
//   f32 FMA peak     — register-resident FMA chains (simd peak kernels), 1 thread and all threads
//   bf16 dot peak    — vdpbf16ps where the level has it, else the widening path (bf16 from L1,
//                      shift/mask to f32, FMA)
//   AMX bf16 tiles   — independent tdpbf16ps chains on four accumulator tiles, where the level is
//                      amx (else n/a); reported, not used for pct_peak
//   DRAM read        — a streaming sum over 512 MiB, 1 thread and all threads
// Rates are per thread CPU time, summed over threads, so that a loaded shared machine still
// reports what its cores deliver while they run (an upper bound when threads did not overlap).
#pragma once

#include <string>

#include "mlakit/backend.hpp"

namespace mlakit::bench {

struct PeakFigures {
  std::string level;  // ISA level of the probe kernels
  int threads = 1;    // "all threads" figures use this many
  double f32_gflops_1t = 0, f32_gflops_all = 0;
  double bf16_gflops_1t = 0, bf16_gflops_all = 0;
  std::string bf16_kind;
  bool amx = false;  // the AMX tile figures below were measured
  double amx_gflops_1t = 0, amx_gflops_all = 0;
  double dram_gbps_1t = 0, dram_gbps_all = 0;
};

// Measured once per level per process (the first call takes a few seconds).
const PeakFigures& peak(Isa level);
// peak() at the fastest level this CPU runs, capped by MLAKIT_MAX_ISA.
const PeakFigures& peak();

std::string describe(const PeakFigures& p);

// The peak an operator run at `level` is measured against: the bf16 dot peak where the level has
// vdpbf16ps (its kernels multiply exact bf16 / fp8 operands on it), else the f32 FMA peak. All
// threads (or one, for single-threaded kernel benchmarks).
double relevant_gflops(const PeakFigures& p, Isa level, bool all_threads);

}  // namespace mlakit::bench
