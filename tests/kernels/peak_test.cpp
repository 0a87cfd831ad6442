// Peak probes: they run at every level and compute what they claim (read_sum is a real sum); the
// AMX tile probe only at the amx level, checked over emulated tiles where AMX is missing.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/amx_emulation/emulated_tables.hpp"
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
  EXPECT_EQ(p.amx_bf16 != nullptr, GetParam() == Isa::amx);
  EXPECT_EQ(p.amx_bf16_streamed != nullptr, GetParam() == Isa::amx);
  if (p.amx_bf16) {
    EXPECT_EQ(p.amx_flops_per_iter, 4.0 * 2 * 16 * 16 * 32);
    EXPECT_TRUE(std::isfinite(p.amx_bf16(1000, 1.0f)));
    EXPECT_TRUE(std::isfinite(p.amx_bf16_streamed(1000, 1.0f, 512)));
  }
  for (std::size_t n : {0, 1, 7, 63, 64, 65, 1000}) {
    std::vector<float> x(n + 1);
    double want = 0;
    for (std::size_t i = 0; i < n; ++i) want += (x[i + 1] = static_cast<float>(i % 7));
    EXPECT_EQ(p.read_sum(x.data() + 1, n), static_cast<float>(want)) << n;
  }
}

// The tile probe's chains over emulated tiles: every trip adds to every accumulator, the result
// stays finite, and no tile configuration is left behind.
TEST(PeakAmx, EmulatedTileProbeRuns) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(Isa::avx512bf16);
  const simd::PeakKernels& p = simd::peak_amx_emulated;
  ASSERT_NE(p.amx_bf16, nullptr);
  EXPECT_EQ(p.amx_flops_per_iter, 4.0 * 2 * 16 * 16 * 32);
  const float r0 = p.amx_bf16(0, 1.0f), r3 = p.amx_bf16(3, 1.0f);
  EXPECT_EQ(r0, 1.0f);  // only tile 0 starts at the seed
  EXPECT_TRUE(std::isfinite(r3));
  EXPECT_GT(r3, r0);
  EXPECT_FALSE(simd::amx_emulated_tiles_configured());
  // The streamed step: the same chains, their operands loaded each trip (A 1.0, B about 2^-24:
  // each trip adds 32 of those products to every accumulator element).
  ASSERT_NE(p.amx_bf16_streamed, nullptr);
  for (const std::size_t b_steps : {std::size_t{8}, std::size_t{512}}) {
    const float s0 = p.amx_bf16_streamed(0, 1.0f, b_steps), s5 = p.amx_bf16_streamed(5, 1.0f, b_steps);
    EXPECT_EQ(s0, 1.0f) << b_steps;
    EXPECT_TRUE(std::isfinite(s5)) << b_steps;
    EXPECT_GT(s5, s0) << b_steps;
    EXPECT_FALSE(simd::amx_emulated_tiles_configured());
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, Peak, ::testing::ValuesIn(levels_of("peak")), level_param_name);

}  // namespace
}  // namespace mlakit::kernel_tests
