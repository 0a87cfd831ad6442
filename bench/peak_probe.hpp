// The peak probe: what this machine can do, measured in the benchmark's own process, so that
// every benchmark can report its share of it (`pct_peak`).
//   f32 FMA peak     — register-resident FMA chains (simd peak kernels), 1 thread and all threads
//   bf16 dot peak    — vdpbf16ps where the level has it, else the widening path (bf16 from L1,
//                      shift/mask to f32, FMA)
//   AMX bf16 tiles   — independent tdpbf16ps chains on four accumulator tiles, where the level is
//                      amx (else n/a); the peak of every amx row's pct_peak
//   panel GEMM in L1 — the gemm family's panel kernel on L1-resident operands, each thread its
//                      own, rated from wall time: what GEMM work gets from the cores together
//   DRAM read        — a streaming sum over 512 MiB, 1 thread and all threads
//   paged read       — the same 512 MiB read as 16 KiB pages (an fp8 cache block of 128 keys x 128)
//                      in a shuffled order, each thread its share of the pages, prefetching the
//                      next page as it reads one: what memory gives a decode call that walks a
//                      paged KV cache through its lookup table, with no arithmetic at all
// Rates are per thread CPU time (the panel GEMM's: per thread wall time), summed over threads, so
// that a loaded shared machine still reports what its cores deliver while they run (an upper
// bound when threads did not overlap).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

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
  // The panel GEMM's register tiles on L1-resident operands, each thread's rate from its own wall
  // time (summed): the f32 rate GEMM work gets from this host's cores together (0: not measured).
  double gemm_l1_gflops_1t = 0, gemm_l1_gflops_all = 0;
  double dram_gbps_1t = 0, dram_gbps_all = 0;
  double paged_gbps_1t = 0, paged_gbps_all = 0;
};

// The paged walk: pages order[first .. last) of `base` (page_floats floats each) summed front to
// back in 1 KiB chunks; with prefetch_next, each chunk also prefetches the same KiB of the page
// after it (the one-page-ahead prefetch of the decode kernels).
constexpr std::size_t kPagedReadPageFloats = 4096;  // 16 KiB pages
// Pages 0 .. pages-1 in address order, or shuffled (a fixed seed: every probe walks the same order).
std::vector<std::size_t> page_order(std::size_t pages, bool shuffled);
float page_walk_sum(float (*read_sum)(const float*, std::size_t), const float* base, const std::size_t* order,
                    std::size_t first, std::size_t last, std::size_t page_floats, bool prefetch_next);

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
