// The operators' tile routes (the amx level's tile GEMM) under test: on the real tiles where this
// CPU has AMX, and on the emulated tiles (the same kernel over a scalar model of the tile
// instructions, tests/kernels/amx_emulation/) wherever avx512bf16 runs. A test program that uses
// this links mlakit_test_amx_emulated and the tile state (tests/CMakeLists.txt).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/common/kernels.hpp"
#include "kernels/amx_emulation/emulated_tables.hpp"
#include "support/cpu_level_cases.hpp"

namespace mlakit::testing {

struct TileSubject {
  const char* name;
  const simd::GemmKernels* table;  // null: the dispatched table (the real tiles)
  Isa runs_on;
};
inline void PrintTo(const TileSubject& t, std::ostream* os) { *os << t.name; }
inline std::vector<TileSubject> tile_subjects() {
  return {{"amx", nullptr, Isa::amx}, {"amx_emulated", &simd::gemm_amx_emulated, Isa::avx512bf16}};
}
inline std::string tile_subject_name(const ::testing::TestParamInfo<TileSubject>& info) { return info.param.name; }

// The subject's gemm table and ISA level for one scope.
struct GemmTableScope {
  explicit GemmTableScope(const TileSubject& t) : cap(t.runs_on) { cpu::set_gemm_kernels_for_tests(t.table); }
  ~GemmTableScope() { cpu::set_gemm_kernels_for_tests(nullptr); }
  GemmTableScope(const GemmTableScope&) = delete;
  GemmTableScope& operator=(const GemmTableScope&) = delete;
  IsaCap cap;
};

// A fixture over tile subjects that skips those this CPU cannot run.
class TileSubjectTest : public ::testing::TestWithParam<TileSubject> {
 protected:
  void SetUp() override {
    const TileSubject& t = GetParam();
    if (static_cast<int>(t.runs_on) > static_cast<int>(cpu_supported_isa()))
      GTEST_SKIP() << "this CPU cannot run " << t.name << " (needs " << isa_name(t.runs_on) << ")";
  }
};

}  // namespace mlakit::testing
