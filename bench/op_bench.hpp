// Operator benchmarks through the golden drivers: one OpDriver bench case on one back-end, named
// <op>/<case>/<backend>[/<isa>], with counters gflops and gbps (from the driver's work()) and
// pct_peak (share of the all-threads peak of the arithmetic the level runs on: AMX tiles on amx,
// bf16 dot on avx512bf16 with vdpbf16ps, f32 FMA below; on cuda, share of the GPU's bf16 matmul
// rate) and pct_f32_peak (cpu rows: share of the f32 FMA peak).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "goldens/common/driver.hpp"
#include "mlakit/backend.hpp"

namespace mlakit::bench {

struct BackendChoice {
  Backend backend = Backend::cpu;
  Isa isa = Isa::generic;  // cpu only: the ISA cap for the run
  std::string label;       // "cpu/avx2", "reference", "cuda"
};

// The back-ends an operator benchmark runs on: reference, cpu at every level the library has
// kernels for, cuda.
std::vector<BackendChoice> bench_backends();
// Empty when `be` can run here; otherwise why not (shown as the benchmark's error).
std::string backend_skip_reason(const BackendChoice& be);

// Generates the case (seed 1) and prepares its outputs once, then times driver.call() on it (on
// cuda with every tensor staged in device memory once, before the timed calls).
void run_op_case(benchmark::State& state, const goldens::OpDriver& driver, const goldens::CaseSpec& spec,
                 const BackendChoice& be);

// Times `call` once per benchmark iteration after one warm-up call, then sets gflops, gbps,
// pct_peak (against the peak of the arithmetic driver's operator runs on at the active level, as the
// operator rows) and pct_f32_peak from `w`, or the call's error. For
// benchmarks that run an operator on arguments of their own (the engine-layout ones).
void time_cpu_call(benchmark::State& state, const goldens::OpDriver& driver, const goldens::Work& w,
                   const std::function<Status()>& call);

// The library bars (bench/library_bar.hpp, bench/onednn_bar.hpp) of op's GEMMs on bundle's shapes
// against `call`, each the median of five pairs of (one call, one round of the bar) timed back to
// back: bar seconds / call seconds.
struct BarRatios {
  std::optional<double> blas, onednn;
};
BarRatios paired_bars(const std::string& op, goldens::Bundle& bundle, const std::function<Status()>& call);
// pct_of_library / pct_of_onednn from them.
void set_bar_counters(benchmark::State& state, const BarRatios& bars);
// Registers every bench case of every registered driver on every back-end.
void register_op_benchmarks();
// Registers the plan / run overhead benchmarks (plan_run_bench.cpp): plan_run/<op>/<case>/<way>.
void register_plan_run_benchmarks();
// Registers op 1 on the DeepGEMM indexer cache layout beside mlakit's (engine_layout_bench.cpp).
void register_engine_layout_benchmarks();
// Registers op 5's prefills with the weights packed once (packed_weights_bench.cpp) beside the
// same calls without: packed_weights/fused_qkv_paged/<case>/<packed|unpacked>.
void register_packed_weights_benchmarks();
// Registers op 4 on FlashMLA's V32 and MODEL1 sparse caches beside mlakit's (flashmla_layout_bench.cpp).
void register_flashmla_layout_benchmarks();

}  // namespace mlakit::bench
