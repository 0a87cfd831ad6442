#include "bench/op_bench.hpp"

#include <chrono>
#include <cstdlib>
#include <memory>

#include "bench/peak_probe.hpp"
#include "core/common/cpu_features.hpp"
#include "cpu/common/kernels.hpp"

namespace mlakit::bench {

std::vector<BackendChoice> bench_backends() {
  std::vector<BackendChoice> v;
  v.push_back({Backend::reference, Isa::generic, "reference"});
  std::vector<Isa> levels = cpu::kernel_levels();
  for (auto it = levels.rbegin(); it != levels.rend(); ++it)
    v.push_back({Backend::cpu, *it, std::string("cpu/") + isa_name(*it)});
  v.push_back({Backend::cuda, Isa::generic, "cuda"});
  return v;
}

std::string backend_skip_reason(const BackendChoice& be) {
  std::string why;
  if (!backend_available(be.backend, &why)) return why;
  if (be.backend == Backend::reference) {
    const char* e = std::getenv("MLAKIT_BENCH_REFERENCE");
    if (!e || std::string(e) != "1")
      return "the reference back-end is an f64 oracle (minutes per large case): set MLAKIT_BENCH_REFERENCE=1 to time it";
  }
  if (be.backend == Backend::cpu) {
    const std::uint32_t missing = core::isa_required_features(be.isa) & ~core::cpu_info().features;
    if (missing) return std::string("this CPU lacks ") + core::feature_list(missing);
  }
  if (be.backend == Backend::cuda)
    return "device tensors are not set up by the operator drivers' host bundles";  // until the CUDA back-end lands
  return {};
}

void run_op_case(benchmark::State& state, const harness::OpDriver& driver, const harness::CaseSpec& spec,
                 const BackendChoice& be) {
  const std::string why = backend_skip_reason(be);
  if (!why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  harness::Bundle bundle = driver.generate(spec.knobs, 1);
  RunOptions options;
  options.backend = be.backend;
  const Isa saved = max_isa();
  if (be.backend == Backend::cpu) set_max_isa(be.isa);
  Status s = driver.run(bundle, options);  // warm-up, and the unsupported check
  if (!s.ok()) {
    set_max_isa(saved);
    state.SkipWithError((std::string(status_code_name(s.code)) + ": " + s.message).c_str());
    return;
  }
  // Operators run on many threads: rates come from wall time measured here (the benchmark's own
  // rate counters would divide by the calling thread's CPU time).
  double wall = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    s = driver.run(bundle, options);
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) {
      state.SkipWithError(s.message.c_str());
      break;
    }
  }
  set_max_isa(saved);
  const double per_call = wall / static_cast<double>(state.iterations() ? state.iterations() : 1);
  const harness::Work w = driver.work(bundle);
  state.counters["gflops"] = w.flops * 1e-9 / per_call;
  state.counters["gbps"] = w.bytes * 1e-9 / per_call;
  // pct_peak: against the peak of the arithmetic the level runs on (bf16 dot on avx512bf16 and up,
  // f32 FMA below); pct_f32_peak: always against the f32 FMA peak, to compare levels.
  const Isa level = be.backend == Backend::cpu ? be.isa : Isa::generic;
  state.counters["pct_peak"] = w.flops / per_call / (relevant_gflops(peak(), level, true) * 1e9) * 100.0;
  state.counters["pct_f32_peak"] = w.flops / per_call / (peak().f32_gflops_all * 1e9) * 100.0;
}

void register_op_benchmarks() {
  for (const harness::OpDriver* driver : harness::all_drivers()) {
    for (const harness::CaseSpec& spec : driver->bench_cases()) {
      for (const BackendChoice& be : bench_backends()) {
        const std::string name = std::string(driver->name()) + "/" + spec.name + "/" + be.label;
        benchmark::RegisterBenchmark(name.c_str(),
                                     [driver, spec, be](benchmark::State& st) { run_op_case(st, *driver, spec, be); })
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace mlakit::bench
