// Operator benchmarks: every bench case of every operator driver linked in (goldens::all_drivers),
// on every back-end, named <op>/<case>/<backend>[/<isa>]. The peak probe runs first in the same
// process; cpu rows' pct_peak is against its all-threads figure for their level's arithmetic, cuda
// rows' against the GPU's bf16 matmul rate measured beside it (where a GPU is present); GEMM-shaped
// cpu rows' pct_of_library against the BLAS library's GEMMs of the same shapes (library_bar.hpp)
// and pct_of_onednn against oneDNN's bf16 matmuls of them (onednn_bar.hpp).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench/gpu_peak.hpp"
#include "bench/library_bar.hpp"
#include "bench/onednn_bar.hpp"
#include "bench/op_bench.hpp"
#include "bench/peak_probe.hpp"
#include "core/common/cpu_features.hpp"
#include "cpu/common/kernels.hpp"
#include "cpu/common/parallel.hpp"

int main(int argc, char** argv) {
  using namespace mlakit;
  bench::register_op_benchmarks();
  bench::register_plan_run_benchmarks();
  bench::register_engine_layout_benchmarks();
  bench::register_flashmla_layout_benchmarks();
  bench::register_packed_weights_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("cpu_model", core::cpu_info().model);
  benchmark::AddCustomContext("cpu_features", core::feature_list(core::cpu_info().features));
  benchmark::AddCustomContext("isa_level", isa_name(active_isa()));
  benchmark::AddCustomContext("threads", std::to_string(cpu::num_threads()));
  // A GPU-only run (cuda rows) can leave out the CPU probe, half a minute on a 16-core host; cpu
  // rows still measure it when they first need it.
  const char* cpu_peak = std::getenv("MLAKIT_BENCH_CPU_PEAK");
  if (cpu_peak != nullptr && std::strcmp(cpu_peak, "off") == 0) {
    benchmark::AddCustomContext("peak", "not measured up front (MLAKIT_BENCH_CPU_PEAK=off)");
  } else {
    const bench::PeakFigures& p = bench::peak();
    std::fprintf(stderr, "%s\n", bench::describe(p).c_str());
    benchmark::AddCustomContext("peak", bench::describe(p));
  }
  benchmark::AddCustomContext("library_gemm", bench::library_description());
  benchmark::AddCustomContext("onednn", bench::onednn_description());
  if (backend_available(Backend::cuda)) {
    const bench::GpuPeak& g = bench::gpu_peak();
    std::fprintf(stderr, "%s\n", bench::describe(g).c_str());
    benchmark::AddCustomContext("gpu_peak", bench::describe(g));
  }
  for (const auto& [family, choice] : cpu::kernel_choices()) benchmark::AddCustomContext("kernels." + family, choice);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
