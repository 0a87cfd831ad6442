// What plan / run saves a serving engine: a decode step (B = 32, 64 pages of cache per sequence)
// of ops 1, 2, 4 and 5 on the cpu back-end, timed three ways per operator:
//   one_shot  today's call: validates the batch metadata's content, routes, computes;
//   run       a run of a plan: checks shapes, strides, aliasing and that the batch is the plan's,
//             then computes (what each of a step's 61 layers pays);
//   plan      plan() alone: the content checks, routing and workspace sizing, paid once per step;
//   one_shot_checks, run_checks: the first two with the computation left out (their overhead).
// Counters: us_per_call; and for one_shot/run the same gflops as the operator benchmarks.
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "goldens/common/driver.hpp"
#include "ops/common/plan_run.hpp"

namespace mlakit::bench {
namespace {

using goldens::json;

struct DecodeCase {
  const char* op;
  const char* name;
  json knobs;
};

std::vector<DecodeCase> decode_cases() {
  const std::vector<std::int64_t> ones(32, 1);
  return {
      {"lightning_indexer", "decode_b32_p64_h64",
       {{"seq_lens", ones}, {"cache_lens", std::vector<std::int64_t>(32, 64 * 64 - 1)}, {"num_heads", 64},
        {"head_dim", 128}, {"top_k", 2048}, {"page_size", 64}}},
      {"msa_block_indexer", "decode_b32_p64_h8",
       {{"seq_lens", ones}, {"prefix_lens", std::vector<std::int64_t>(32, 64 * 128 - 1)}, {"num_index_heads", 8},
        {"idx_head_dim", 128}, {"block_size", 128}, {"topk", 16}, {"init_blocks", 1}, {"local_blocks", 2},
        {"scale", 0.08838834764831845}}},
      {"sparse_mla_prefill", "decode_t32_k2048_h128",
       {{"T", 32}, {"num_q_heads", 128}, {"qk_depth", 576}, {"v_depth", 512}, {"indices_stride", 2048},
        {"page_size", 64}, {"seq_lens", json::array({64 * 64})}, {"topk_lengths", "full"},
        {"scale", 1.0 / std::sqrt(192.0)}, {"invalid_fraction", 0.0}, {"out_of_range_fraction", 0.0},
        {"duplicate_fraction", 0.0}, {"unowned_fraction", 0.0}}},
      {"fused_qkv_paged", "deepseek_v3_mla_fp8_b32_p64",
       {{"K", 7168}, {"q_dim", 1536}, {"cache", "mla"}, {"num_kv_heads", 1}, {"head_dim", 576},
        {"weight_format", "fp8_block"}, {"page_size", 64}, {"num_layers", 1}, {"layer_idx", 0}, {"seq_lens", ones},
        {"cache_lens", std::vector<std::int64_t>(32, 64 * 64 - 1)}}},
  };
}

// one_shot_checks / run_checks: the same calls with the computation left out (ChecksOnly), so
// what remains is each call's overhead.
enum class Way { one_shot, run, plan, one_shot_checks, run_checks };

void time_case(benchmark::State& state, const goldens::OpDriver& driver, const DecodeCase& c, Way way) {
  goldens::Bundle b = driver.generate(c.knobs, 1);
  driver.prepare_outputs(b);
  const goldens::Work w = driver.work(b);
  Status s;
  const bool checks_only = way == Way::one_shot_checks || way == Way::run_checks;
  std::unique_ptr<core::ChecksOnly> scope;
  if (checks_only) scope = std::make_unique<core::ChecksOnly>();
  if (way == Way::one_shot || way == Way::one_shot_checks) {
    for (auto _ : state) s = driver.call(b, RunOptions{Backend::cpu});
  } else if (way == Way::run || way == Way::run_checks) {
    goldens::PlannedRun pr;
    pr.options.backends = {Backend::cpu};
    pr.keep_going = [&] { return state.KeepRunning(); };
    s = driver.call_planned(b, &pr);
  } else {
    goldens::PlannedRun pr;
    pr.options.backends = {Backend::cpu};
    pr.replan = [&] { return state.KeepRunning(); };
    s = driver.call_planned(b, &pr);
  }
  if (!s.ok()) {
    state.SkipWithError(s.message.c_str());
    return;
  }
  state.counters["us_per_call"] = benchmark::Counter(static_cast<double>(state.iterations()) * 1e-6,
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  if (way == Way::one_shot || way == Way::run)
    state.counters["gflops"] = benchmark::Counter(w.flops * static_cast<double>(state.iterations()) * 1e-9,
                                                  benchmark::Counter::kIsRate);
}

}  // namespace

void register_plan_run_benchmarks() {
  static const std::vector<DecodeCase> cases = decode_cases();
  for (const DecodeCase& c : cases) {
    const goldens::OpDriver* d = goldens::find_driver(c.op);
    if (d == nullptr) continue;
    for (Way way : {Way::one_shot, Way::run, Way::plan, Way::one_shot_checks, Way::run_checks}) {
      const char* label = way == Way::one_shot          ? "one_shot"
                          : way == Way::run             ? "run"
                          : way == Way::plan            ? "plan"
                          : way == Way::one_shot_checks ? "one_shot_checks"
                                                        : "run_checks";
      benchmark::RegisterBenchmark(("plan_run/" + std::string(c.op) + "/" + c.name + "/" + label).c_str(),
                                   [d, &c, way](benchmark::State& st) { time_case(st, *d, c, way); })
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace mlakit::bench
