// Op 1 (lightning indexer) on the cpu back-end, split into its parts: the scoring phase alone
// (cpu::lightning_indexer_detail::run with selection skipped) and the whole operator (public entry,
// validation included), on the spec's headline shapes, named lightning_indexer_parts/<case>/<part>.
//
// Counters: gflops and pct_peak from wall time (as the operator benchmarks), and cpu_pct_peak from
// the process CPU time of the timed calls: flops / (CPU seconds x per-thread peak), the peak being
// that of the arithmetic the active level runs on (bench/peak_probe.hpp: relevant_gflops). On a
// machine shared with other work the wall-time figure drops with every foreign process, while the
// CPU-time figure describes the cores while they run this operator (idle waiting inside the call
// is not counted, so it is an upper bound when the threads are unevenly loaded).
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>

#include <time.h>

#include "bench/op_bench.hpp"
#include "bench/peak_probe.hpp"
#include "cpu/common/parallel.hpp"
#include "cpu/lightning_indexer.hpp"
#include "goldens/common/driver.hpp"
#include "mlakit/ops/lightning_indexer.hpp"

namespace mlakit::bench {
namespace {

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Call {
  LightningIndexerDesc desc;
  LightningIndexerArgs args;
};

Call make_call(goldens::Bundle& b) {
  const goldens::json& p = b.params;
  Call c;
  c.desc.num_heads = p.at("num_heads").get<std::int64_t>();
  c.desc.head_dim = p.at("head_dim").get<std::int64_t>();
  c.desc.top_k = p.at("top_k").get<std::int64_t>();
  c.desc.mask = p.at("mask").get<std::string>() == "causal" ? IndexerMask::causal : IndexerMask::none;
  goldens::Tensor& out = b.add("out.output_indices", DType::i32, {b.at("q").shape()[0], c.desc.top_k});
  c.args.q = b.at("q").view();
  c.args.q_s = b.at("q_s").view();
  c.args.input_row_offsets = b.at("input_row_offsets").view();
  c.args.k_cache = goldens::cache_view(b, "k_cache", p.at("quant_granularity").get<std::int64_t>());
  c.args.layer_idx = p.at("layer_idx").get<std::uint32_t>();
  c.args.output_indices = out.view();
  return c;
}

void run_part(benchmark::State& state, const goldens::OpDriver& driver, const goldens::CaseSpec& spec, bool scores_only) {
  const std::string why = backend_skip_reason({Backend::cpu, active_isa(), "cpu"});
  if (!why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  goldens::Bundle bundle = driver.generate(spec.knobs, 1);
  const Call call = make_call(bundle);
  const RunOptions options{Backend::cpu};
  auto once = [&] {
    return scores_only ? cpu::lightning_indexer_detail::run(call.desc, call.args, true)
                       : lightning_indexer(call.desc, call.args, options);
  };
  Status s = once();  // warm-up: workspace, pages, caches
  if (!s.ok()) {
    state.SkipWithError(s.message.c_str());
    return;
  }
  double wall = 0, cpu = 0;
  for (auto _ : state) {
    const double c0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    s = once();
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cpu += process_cpu_seconds() - c0;
    if (!s.ok()) {
      state.SkipWithError(s.message.c_str());
      return;
    }
  }
  const double iters = static_cast<double>(state.iterations() ? state.iterations() : 1);
  const goldens::Work w = driver.work(bundle);
  const PeakFigures& pk = peak();
  state.counters["gflops"] = w.flops * 1e-9 / (wall / iters);
  const double peak_all = relevant_gflops(pk, active_isa(), true);
  state.counters["pct_peak"] = w.flops / (wall / iters) / (peak_all * 1e9) * 100.0;
  state.counters["cpu_pct_peak"] = w.flops / cpu * iters / (peak_all / pk.threads * 1e9) * 100.0;
  state.counters["threads"] = cpu::num_threads();
}

// Registered at static initialisation under fixed names; the driver (registered by another static
// initialiser) is looked up when the benchmark runs.
const bool kRegistered = [] {
  for (const char* name : {"prefill_b1_s4096_c8192_h64", "prefill_b1_s4096_c0_h64", "decode_b32_c32768_h64",
                           "decode_b1_c131072_h64"}) {
    for (bool scores_only : {true, false}) {
      const std::string bench = std::string("lightning_indexer_parts/") + name + (scores_only ? "/scores" : "/whole");
      const std::string case_name = name;
      benchmark::RegisterBenchmark(bench.c_str(), [case_name, scores_only](benchmark::State& st) {
        const goldens::OpDriver* driver = goldens::find_driver("lightning_indexer");
        if (driver == nullptr) {
          st.SkipWithError("the lightning_indexer driver is not linked in");
          return;
        }
        for (const goldens::CaseSpec& spec : driver->bench_cases())
          if (spec.name == case_name) return run_part(st, *driver, spec, scores_only);
        st.SkipWithError(("no bench case " + case_name).c_str());
      })->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  }
  return true;
}();

}  // namespace
}  // namespace mlakit::bench
