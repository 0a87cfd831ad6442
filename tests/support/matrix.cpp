#include "support/matrix.hpp"

#include <map>

#include "cpu/common/bf16_dot.hpp"
#include "goldens/common/device_staging.hpp"

namespace mlakit::testing {

using goldens::Bundle;
using goldens::Comparison;

// Levels with the bf16 pair dot are tested on it on every CPU (the automatic choice takes it on
// AMD CPUs only): their f32 paths are the avx512 level's, tested there.
IsaCap::IsaCap(Isa cap) : saved_(max_isa()), saved_bf16_dot_(cpu::bf16_dot::mode()) {
  set_max_isa(cap);
  if (static_cast<int>(cap) >= static_cast<int>(Isa::avx512bf16)) cpu::bf16_dot::set_mode(cpu::RouteMode::on);
}
IsaCap::~IsaCap() {
  set_max_isa(saved_);
  cpu::bf16_dot::set_mode(saved_bf16_dot_);
}

std::vector<BackendUnderTest> backends_under_test() {
  std::vector<BackendUnderTest> v;
  for (Isa i : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx})
    v.push_back({Backend::cpu, i, std::string("cpu_") + isa_name(i)});
  v.push_back({Backend::cuda, Isa::generic, "cuda"});
  return v;
}

std::string skip_reason(const BackendUnderTest& be) {
  std::string why;
  if (!backend_available(be.backend, &why)) return why;
  if (be.backend == Backend::cpu && static_cast<int>(be.isa) > static_cast<int>(cpu_supported_isa()))
    return std::string("this CPU cannot run ISA level ") + isa_name(be.isa) + " (it supports up to " +
           isa_name(cpu_supported_isa()) + ")";
  return {};
}

std::vector<MatrixParam> matrix_params(const std::string& op) {
  std::vector<MatrixParam> params;
  const auto* driver = goldens::find_driver(op);
  if (!driver) return params;
  for (const auto& spec : driver->cases())
    for (std::uint64_t seed : kSeeds)
      for (const auto& be : backends_under_test()) params.push_back({op, spec, seed, be});
  return params;
}

std::string matrix_param_name(const ::testing::TestParamInfo<MatrixParam>& info) {
  return info.param.spec.name + "_seed" + std::to_string(info.param.seed) + "_" + info.param.be.label;
}

namespace {

std::map<std::string, goldens::Tensor> inputs_of(const Bundle& b) {
  std::map<std::string, goldens::Tensor> in;
  for (const auto& [name, t] : b.tensors)
    if (name.rfind("out.", 0) != 0) in[name] = t;
  return in;
}

void expect_inputs_untouched(const Bundle& b, const std::map<std::string, goldens::Tensor>& before,
                             const std::string& who) {
  for (const auto& [name, t] : before)
    EXPECT_TRUE(b.at(name).same_bytes(t)) << who << " modified input '" << name << "'";
}

void expect_guards(const Bundle& b, const std::string& who) {
  for (const auto& name : b.output_names())
    EXPECT_TRUE(b.at(name).guard_intact()) << who << " wrote past the end of '" << name << "'";
}

void expect_pass(const std::vector<Comparison>& cmp, const std::string& who) {
  EXPECT_FALSE(cmp.empty()) << who << ": nothing was compared";
  for (const auto& c : cmp) EXPECT_TRUE(c.pass) << who << ": " << goldens::describe(c);
}

Bundle run_checked(const goldens::OpDriver& driver, const Bundle& inputs, const RunOptions& opt,
                   const std::string& who) {
  Bundle b = inputs;
  const auto before = inputs_of(b);
  const Status s = goldens::run_driver(driver, b, opt);  // cuda: tensors staged in device memory
  EXPECT_TRUE(s.ok()) << who << ": " << s.message;
  expect_inputs_untouched(b, before, who);
  expect_guards(b, who);
  // Determinism: a second run with the same inputs gives the same bits.
  Bundle again = inputs;
  const Status s2 = goldens::run_driver(driver, again, opt);
  EXPECT_TRUE(s2.ok()) << who << " (second run): " << s2.message;
  for (const auto& name : b.output_names())
    EXPECT_TRUE(again.at(name).same_bytes(b.at(name))) << who << ": second run differs in '" << name << "'";
  return b;
}

}  // namespace

void run_against_reference(const goldens::OpDriver& driver, const goldens::CaseSpec& spec, std::uint64_t seed,
                           const BackendUnderTest& be) {
  const Bundle inputs = driver.generate(spec.knobs, seed);
  const Bundle expected = run_checked(driver, inputs, RunOptions{Backend::reference}, "reference");
  IsaCap cap(be.isa);
  RunOptions opt;
  opt.backend = be.backend;
  Bundle probe = inputs;
  const Status s = goldens::run_driver(driver, probe, opt);
  if (s.code == StatusCode::unsupported) GTEST_SKIP() << be.label << " declines this case: " << s.message;
  const Bundle actual = run_checked(driver, inputs, opt, be.label);
  expect_pass(driver.compare(expected, actual), be.label + " vs reference");
}

void run_reference_against_oracle(const goldens::OpDriver& driver, const goldens::CaseSpec& spec, std::uint64_t seed,
                                  const Oracle& oracle) {
  const Bundle inputs = driver.generate(spec.knobs, seed);
  const Bundle expected = run_checked(driver, inputs, RunOptions{Backend::reference}, "reference");
  Bundle alt = inputs;
  alt.remove_outputs();
  oracle(alt);
  expect_pass(driver.compare(alt, expected), "reference vs oracle");
}

}  // namespace mlakit::testing
