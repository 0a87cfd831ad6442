// The kernel list (simd/kernels.inc) as test parameters: every family at every level the library
// is built with. A level this CPU cannot run is skipped with the reason, never passed.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/common/cpu_features.hpp"
#include "cpu/common/kernels.hpp"
#include "mlakit/backend.hpp"
#include "simd/kernels.hpp"

namespace mlakit::kernel_tests {

struct KernelLevel {
  std::string family;
  Isa level;
};

inline std::vector<KernelLevel> all_kernel_levels() {
  std::vector<KernelLevel> v;
#define MLAKIT_SIMD_KERNEL(family, Type, lvl) v.push_back({#family, Isa::lvl});
#include "simd/kernels.inc"
#undef MLAKIT_SIMD_KERNEL
  return v;
}

inline std::vector<Isa> levels_of(const std::string& family) {
  std::vector<Isa> out;
  for (const auto& k : all_kernel_levels())
    if (k.family == family) out.push_back(k.level);
  return out;
}

// Empty when this CPU can run `level` (whatever the cap: tests exercise every level present).
inline std::string cpu_skip_reason(Isa level) {
  const std::uint32_t need = core::isa_required_features(level);
  const std::uint32_t missing = need & ~core::cpu_info().features;
  if (!missing) return {};
  return std::string("this CPU cannot run ISA level ") + isa_name(level) + ": it lacks " + core::feature_list(missing);
}

inline std::string level_param_name(const ::testing::TestParamInfo<Isa>& info) { return isa_name(info.param); }

// A kernel table under test: a family's table at one level of the kernel list, or another table
// with that level's arithmetic and layout (the amx kernels over emulated tiles) that runs where
// the CPU runs `runs_on`.
template <class Table>
struct Subject {
  std::string name;
  const Table* table;
  Isa level;
  Isa runs_on;
};

// Every level of `family` (its table from `at`), then the amx table over emulated tiles, which
// is AVX-512 code around scalar tiles and so runs wherever avx512bf16 does.
template <class Table>
std::vector<Subject<Table>> subjects_with_emulated_amx(const std::string& family, const Table* (*at)(Isa),
                                                       const Table& emulated) {
  std::vector<Subject<Table>> v;
  for (Isa l : levels_of(family)) v.push_back({isa_name(l), at(l), l, l});
  v.push_back({"amx_emulated", &emulated, Isa::amx, Isa::avx512bf16});
  return v;
}

template <class Table>
std::string subject_name(const ::testing::TestParamInfo<Subject<Table>>& info) { return info.param.name; }
template <class Table>
void PrintTo(const Subject<Table>& s, std::ostream* os) { *os << s.name; }

#define MLAKIT_SKIP_UNLESS_CPU_RUNS(level)                                   \
  do {                                                                       \
    const std::string reason_ = ::mlakit::kernel_tests::cpu_skip_reason(level); \
    if (!reason_.empty()) GTEST_SKIP() << reason_;                          \
  } while (0)

// Deterministic data (splitmix64).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
  float uniform(float lo, float hi) { return lo + static_cast<float>(uniform()) * (hi - lo); }
  std::uint32_t below(std::uint32_t n) { return static_cast<std::uint32_t>(next() % n); }

 private:
  std::uint64_t s_;
};

inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace mlakit::kernel_tests
