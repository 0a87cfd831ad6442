// One driver per operator: the golden-matrix case table, the case generator, how to run the
// operator on a bundle, how to compare outputs, and how much work a call is. The tests, the
// benchmarks, the golden files and the mlakit command all go through these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "goldens/common/compare.hpp"
#include "goldens/common/tensor.hpp"
#include "mlakit/backend.hpp"
#include "mlakit/plan.hpp"
#include "mlakit/status.hpp"

namespace mlakit::goldens {

struct CaseSpec {
  std::string name;   // unique within the operator, [a-z0-9_]
  std::string what;   // one line: which edge case it covers
  json knobs;         // generator settings; keys missing here take the driver's defaults
};

struct Work {
  double flops = 0;  // useful floating-point operations (2 per multiply-add)
  double bytes = 0;  // bytes the operator must read or write at least
};

// A bundle's call through plan() once and run() `runs` times: the serving loop's shape.
struct PlannedRun {
  PlanOptions options;
  RunContext context;          // the driver fills in the workspace when use_workspace is set
  bool use_workspace = false;  // hand the runs a workspace of exactly plan.workspace_bytes()
  int runs = 1;
  std::function<void()> after_plan;  // called between plan() and the first run (tests count there)
  std::function<bool()> keep_going;  // when set, runs while it returns true (benchmarks), not `runs`
  std::function<bool()> replan;      // when set, plans again while it returns true, then stops (benchmarks)
  // When set, issues the runs instead of the plain loop: it gets one run of the plan and decides
  // how often and how to issue it (a GPU test captures it in a CUDA graph and replays the graph).
  std::function<Status(const std::function<Status()>& run_once)> runner;
  // What the plan reported.
  std::size_t workspace_bytes = 0;
  std::string implementation, decisions;
};

// plan(d, a, pr->options), then pr->runs runs; what every driver's call_planned does.
template <class Desc, class Args>
Status plan_and_run(const Desc& d, const Args& a, PlannedRun* pr) {
  Plan<Desc, Args> p;
  Status s = plan(d, a, pr->options, &p);
  if (!s.ok()) return s;
  if (pr->replan) {
    while (s.ok() && pr->replan()) s = plan(d, a, pr->options, &p);
    return s;
  }
  pr->workspace_bytes = p.workspace_bytes();
  pr->implementation = p.implementation();
  pr->decisions = p.decisions();
  if (pr->after_plan) pr->after_plan();
  RunContext ctx = pr->context;
  std::unique_ptr<std::byte[]> memory;
  if (pr->use_workspace) {
    memory = std::make_unique<std::byte[]>(pr->workspace_bytes + 64);
    const auto at = reinterpret_cast<std::uintptr_t>(memory.get());
    ctx.workspace = memory.get() + (64 - at % 64) % 64;
    ctx.workspace_bytes = pr->workspace_bytes;
  }
  if (pr->runner) return pr->runner([&] { return run(p, a, ctx); });
  for (int i = 0; s.ok() && (pr->keep_going ? pr->keep_going() : i < pr->runs); ++i) s = run(p, a, ctx);
  return s;
}

// A bundle's call planned once and run again on other bundles of the same step: what an engine's
// layer loop does, from Python. A run's bundle carries the plan's params (its layer_idx may differ)
// and the step's metadata tensors as planned; the tensors a layer changes (queries, outputs, the
// cache of another layer) may be new.
class PlannedCall {
 public:
  virtual ~PlannedCall() = default;
  virtual Status run(const Bundle& b, const RunContext& context) const = 0;
  virtual const PlanInfo& info() const = 0;
};

// The operators' plan() and run() overloads, found by argument-dependent lookup where they are
// used (a member of the same name would hide them there).
template <class Desc, class Args, class P>
Status plan_operator(const Desc& d, const Args& a, const PlanOptions& options, P* p) {
  return plan(d, a, options, p);
}
template <class P, class Args>
Status run_operator(const P& p, const Args& a, const RunContext& context) {
  return run(p, a, context);
}

template <class Desc, class Args, class ArgsOf>
class PlannedCallOf final : public PlannedCall {
 public:
  explicit PlannedCallOf(ArgsOf args_of) : args_of_(std::move(args_of)) {}
  Status plan(const Desc& d, const Bundle& b, const PlanOptions& options) {
    return plan_operator(d, args_of_(b), options, &plan_);
  }
  Status run(const Bundle& b, const RunContext& context) const override {
    return run_operator(plan_, args_of_(b), context);
  }
  const PlanInfo& info() const override { return plan_; }

