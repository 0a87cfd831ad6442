// Run-time kernel choice: fastest level first, declines with reasons, the cap, the info listing.
#include <gtest/gtest.h>

#include <string>

#include "cpu/common/bf16_dot.hpp"
#include "kernels/kernel_list.hpp"

namespace mlakit::kernel_tests {
namespace {

class CapGuard {
 public:
  explicit CapGuard(Isa cap) : saved_(max_isa()) { set_max_isa(cap); }
  ~CapGuard() { set_max_isa(saved_); }

 private:
  Isa saved_;
};

Isa best_runnable(const std::string& family, Isa want) {
  for (Isa l : levels_of(family))
    if (l <= want && cpu_skip_reason(l).empty()) return l;
  return Isa::generic;
}

TEST(KernelDispatch, ListHasEveryFamilyAtEveryLevelFastestFirst) {
  for (const char* family : {"fp8_decode", "gemm", "topk", "peak", "rope_norm", "fp8_quant"}) {
    const auto levels = levels_of(family);
    ASSERT_FALSE(levels.empty()) << family;
    EXPECT_EQ(levels.back(), Isa::generic) << family << ": generic must close the list";
    for (std::size_t i = 1; i < levels.size(); ++i) EXPECT_GT(levels[i - 1], levels[i]) << family;
  }
  EXPECT_EQ(cpu::kernel_levels().back(), Isa::generic);
}

TEST(KernelDispatch, PicksTheFastestLevelTheCpuRuns) {
  const CapGuard uncapped(Isa::amx);  // best_runnable reads the cap; MLAKIT_MAX_ISA may have set one
  for (Isa want : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx}) {
    std::vector<cpu::Decline> declines;
    const auto& t = cpu::fp8_decode_kernels(want, &declines);
    EXPECT_STREQ(t.level, isa_name(best_runnable("fp8_decode", want))) << "requested " << isa_name(want);
    EXPECT_STREQ(cpu::gemm_kernels(want).level, isa_name(best_runnable("gemm", want)));
    EXPECT_STREQ(cpu::topk_kernels(want).level, isa_name(best_runnable("topk", want)));
    EXPECT_STREQ(cpu::peak_kernels(want).level, isa_name(best_runnable("peak", want)));
    EXPECT_STREQ(cpu::rope_norm_kernels(want).level, isa_name(best_runnable("rope_norm", want)));
    EXPECT_STREQ(cpu::fp8_quant_kernels(want).level, isa_name(best_runnable("fp8_quant", want)));
    for (const auto& d : declines) {
      EXPECT_GT(d.level, best_runnable("fp8_decode", want));
      EXPECT_EQ(d.reason.rfind(std::string(isa_name(d.level)) + ": ", 0), 0u) << d.reason;
    }
  }
}

TEST(KernelDispatch, DeclinesNameTheMissingFeature) {
  if (cpu_supported_isa() >= Isa::avx512bf16) GTEST_SKIP() << "this CPU runs every level with kernels";
  std::vector<cpu::Decline> declines;
  cpu::gemm_kernels(Isa::amx, &declines);
  // From the level asked for down: the gemm family has an amx table, so amx is declined first.
  ASSERT_GE(declines.size(), 2u);
  EXPECT_EQ(declines[0].level, Isa::amx);
  EXPECT_NE(declines[0].reason.find("amx: cpu lacks"), std::string::npos) << declines[0].reason;
  EXPECT_NE(declines[0].reason.find("amx_tile"), std::string::npos) << declines[0].reason;
  EXPECT_EQ(declines[1].level, Isa::avx512bf16);
  EXPECT_NE(declines[1].reason.find("avx512bf16: cpu lacks"), std::string::npos) << declines[1].reason;
  EXPECT_NE(declines[1].reason.find("avx512_bf16"), std::string::npos) << declines[1].reason;
}

TEST(KernelDispatch, CapLowersTheActiveChoice) {
  {
    CapGuard cap(Isa::generic);
    EXPECT_STREQ(cpu::fp8_decode_kernels().level, "generic");
    EXPECT_STREQ(cpu::gemm_kernels().level, "generic");
    EXPECT_STREQ(cpu::topk_kernels().level, "generic");
    std::vector<cpu::Decline> declines;
    cpu::topk_kernels(active_isa(), &declines);
  }
  if (cpu_supported_isa() >= Isa::avx2) {
    CapGuard cap(Isa::avx2);
    EXPECT_STREQ(cpu::gemm_kernels().level, "avx2");
    std::vector<cpu::Decline> declines;
    cpu::gemm_kernels(Isa::amx, &declines);  // above the cap: declined as capped (or lacking)
    for (const auto& d : declines) EXPECT_GT(d.level, Isa::avx2);
    if (cpu_supported_isa() >= Isa::avx512) {
      ASSERT_FALSE(declines.empty());
      EXPECT_NE(declines.back().reason.find("capped"), std::string::npos) << declines.back().reason;
    }
  }
}

TEST(KernelDispatch, ExactLevelTables) {
  for (Isa l : levels_of("gemm")) {
    ASSERT_NE(cpu::gemm_kernels_at(l), nullptr);
    EXPECT_STREQ(cpu::gemm_kernels_at(l)->level, isa_name(l));
  }
  for (Isa l : levels_of("fp8_decode")) EXPECT_STREQ(cpu::fp8_decode_kernels_at(l)->level, isa_name(l));
  for (Isa l : levels_of("topk")) EXPECT_STREQ(cpu::topk_kernels_at(l)->level, isa_name(l));
  for (Isa l : levels_of("peak")) EXPECT_STREQ(cpu::peak_kernels_at(l)->level, isa_name(l));
  // A level a family lacks has no table: the level below serves it.
  EXPECT_NE(cpu::gemm_kernels_at(Isa::amx), nullptr);  // the tile GEMM
  EXPECT_EQ(cpu::fp8_decode_kernels_at(Isa::amx), nullptr);
  EXPECT_EQ(cpu::topk_kernels_at(Isa::amx), nullptr);
}

TEST(KernelDispatch, ChoicesForInfo) {
  const auto choices = cpu::kernel_choices();
  ASSERT_GE(choices.size(), 3u);  // the three base families first, then the operator families
  EXPECT_EQ(choices[0].first, "fp8_decode");
  EXPECT_EQ(choices[1].first, "gemm");
  EXPECT_EQ(choices[2].first, "topk");
  EXPECT_EQ(choices[0].second,
            std::string(cpu::fp8_decode_kernels().level) + " (" + cpu::fp8_decode_kernels().kind + ")");
  EXPECT_EQ(choices[1].second.rfind(cpu::gemm_kernels().level, 0), 0u) << choices[1].second;
  bool index_score = false;
  for (const auto& [family, choice] : choices)
    if (family == "index_score") {
      index_score = true;
      EXPECT_EQ(choice.rfind(cpu::index_score_kernels().level, 0), 0u) << choice;
      EXPECT_NE(choice.find(cpu::index_score_kernels().bf16_dot ? "bf16 pair dot" : "f32 FMA"), std::string::npos)
          << choice;
    }
  EXPECT_TRUE(index_score) << "index_score missing from kernel_choices()";
}


// The pair dot for the GEMM-shaped work: never where the level has none, forced on or off by the
// switch, and in its automatic mode on AMD CPUs only (Intel's vdpbf16ps runs at half the f32
// FMA's flops, so the f32 paths win there).
TEST(KernelDispatch, Bf16DotChoice) {
  const cpu::RouteMode saved = cpu::bf16_dot::mode();
  const simd::GemmKernels& with = *cpu::gemm_kernels_at(Isa::avx512bf16);
  const simd::GemmKernels& without = *cpu::gemm_kernels_at(Isa::avx512);
  ASSERT_TRUE(with.bf16_dot);
  ASSERT_FALSE(without.bf16_dot);
  for (cpu::RouteMode m : {cpu::RouteMode::automatic, cpu::RouteMode::on, cpu::RouteMode::off}) {
    cpu::bf16_dot::set_mode(m);
    EXPECT_FALSE(cpu::bf16_dot::use(without));
  }
  cpu::bf16_dot::set_mode(cpu::RouteMode::on);
  EXPECT_TRUE(cpu::bf16_dot::use(with));
  cpu::bf16_dot::set_mode(cpu::RouteMode::off);
  EXPECT_FALSE(cpu::bf16_dot::use(with));
  cpu::bf16_dot::set_mode(cpu::RouteMode::automatic);
  EXPECT_EQ(cpu::bf16_dot::use(with), core::cpu_info().vendor == "AuthenticAMD") << core::cpu_info().vendor;
  cpu::bf16_dot::set_mode(saved);
}

TEST(KernelDispatch, CpuVendorIsRead) {
  const std::string& v = core::cpu_info().vendor;
  EXPECT_EQ(v.size(), 12u) << v;  // the 12 characters of CPUID leaf 0
}

}  // namespace
}  // namespace mlakit::kernel_tests
