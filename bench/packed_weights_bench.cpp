// Op 5's prefills with the layer's weights packed once (pack_weights) and named by every call, as a
// serving engine keeps them beside each layer: packed_weights/fused_qkv_paged/<case> at the CPU's
// own level, for the driver's prefill bench cases and its act-order GPTQ decode cases (whose pack
// holds the codes in group order, read by decode calls too); packed_codes/fused_qkv_paged/<case>
// for those act-order cases and the GPTQ decode cases with a pack of the codes alone
// (prefill_layout = false: rows padded apart, read by every call). Counters as
// the operator rows (gflops, pct_peak, pct_f32_peak, pct_of_library, pct_of_onednn: the library
// bars against the packed call) and
//   x_unpacked  the same call without the pack, in time, over the packed call: the median of five
//               pairs timed back to back (above 1: the pack saves that much);
//   pack_mib    the pack's memory; pack_ms the one pack_weights call that made it.
#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench/op_bench.hpp"
#include "goldens/fused_qkv_paged.hpp"

namespace mlakit::bench {
namespace {

double seconds_of(const std::function<Status()>& call) {
  const auto t0 = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run_packed_case(benchmark::State& state, const goldens::OpDriver& driver, const goldens::CaseSpec& spec,
                     const FusedQkvPackOptions& options) {
  goldens::Bundle b = driver.generate(spec.knobs, 1);
  driver.prepare_outputs(b);
  const FusedQkvPagedDesc d = goldens::fused_qkv_paged_desc(b);
  FusedQkvPagedArgs a = goldens::fused_qkv_paged_args(b);
  FusedQkvPackedWeights w;
  const auto t0 = std::chrono::steady_clock::now();
  const Status packed = pack_weights(d, a, &w, options);
  const double pack_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!packed.ok()) {
    state.SkipWithError(packed.message.c_str());
    return;
  }
  const RunOptions cpu{Backend::cpu};
  FusedQkvPagedArgs with = a;
  with.packed_weights = &w;
  const std::function<Status()> packed_call = [&] { return fused_qkv_paged(d, with, cpu); };
  const std::function<Status()> plain_call = [&] { return fused_qkv_paged(d, a, cpu); };
  time_cpu_call(state, driver, driver.work(b), packed_call);
  if (state.error_occurred()) return;
  std::vector<double> ratio;
  plain_call();
  for (int i = 0; i < 5; ++i) {
    const double p = seconds_of(packed_call);
    ratio.push_back(seconds_of(plain_call) / p);
  }
  std::sort(ratio.begin(), ratio.end());
  state.counters["x_unpacked"] = ratio[ratio.size() / 2];
  state.counters["pack_mib"] = static_cast<double>(w.bytes()) / (1 << 20);
  state.counters["pack_ms"] = pack_seconds * 1e3;
  set_bar_counters(state, paired_bars(driver.name(), b, packed_call));
  state.SetLabel(w.layout());
}

}  // namespace

void register_packed_weights_benchmarks() {
  const goldens::OpDriver* driver = goldens::find_driver("fused_qkv_paged");
  if (driver == nullptr) return;
  for (const goldens::CaseSpec& spec : driver->bench_cases()) {
    const bool act_order = spec.what.find("act-order") != std::string::npos;
    const bool gptq_decode = spec.name.find("gptq") != std::string::npos && spec.what.rfind("decode", 0) == 0;
    if (spec.what.rfind("prefill", 0) == 0 || act_order)
      benchmark::RegisterBenchmark(("packed_weights/fused_qkv_paged/" + spec.name).c_str(),
                                   [driver, spec](benchmark::State& st) { run_packed_case(st, *driver, spec, {}); })
          ->Unit(benchmark::kMillisecond);
    if (!act_order && !gptq_decode) continue;
    FusedQkvPackOptions codes;
    codes.prefill_layout = false;
    benchmark::RegisterBenchmark(("packed_codes/fused_qkv_paged/" + spec.name).c_str(),
                                 [driver, spec, codes](benchmark::State& st) { run_packed_case(st, *driver, spec, codes); })
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace mlakit::bench
