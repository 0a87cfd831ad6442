// Peak probes: they run at every level and compute what they claim (read_sum is a real sum).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/kernel_list.hpp"

namespace mlakit::kernel_tests {
namespace {

class Peak : public ::testing::TestWithParam<Isa> {};

TEST_P(Peak, ProbesRun) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::PeakKernels& p = *cpu::peak_kernels_at(GetParam());
  EXPECT_GT(p.f32_flops_per_iter, 0.0);
  EXPECT_GT(p.bf16_flops_per_iter, 0.0);
  EXPECT_TRUE(std::isfinite(p.f32_fma(1000, 1.0f)));
  EXPECT_TRUE(std::isfinite(p.bf16_dot(1000, 1.0f)));
  for (std::size_t n : {0, 1, 7, 63, 64, 65, 1000}) {
    std::vector<float> x(n + 1);
    double want = 0;
    for (std::size_t i = 0; i < n; ++i) want += (x[i + 1] = static_cast<float>(i % 7));
    EXPECT_EQ(p.read_sum(x.data() + 1, n), static_cast<float>(want)) << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, Peak, ::testing::ValuesIn(levels_of("peak")), level_param_name);

}  // namespace
}  // namespace mlakit::kernel_tests
