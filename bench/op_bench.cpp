#include "bench/op_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <time.h>
#include <utility>
#include <vector>

#include "bench/gpu_peak.hpp"
#include "bench/library_bar.hpp"
#include "bench/onednn_bar.hpp"
#include "bench/peak_probe.hpp"
#include "core/common/cpu_features.hpp"
#include "cpu/common/bf16_dot.hpp"
#include "cpu/common/kernels.hpp"
#include "cpu/common/tile_gemm.hpp"
#include "cpu/common/parallel.hpp"
#include "goldens/common/device_staging.hpp"

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
  return {};
}

namespace {

// Per-call wall time of driver.call() on one prepared bundle. On cuda every tensor is uploaded
// once before the timed calls and each call ends with the stream drained, so a call's time is what
// a serving loop sees: host validation, the content check, the kernels; no uploads, no host copies.
struct TimedCalls {
  double seconds_per_call = 0;
  Status status;
};

TimedCalls time_calls(benchmark::State& state, const goldens::OpDriver& driver, goldens::Bundle& bundle,
                      const RunOptions& options) {
  TimedCalls r;
  std::optional<goldens::DeviceStaging> staging;
  driver.prepare_outputs(bundle);
  if (options.backend == Backend::cuda) {
    staging.emplace(bundle);
    r.status = staging->upload_all();
    if (!r.status.ok()) return r;
  }
  const auto call = [&] {
    Status s = driver.call(bundle, options);
    if (s.ok() && staging) s = staging->synchronize();
    return s;
  };
  r.status = call();  // warm-up, and the unsupported check
  if (!r.status.ok()) return r;
  double wall = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    r.status = call();
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r.status.ok()) return r;
  }
  if (staging) r.status = staging->finish();
  r.seconds_per_call = wall / static_cast<double>(state.iterations() ? state.iterations() : 1);
  return r;
}

// The library bars against the operator, each a median over kBarPairs pairs of (one operator
// call, one round of the bar's GEMMs) timed back to back: this host's speed changes between
// phases by more than the differences measured, and a bar timed apart from the operator (once
// after its rows, the best of three against their mean) moved the ratio by as much.
constexpr int kBarPairs = 5;

