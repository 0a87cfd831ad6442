// Shared pieces of the cpu back-end's operator tests: each case runs at every ISA level as its own
// test instance (skipped where this CPU lacks the level), and the back-end's thread count is set
// for one scope at a time.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "cpu/common/parallel.hpp"
#include "goldens/common/driver.hpp"
#include "support/matrix.hpp"

namespace mlakit::testing {

struct ThreadsGuard {
  explicit ThreadsGuard(int n) { cpu::set_num_threads(n); }
  ~ThreadsGuard() { cpu::set_num_threads(0); }
};

// Generator knobs of one case, named for the test.
struct BigCase {
  std::string name;
  goldens::json knobs;
};

struct LevelCase {
  Isa level;
  BigCase c;
};

inline std::vector<LevelCase> at_every_level(const std::vector<BigCase>& cases) {
  std::vector<LevelCase> v;
  for (Isa level : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx})
    for (const auto& c : cases) v.push_back({level, c});
  return v;
}

inline void PrintTo(const LevelCase& p, std::ostream* os) { *os << isa_name(p.level) << " " << p.c.name; }

inline std::string level_case_name(const ::testing::TestParamInfo<LevelCase>& i) {
  return std::string(isa_name(i.param.level)) + "_" + i.param.c.name;
}

// Skips the levels this CPU cannot run; tests cap the ISA at GetParam().level themselves (IsaCap).
class CpuLevelTest : public ::testing::TestWithParam<LevelCase> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam().level) > static_cast<int>(cpu_supported_isa()))
      GTEST_SKIP() << "this CPU cannot run ISA level " << isa_name(GetParam().level);
  }
};

inline goldens::Bundle run_cpu(const goldens::OpDriver& driver, const goldens::Bundle& in) {
  goldens::Bundle b = in;
  const Status s = driver.run(b, RunOptions{Backend::cpu});
  EXPECT_TRUE(s.ok()) << s.message;
  return b;
}

// Every golden-matrix case of the driver, two seeds, on the cpu back-end as configured now (level,
// routes), within the reference's tolerance; `where` names the configuration in failures.
inline void expect_golden_matrix_within_tolerance(const goldens::OpDriver& driver, const std::string& where) {
  for (const goldens::CaseSpec& c : driver.cases()) {
    for (std::uint64_t seed : {1, 2}) {
      const goldens::Bundle in = driver.generate(c.knobs, seed);
      goldens::Bundle ref = in;
      ASSERT_TRUE(driver.run(ref, RunOptions{Backend::reference}).ok()) << c.name;
      const goldens::Bundle got = run_cpu(driver, in);
      for (const auto& cmp : driver.compare(ref, got))
        EXPECT_TRUE(cmp.pass) << where << " " << c.name << " seed " << seed << ": " << goldens::describe(cmp);
    }
  }
}

// Runs `in` on the cpu back-end with one thread and compares it with the reference (the driver's
// comparison), then expects 2 and 4 threads to give the same bits: same(a, b, what) checks the
// operator's outputs.
template <class Same>
void expect_reference_match_and_thread_invariance(const goldens::OpDriver& driver, const goldens::Bundle& in,
                                                  Same same) {
  goldens::Bundle ref = in;
  ASSERT_TRUE(driver.run(ref, RunOptions{Backend::reference}).ok());
  goldens::Bundle one;
  {
    ThreadsGuard t(1);
    one = run_cpu(driver, in);
  }
  for (const auto& c : driver.compare(ref, one)) EXPECT_TRUE(c.pass) << goldens::describe(c);
  for (int n : {2, 4}) {
    ThreadsGuard t(n);
    same(run_cpu(driver, in), one, std::to_string(n) + " threads against 1");
  }
}

// `in` planned with a workspace and run on exactly the size the plan asked for: no buffer of its
// own (no workspace fallback) and the one-shot bits (same(a, b, what)). Returns the workspace bytes
// the plan asked for.
template <class Same>
std::size_t expect_planned_run_fits_its_workspace(const goldens::OpDriver& driver, const goldens::Bundle& in, Same same,
                                                  const std::string& what) {
  const goldens::Bundle one_shot = run_cpu(driver, in);
  goldens::Bundle planned = in;
  driver.prepare_outputs(planned);
  goldens::PlannedRun pr;
  pr.options.backends = {Backend::cpu};
  pr.use_workspace = true;
  const long fallbacks = cpu::workspace_fallbacks();
  const Status s = driver.call_planned(planned, &pr);
  EXPECT_TRUE(s.ok()) << what << ": " << s.message;
  if (!s.ok()) return 0;
  EXPECT_EQ(cpu::workspace_fallbacks(), fallbacks) << what << ": a buffer did not fit " << pr.workspace_bytes;
  same(planned, one_shot, what + ": planned against one-shot");
  return pr.workspace_bytes;
}

// Several user threads calling the cpu back-end at once (it on 2 threads), each on its own inputs
// generated from `knobs`, each equal to its serial result: same(a, b, what) checks the outputs.
template <class Same>
void expect_concurrent_callers_match_serial(const goldens::OpDriver& driver, const goldens::json& knobs, Same same) {
  ThreadsGuard t(2);
  constexpr int kCallers = 3;
  std::vector<goldens::Bundle> inputs, serial, results;
  for (int c = 0; c < kCallers; ++c) {
    inputs.push_back(driver.generate(knobs, 20 + static_cast<std::uint64_t>(c)));
    serial.push_back(run_cpu(driver, inputs.back()));
    results.push_back(inputs.back());
  }
  std::vector<Status> status(kCallers);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] { status[c] = driver.run(results[c], RunOptions{Backend::cpu}); });
  for (auto& th : callers) th.join();
  for (int c = 0; c < kCallers; ++c) {
    EXPECT_TRUE(status[c].ok()) << status[c].message;
    same(results[c], serial[c], "concurrent call " + std::to_string(c));
  }
}

}  // namespace mlakit::testing
