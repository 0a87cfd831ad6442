// CPU feature detection and the ISA level: consistency of the detected bits, the level each
// feature set gives, the cap, and the names.
#include <gtest/gtest.h>

#include <string>

#include "core/common/cpu_features.hpp"
#include "mlakit/backend.hpp"

namespace mlakit {
namespace {

const Isa kLevels[] = {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx};

class CapGuard {
 public:
  explicit CapGuard(Isa cap) : saved_(max_isa()) { set_max_isa(cap); }
  ~CapGuard() { set_max_isa(saved_); }

 private:
  Isa saved_;
};

TEST(CpuFeatures, EachLevelNeedsEverythingTheLevelBelowNeeds) {
  for (std::size_t i = 1; i < std::size(kLevels); ++i) {
    const std::uint32_t lower = core::isa_required_features(kLevels[i - 1]);
    const std::uint32_t upper = core::isa_required_features(kLevels[i]);
    EXPECT_EQ(lower & upper, lower) << isa_name(kLevels[i]);
    EXPECT_NE(lower, upper) << isa_name(kLevels[i]);
  }
  EXPECT_EQ(core::isa_required_features(Isa::generic), 0u);
}

TEST(CpuFeatures, LevelFromFeatures) {
  for (Isa level : kLevels) {
    const std::uint32_t need = core::isa_required_features(level);
    EXPECT_EQ(core::isa_from_features(need), level) << isa_name(level);
    // Dropping any one required feature falls below the level.
    for (std::uint32_t bit = 1; bit; bit <<= 1) {
      if (!(need & bit)) continue;
      EXPECT_LT(core::isa_from_features(need & ~bit), level)
          << isa_name(level) << " without " << core::feature_list(bit);
    }
  }
  // Real parts: Cascade Lake (no BF16, no VBMI) is avx512; Cooper Lake (BF16 without VBMI) too;
  // Zen 4 (BF16, VBMI, VNNI) is avx512bf16; AMX without the OS grant stays avx512bf16.
  const std::uint32_t avx512 = core::isa_required_features(Isa::avx512);
  EXPECT_EQ(core::isa_from_features(avx512 | core::kAvx512Vnni), Isa::avx512);
  EXPECT_EQ(core::isa_from_features(avx512 | core::kAvx512Vnni | core::kAvx512Bf16), Isa::avx512);
  EXPECT_EQ(core::isa_from_features(avx512 | core::kAvx512Vnni | core::kAvx512Bf16 | core::kAvx512Vbmi),
            Isa::avx512bf16);
  EXPECT_EQ(core::isa_from_features(core::isa_required_features(Isa::avx512bf16) | core::kAmxBf16), Isa::avx512bf16);
  EXPECT_EQ(core::isa_from_features(core::kAvx2 | core::kFma), Isa::generic);  // avx2 needs f16c and bmi2 too
  EXPECT_EQ(core::isa_from_features(core::kAvx512F), Isa::generic);
}

TEST(CpuFeatures, DetectionIsConsistent) {
  const core::CpuInfo& info = core::cpu_info();
  EXPECT_EQ(&info, &core::cpu_info()) << "detected once";
  EXPECT_EQ(cpu_supported_isa(), core::isa_from_features(info.features));
  // Features that only exist on top of others.
  if (info.has(core::kAvx512BW) || info.has(core::kAvx512VL) || info.has(core::kAvx512DQ) ||
      info.has(core::kAvx512Bf16) || info.has(core::kAvx512Vbmi) || info.has(core::kAvx512Vnni)) {
    EXPECT_TRUE(info.has(core::kAvx512F)) << core::feature_list(info.features);
  }
  if (info.has(core::kAvx512F)) {
    EXPECT_TRUE(info.has(core::kAvx2 | core::kFma)) << core::feature_list(info.features);
  }
  if (info.has(core::kAmxBf16) || info.has(core::kAmxInt8)) {
    EXPECT_TRUE(info.has(core::kAmxTile));
  }
  // Every level up to the supported one runs; the ones above say what is missing.
  for (Isa level : kLevels) {
    CapGuard cap(Isa::amx);
    const std::string why = core::isa_unavailable_reason(level);
    if (level <= cpu_supported_isa()) {
      EXPECT_EQ(why, "") << isa_name(level);
    } else {
      EXPECT_EQ(why.rfind("cpu lacks ", 0), 0u) << why;
    }
  }
  std::printf("cpu: %s\nfeatures: %s\nsupported level: %s\n", info.model.c_str(),
              core::feature_list(info.features).c_str(), isa_name(cpu_supported_isa()));
}

TEST(CpuFeatures, CapLimitsTheActiveLevel) {
  for (Isa cap : kLevels) {
    CapGuard g(cap);
    EXPECT_EQ(max_isa(), cap);
    const Isa want = cap < cpu_supported_isa() ? cap : cpu_supported_isa();
    EXPECT_EQ(active_isa(), want) << isa_name(cap);
    if (cap < cpu_supported_isa()) {
      const Isa above = static_cast<Isa>(static_cast<int>(cap) + 1);
      EXPECT_NE(core::isa_unavailable_reason(above).find("capped"), std::string::npos) << isa_name(above);
    }
  }
}

TEST(CpuFeatures, IsaNamesRoundTrip) {
  for (Isa level : kLevels) {
    Isa parsed = Isa::amx;
    ASSERT_TRUE(parse_isa(isa_name(level), &parsed)) << isa_name(level);
    EXPECT_EQ(parsed, level);
  }
  EXPECT_STREQ(isa_name(Isa::avx512bf16), "avx512bf16");
  Isa untouched = Isa::avx2;
  for (const char* bad : {"", "AVX2", "avx3", "avx512_bf16", "sse2", "avx2 "}) {
    EXPECT_FALSE(parse_isa(bad, &untouched)) << bad;
    EXPECT_EQ(untouched, Isa::avx2);
  }
}

TEST(CpuFeatures, FeatureListNames) {
  EXPECT_EQ(core::feature_list(0), "");
  EXPECT_EQ(core::feature_list(core::kAvx2 | core::kFma), "avx2 fma");
  EXPECT_EQ(core::feature_list(core::kAvx512Bf16 | core::kAmxTile), "avx512_bf16 amx_tile");
}

}  // namespace
}  // namespace mlakit