// Returns once the process's threads have been idle for a while (under 1 ms of CPU time in 10 ms
// of wall time; at most a second). The libraries leave their worker threads spinning after a call
// returns: OpenBLAS's server threads poll for 2^28 TSC cycles (110 ms of a core here), GNU OpenMP
// under oneDNN some 300k pauses. On a machine with as many cores as threads the spinners took the
// cores of whatever was timed next: a 7.5 ms fp8 decode batch timed 9-24 ms right after the bars
// (Zen 3, 2 threads), which put it at 59-79 % of OpenBLAS where it is at 102-124 % once they have
// stopped. Each side of a pair is timed with the other's threads asleep, as it would run in an
// engine between other work; its own threads may be asleep too, and waking them is part of its call.
void wait_until_quiet() {
  const auto cpu_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  double before = cpu_seconds();
  while (std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const double now = cpu_seconds();
    if (now - before < 1e-3) return;
    before = now;
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

BarRatios paired_bars(const std::string& op, goldens::Bundle& bundle, const std::function<Status()>& call) {
  const int threads = cpu::num_threads();
  std::optional<BarRound> lib = library_bar(op, bundle, threads);
  std::optional<BarRound> dn = onednn_bar(op, bundle, threads);
  BarRatios r;
  if (!lib && !dn) return r;
  for (const std::optional<BarRound>* bar : {&lib, &dn})
    if (*bar) (**bar)();  // warm-up
  std::vector<double> lib_ratio, dn_ratio;
  for (int i = 0; i < kBarPairs; ++i) {
    wait_until_quiet();
    const auto t0 = std::chrono::steady_clock::now();
    if (!call().ok()) return BarRatios{};
    const double op = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (auto [bar, ratios] : {std::pair{&lib, &lib_ratio}, std::pair{&dn, &dn_ratio}}) {
      if (!*bar) continue;
      wait_until_quiet();
      ratios->push_back((**bar)() / op);
    }
  }
  wait_until_quiet();  // the next repetition's timed calls start with the bars' threads asleep
  if (lib) r.blas = median(lib_ratio);
  if (dn) r.onednn = median(dn_ratio);
  return r;
}

void set_bar_counters(benchmark::State& state, const BarRatios& bars) {
  // pct_of_library: the same GEMMs through the BLAS library (bench/library_bar.hpp) against this
  // call, in time: above 100 the operator, with all it does besides, beats the library's GEMMs.
  // pct_of_onednn: the same against oneDNN's bf16 matmul (bench/onednn_bar.hpp), where built in.
  if (bars.blas) state.counters["pct_of_library"] = *bars.blas * 100.0;
  if (bars.onednn) state.counters["pct_of_onednn"] = *bars.onednn * 100.0;
}

namespace {

// Google Benchmark calls a row's function more than once (a first run sizes the iteration count),
// and a spec-size case takes seconds to generate: a row's inputs are made once and kept until the
// next row asks for others (the old ones freed first, so only one row's inputs are alive).
goldens::Bundle& case_inputs(const goldens::OpDriver& driver, const goldens::CaseSpec& spec, const BackendChoice& be) {
  static std::string key;
  static std::optional<goldens::Bundle> kept;
  const std::string wanted = std::string(driver.name()) + "/" + spec.name + "/" + be.label;
  if (!kept || key != wanted) {
    kept.reset();
    kept.emplace(driver.generate(spec.knobs, 1));
    key = wanted;
  }
  return *kept;
}

}  // namespace

// Ops 3-5: the operators whose work is GEMM-shaped (the indexers' is not).
bool gemm_shaped(const goldens::OpDriver& driver) {
  const std::string op = driver.name();
  return op != "lightning_indexer" && op != "msa_block_indexer";
}

// The all-threads peak of the arithmetic an operator's call runs on at the current level: the
// indexers (ops 1, 2) multiply on the level's best (bf16 dot from avx512bf16, f32 FMA below); the
// GEMM-shaped ops 3-5 on the AMX tiles where they take the tile route (op 3's P·V as three bf16
// products, counted once), else on the bf16 pair dot only where the CPU takes it
// (cpu/common/bf16_dot.hpp: AMD), else on f32 FMA: on Intel's avx512bf16 level that is the f32
// peak, which its rows were once wrongly put against the bf16 dot's.
double arithmetic_peak_gflops(const goldens::OpDriver& driver, Isa level) {
  if (!gemm_shaped(driver)) return relevant_gflops(peak(), level, true);
  const simd::GemmKernels& g = cpu::gemm_kernels();
  const bool tiles = g.gemm_tiles != nullptr && cpu::tile_gemm::mode() != cpu::RouteMode::off;
  if (tiles && peak().amx) return peak().amx_gflops_all;
  if (cpu::bf16_dot::use(g) && peak().bf16_kind == "vdpbf16ps") return peak().bf16_gflops_all;
  return peak().f32_gflops_all;
}

// pct_gemm_l1: a GEMM-shaped operator (3-5) whose products run on f32 FMA, against the panel
// GEMM on L1-resident operands on as many threads, rated from wall time as the call is
// (peak_probe.hpp): where a shared host's cores slow each other down, the bound of its pct_peak.
void set_gemm_l1_counter(benchmark::State& state, const goldens::OpDriver& driver, double peak_gflops,
                         double flops_per_s) {
  if (!gemm_shaped(driver) || peak_gflops != peak().f32_gflops_all || peak().gemm_l1_gflops_all <= 0) return;
  state.counters["pct_gemm_l1"] = flops_per_s / (peak().gemm_l1_gflops_all * 1e9) * 100.0;
}

void run_op_case(benchmark::State& state, const goldens::OpDriver& driver, const goldens::CaseSpec& spec,
                 const BackendChoice& be) {
  const std::string why = backend_skip_reason(be);
  if (!why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  goldens::Bundle& bundle = case_inputs(driver, spec, be);
  RunOptions options;
  options.backend = be.backend;
  const Isa saved = max_isa();
  if (be.backend == Backend::cpu) set_max_isa(be.isa);
  // Operators run on many threads (or a GPU): rates come from wall time measured here (the
  // benchmark's own rate counters would divide by the calling thread's CPU time).
  const TimedCalls t = time_calls(state, driver, bundle, options);
  const double peak_gflops = be.backend == Backend::cpu ? arithmetic_peak_gflops(driver, be.isa) : 0.0;
  const BarRatios bars = t.status.ok() && be.backend == Backend::cpu
                             ? paired_bars(driver.name(), bundle, [&] { return driver.call(bundle, options); })
                             : BarRatios{};
  set_max_isa(saved);
  if (!t.status.ok()) {
    state.SkipWithError((std::string(status_code_name(t.status.code)) + ": " + t.status.message).c_str());
    return;
  }
  const goldens::Work w = driver.work(bundle);
  state.counters["gflops"] = w.flops * 1e-9 / t.seconds_per_call;
  state.counters["gbps"] = w.bytes * 1e-9 / t.seconds_per_call;
  if (be.backend == Backend::cuda) {
    // Against the GPU's bf16 matmul rate measured in this process (bench/gpu_peak.hpp).
    const GpuPeak& g = gpu_peak();
    if (g.measured) state.counters["pct_peak"] = w.flops / t.seconds_per_call / (g.bf16_matmul_tflops * 1e12) * 100.0;
    return;
  }
  // pct_peak: against the peak of the arithmetic the call runs on (peak_gflops above);
  // pct_f32_peak: always against the f32 FMA peak, to compare levels.
  state.counters["pct_peak"] = w.flops / t.seconds_per_call / (peak_gflops * 1e9) * 100.0;
  state.counters["pct_f32_peak"] = w.flops / t.seconds_per_call / (peak().f32_gflops_all * 1e9) * 100.0;
  set_gemm_l1_counter(state, driver, peak_gflops, w.flops / t.seconds_per_call);
  // pct_paged_read: the bytes the call reads against a plain read of shuffled 16 KiB pages on as
  // many threads, no arithmetic: for a decode call, which reads each cache page once through its
  // lookup table, 100 is what memory allows.
  state.counters["pct_paged_read"] = w.bytes / t.seconds_per_call / (peak().paged_gbps_all * 1e9) * 100.0;
  set_bar_counters(state, bars);
}

void time_cpu_call(benchmark::State& state, const goldens::OpDriver& driver, const goldens::Work& w,
                   const std::function<Status()>& call) {
  Status s = call();  // warm-up
  double wall = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    s = call();
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (!s.ok()) {
    state.SkipWithError(s.message.c_str());
    return;
  }
  const double seconds = wall / static_cast<double>(state.iterations() ? state.iterations() : 1);
  state.counters["gflops"] = w.flops * 1e-9 / seconds;
  state.counters["gbps"] = w.bytes * 1e-9 / seconds;
  state.counters["pct_peak"] = w.flops / seconds / (arithmetic_peak_gflops(driver, active_isa()) * 1e9) * 100.0;
  state.counters["pct_f32_peak"] = w.flops / seconds / (peak().f32_gflops_all * 1e9) * 100.0;
  set_gemm_l1_counter(state, driver, arithmetic_peak_gflops(driver, active_isa()), w.flops / seconds);
  state.counters["pct_paged_read"] = w.bytes / seconds / (peak().paged_gbps_all * 1e9) * 100.0;
}

void register_op_benchmarks() {
  for (const goldens::OpDriver* driver : goldens::all_drivers()) {
    for (const goldens::CaseSpec& spec : driver->bench_cases()) {
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
