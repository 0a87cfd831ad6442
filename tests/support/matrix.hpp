// The golden matrix: every case of an operator's driver, several seeds, every back-end present,
// each checked against the reference back-end under the driver's derived tolerance.
// (back-end, case) pairs that cannot run here are reported as skipped with the reason.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/common/route_switch.hpp"
#include "goldens/common/driver.hpp"

namespace mlakit::testing {

inline const std::vector<std::uint64_t> kSeeds = {1, 2, 3};

struct BackendUnderTest {
  Backend backend = Backend::reference;
  Isa isa = Isa::generic;  // cpu back-end only: the ISA cap for this run
  std::string label;       // "cpu_avx2", "cuda", ...
};

// cpu at every ISA level (generic .. amx) and cuda; whether each can run is decided per test.
std::vector<BackendUnderTest> backends_under_test();
// Empty when the back-end can run here; otherwise why not.
std::string skip_reason(const BackendUnderTest& be);

struct MatrixParam {
  std::string op;
  goldens::CaseSpec spec;
  std::uint64_t seed = 1;
  BackendUnderTest be;
};
std::vector<MatrixParam> matrix_params(const std::string& op);
// Readable test names in listings (otherwise GoogleTest prints the parameter's bytes).
inline void PrintTo(const MatrixParam& p, std::ostream* os) {
  *os << p.op << "/" << p.spec.name << "/seed" << p.seed << "/" << p.be.label;
}
std::string matrix_param_name(const ::testing::TestParamInfo<MatrixParam>& info);

// Generates the case, runs the reference twice (must be bit-identical, inputs untouched, guards
// intact, no poison left where the driver says every element is written), runs `be`, compares.
void run_against_reference(const goldens::OpDriver& driver, const goldens::CaseSpec& spec, std::uint64_t seed,
                           const BackendUnderTest& be);

// The oracle check: the reference against a second, independently written formulation that
// fills out.* of the bundle it is given. Compared with the driver's comparison.
using Oracle = std::function<void(goldens::Bundle&)>;
void run_reference_against_oracle(const goldens::OpDriver& driver, const goldens::CaseSpec& spec, std::uint64_t seed,
                                  const Oracle& oracle);

// Sets the ISA cap for the lifetime of the object; at the levels with the bf16 pair dot it also
// turns the pair dot on for the GEMM-shaped work (cpu/common/bf16_dot.hpp), so that each level's
// own arithmetic is what its cases test, on every CPU.
class IsaCap {
 public:
  explicit IsaCap(Isa cap);
  ~IsaCap();
  IsaCap(const IsaCap&) = delete;
  IsaCap& operator=(const IsaCap&) = delete;
 private:
  Isa saved_;
  cpu::RouteMode saved_bf16_dot_;
};

}  // namespace mlakit::testing

// In an operator's golden test file:  MLAKIT_GOLDEN_MATRIX(lightning_indexer)
#define MLAKIT_GOLDEN_MATRIX(OP)                                                                         \
  class GoldenMatrix_##OP : public ::testing::TestWithParam<::mlakit::testing::MatrixParam> {};          \
  TEST_P(GoldenMatrix_##OP, MatchesReference) {                                                           \
    const auto& p = GetParam();                                                                           \
    const auto reason = ::mlakit::testing::skip_reason(p.be);                                             \
    if (!reason.empty()) GTEST_SKIP() << p.be.label << ": " << reason;                                    \
    const auto* driver = ::mlakit::goldens::find_driver(#OP);                                            \
    ASSERT_NE(driver, nullptr);                                                                           \
    ::mlakit::testing::run_against_reference(*driver, p.spec, p.seed, p.be);                              \
  }                                                                                                       \
  INSTANTIATE_TEST_SUITE_P(OP, GoldenMatrix_##OP,                                                         \
                           ::testing::ValuesIn(::mlakit::testing::matrix_params(#OP)),                    \
                           ::mlakit::testing::matrix_param_name)