 private:
  ArgsOf args_of_;
  Plan<Desc, Args> plan_;
};

// Plans descriptor `d` on bundle b's arguments (args_of(bundle) -> the operator's Args); what every
// driver's plan() does.
template <class Desc, class ArgsOf>
Status make_planned_call(const Desc& d, const Bundle& b, ArgsOf args_of, const PlanOptions& options,
                         std::unique_ptr<PlannedCall>* out) {
  using Args = decltype(args_of(b));
  auto call = std::make_unique<PlannedCallOf<Desc, Args, ArgsOf>>(std::move(args_of));
  Status s = call->plan(d, b, options);
  if (s.ok()) *out = std::move(call);
  return s;
}

class OpDriver {
 public:
  virtual ~OpDriver() = default;
  virtual const char* name() const = 0;                  // spec/golden name, e.g. "lightning_indexer"
  virtual json default_knobs() const = 0;                // every knob with its default value
  virtual std::vector<CaseSpec> cases() const = 0;       // the golden matrix (small, fast)
  virtual CaseSpec default_case() const = 0;             // DeepSeek-shaped, for `mlakit` with no arguments
  virtual std::vector<CaseSpec> bench_cases() const = 0; // the spec's "sizes worth benchmarking"
  // Inputs and params of one call (no outputs). Missing knobs take default_knobs().
  virtual Bundle generate(const json& knobs, std::uint64_t seed) const = 0;
  // Runs the operator on b's inputs: prepare_outputs(b), then call(b, options).
  Status run(Bundle& b, const RunOptions& options) const {
    prepare_outputs(b);
    return call(b, options);
  }
  // What a bundle from a file must hold before anything is sized or read from it: params by the
  // operator's declared keys (params.hpp), the tensors it declares with their ranks (unknown ones
  // refused), and params that restate a tensor dimension agreeing with it. Throws InputError.
  virtual void check_inputs(const Bundle& b) const = 0;
  // check_inputs(b), then drops old out.*, creates and poisons them (copying in-place arguments to
  // out.<name> first). Output shapes come from checked params and the inputs' shapes, through
  // checked_nbytes (tensor.hpp): a size over the limit is an InputError, not an allocation.
  virtual void prepare_outputs(Bundle& b) const = 0;
  // The library's validation of b's inputs and prepared out.*, computing nothing: what a
  // comparison with someone else's outputs needs first (compare() reads the inputs' offsets and
  // page tables).
  virtual Status validate(const Bundle& b) const = 0;
  // Calls the public entry point on b's inputs and the out.* that prepare_outputs made. Benchmarks
  // call it again and again on one prepared (possibly device-staged) bundle, so that neither host
  // copies nor uploads are timed; in-place arguments then start from the previous call's result.
  virtual Status call(Bundle& b, const RunOptions& options) const = 0;
  // The same call through plan_and_run().
  virtual Status call_planned(Bundle& b, PlannedRun* pr) const = 0;
  // Plans b's call (inputs and out.* as call() takes them) for runs on other bundles of its step.
  virtual Status plan(const Bundle& b, const PlanOptions& options, std::unique_ptr<PlannedCall>* out) const = 0;
  // The tolerance JSON of the golden format, for outputs of b (keys "out.*").
  virtual json tolerance(const Bundle& b) const = 0;
  // Compares candidate's out.* with expected's out.* (both carry b's inputs) by that tolerance.
  // Only for bundles whose inputs passed validation and whose out.* have the prepared dtypes and
  // shapes (check_golden in golden_check.hpp makes sure); a file's tolerance is read through
  // ToleranceReader, so a bad one is an InputError.
  virtual std::vector<Comparison> compare(const Bundle& expected, const Bundle& candidate) const = 0;
  virtual Work work(const Bundle& b) const = 0;
};

// Registry: each operator's driver registers itself at static-initialization time.
bool register_driver(const OpDriver* driver);
const std::vector<const OpDriver*>& all_drivers();
const OpDriver* find_driver(std::string_view name);

// knobs overlaid on defaults (unknown keys in `overrides` are an error: returns false + why).
bool merge_knobs(const json& defaults, const json& overrides, json* merged, std::string* why);

}  // namespace mlakit::goldens
