// The kernel list (simd/kernels.inc) as test parameters: every family at every level the library
// is built with. A level this CPU cannot run is skipped with the reason, never passed.
#pragma once

#include <cstdint>
#include <cstring>
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
