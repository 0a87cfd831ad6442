// CPU features, detected once (CPUID + XGETBV, and the OS grant for AMX tile state).
#pragma once

#include <cstdint>
#include <string>

#include "mlakit/backend.hpp"

namespace mlakit::core {

enum CpuFeature : std::uint32_t {
  kAvx2 = 1u << 0,
  kFma = 1u << 1,
  kF16c = 1u << 2,
  kBmi2 = 1u << 3,
  kAvx512F = 1u << 4,
  kAvx512BW = 1u << 5,
  kAvx512VL = 1u << 6,
  kAvx512DQ = 1u << 7,
  kAvx512Bf16 = 1u << 8,
  kAvx512Vbmi = 1u << 9,
  kAvx512Vnni = 1u << 10,
  kAmxTile = 1u << 11,
  kAmxBf16 = 1u << 12,
  kAmxInt8 = 1u << 13,
};

struct CpuInfo {
  std::uint32_t features = 0;  // CpuFeature bits usable here (OS state enabled)
  std::string model;           // brand string
  std::string vendor;          // CPUID leaf 0: "GenuineIntel", "AuthenticAMD", ...
  bool has(std::uint32_t f) const { return (features & f) == f; }
};

const CpuInfo& cpu_info();
std::string feature_list(std::uint32_t features);
// The features a level's code may use: everything its simd/<level>/ files are compiled with
// (cmake/MlakitSimd.cmake). A level is usable only when all of them are present, so avx512bf16
// also needs VBMI and VNNI (Cooper Lake, which has BF16 without VBMI, runs the avx512 level).
std::uint32_t isa_required_features(Isa level);
// Highest level whose every feature is present.
Isa isa_from_features(std::uint32_t features);
// Why `level` cannot run here ("cpu lacks avx512_bf16 avx512vbmi", "capped by MLAKIT_MAX_ISA /
// set_max_isa at avx2"); empty when it can.
std::string isa_unavailable_reason(Isa level);

}  // namespace mlakit::core
