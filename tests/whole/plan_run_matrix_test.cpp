// plan() + run() against the one-shot call, for every case of every operator's golden matrix, on
// the reference and cpu back-ends: the outputs must be bit-identical (the one-shot call is plan +
// run; the planned runs use a caller workspace of exactly the size the plan asked for, and a
// caller's arena or a plan's own thread count), and no call buffer may fall outside the workspace.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include <tbb/task_arena.h>

#include "cpu/common/parallel.hpp"
#include "goldens/common/driver.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::OpDriver;

struct Param {
  const OpDriver* driver;
  goldens::CaseSpec spec;
  Backend backend;
  int threads;  // > 0: the plan's own arena of this many threads; 0: a caller's arena of 2
};

std::vector<Param> params() {
  std::vector<Param> out;
  for (const OpDriver* d : goldens::all_drivers()) {
    int i = 0;
    for (const goldens::CaseSpec& c : d->cases()) {
      out.push_back({d, c, Backend::cpu, i % 2 == 0 ? 0 : 1 + (i / 2) % 2});
      // The reference on every other case: it is the slow oracle, and its plan path is the same code.
      if (i % 2 == 0) out.push_back({d, c, Backend::reference, 0});
      ++i;
    }
  }
  return out;
}

void PrintTo(const Param& p, std::ostream* os) {
  *os << p.driver->name() << "/" << p.spec.name << "/" << backend_name(p.backend);
}

class PlanRunMatrix : public ::testing::TestWithParam<Param> {};

TEST_P(PlanRunMatrix, RunsBitIdenticalToTheOneShotCall) {
  const Param& p = GetParam();
  constexpr std::uint64_t kSeed = 2;
  Bundle one_shot = p.driver->generate(p.spec.knobs, kSeed);
  Bundle planned = p.driver->generate(p.spec.knobs, kSeed);
  RunOptions o;
  o.backend = p.backend;
  const Status s1 = p.driver->run(one_shot, o);
  ASSERT_TRUE(s1.ok()) << s1.message;

  p.driver->prepare_outputs(planned);
  goldens::PlannedRun pr;
  pr.options.backends = {p.backend};
  tbb::task_arena arena(2);
  if (p.threads > 0) pr.options.num_threads = p.threads;
  else pr.options.arena = &arena;
  pr.use_workspace = p.backend == Backend::cpu;
  const long fallbacks = cpu::workspace_fallbacks();
  const Status s2 = p.driver->call_planned(planned, &pr);
  ASSERT_TRUE(s2.ok()) << s2.message;
  EXPECT_EQ(cpu::workspace_fallbacks(), fallbacks)
      << "a call buffer did not fit the workspace the plan asked for (" << pr.workspace_bytes << " bytes)";
  EXPECT_EQ(pr.decisions, std::string(backend_name(p.backend)) + ": chosen");
  EXPECT_EQ(pr.implementation.rfind(backend_name(p.backend), 0), 0u) << pr.implementation;

  for (const std::string& name : one_shot.output_names()) {
    ASSERT_TRUE(planned.has(name)) << name;
    EXPECT_TRUE(planned.at(name).same_bytes(one_shot.at(name))) << name << " differs from the one-shot call";
  }
}

std::string name_of(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  return std::string(p.driver->name()) + "_" + p.spec.name + "_" + backend_name(p.backend);
}

INSTANTIATE_TEST_SUITE_P(Ops, PlanRunMatrix, ::testing::ValuesIn(params()), name_of);

}  // namespace
}  // namespace mlakit
