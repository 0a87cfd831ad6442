#include "core/common/cpu_features.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#define MLAKIT_X86 1
#endif

namespace mlakit::core {
namespace {

#if MLAKIT_X86
std::uint64_t xgetbv0() {
  std::uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (std::uint64_t(hi) << 32) | lo;
}

// Linux hands out AMX tile data state only on request (arch_prctl ARCH_REQ_XCOMP_PERM).
bool request_amx_permission() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

CpuInfo detect() {
  CpuInfo info;
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return info;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  info.vendor = vendor;
  __get_cpuid(1, &a, &b, &c, &d);
  const bool osxsave = (c >> 27) & 1;
  const bool fma = (c >> 12) & 1, f16c = (c >> 29) & 1, avx = (c >> 28) & 1;
  const std::uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm_os = (xcr0 & 0x6) == 0x6;
  const bool zmm_os = (xcr0 & 0xE6) == 0xE6;
  const bool amx_os = (xcr0 & 0x60000) == 0x60000;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned b7 = b, c7 = c, d7 = d;
    __cpuid_count(7, 1, a, b, c, d);
    const unsigned a71 = a;
    if (avx && ymm_os) {
      if ((b7 >> 5) & 1) info.features |= kAvx2;
      if (fma) info.features |= kFma;
      if (f16c) info.features |= kF16c;
      if ((b7 >> 8) & 1) info.features |= kBmi2;
    }
    if (zmm_os) {
      if ((b7 >> 16) & 1) info.features |= kAvx512F;
      if ((b7 >> 30) & 1) info.features |= kAvx512BW;
      if ((b7 >> 31) & 1) info.features |= kAvx512VL;
      if ((b7 >> 17) & 1) info.features |= kAvx512DQ;
      if ((a71 >> 5) & 1) info.features |= kAvx512Bf16;
      if ((c7 >> 1) & 1) info.features |= kAvx512Vbmi;
      if ((c7 >> 11) & 1) info.features |= kAvx512Vnni;
    }
    if (amx_os && ((d7 >> 24) & 1) && request_amx_permission()) {
      info.features |= kAmxTile;
      if ((d7 >> 22) & 1) info.features |= kAmxBf16;
      if ((d7 >> 25) & 1) info.features |= kAmxInt8;
    }
  }
  char brand[49] = {};
  __get_cpuid(0x80000000, &a, &b, &c, &d);
  if (a >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002 + i, &a, &b, &c, &d);
      std::memcpy(brand + 16 * i, &a, 4);
      std::memcpy(brand + 16 * i + 4, &b, 4);
      std::memcpy(brand + 16 * i + 8, &c, 4);
      std::memcpy(brand + 16 * i + 12, &d, 4);
    }
  }
  info.model = brand;
  while (!info.model.empty() && info.model.back() == ' ') info.model.pop_back();
  while (!info.model.empty() && info.model.front() == ' ') info.model.erase(info.model.begin());
  return info;
}
#else
CpuInfo detect() { return {}; }
#endif

Isa initial_cap() {
  const char* env = std::getenv("MLAKIT_MAX_ISA");
  Isa cap = Isa::amx;
  if (env && *env) parse_isa(env, &cap);  // an unknown value leaves the level uncapped
  return cap;
}

std::atomic<int>& cap_storage() {
  static std::atomic<int> cap{static_cast<int>(initial_cap())};
  return cap;
}

}  // namespace

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

std::string feature_list(std::uint32_t f) {
  static const std::pair<std::uint32_t, const char*> names[] = {
      {kAvx2, "avx2"}, {kFma, "fma"}, {kF16c, "f16c"}, {kBmi2, "bmi2"}, {kAvx512F, "avx512f"},
      {kAvx512BW, "avx512bw"}, {kAvx512VL, "avx512vl"}, {kAvx512DQ, "avx512dq"}, {kAvx512Bf16, "avx512_bf16"},
      {kAvx512Vbmi, "avx512vbmi"}, {kAvx512Vnni, "avx512_vnni"}, {kAmxTile, "amx_tile"}, {kAmxBf16, "amx_bf16"},
      {kAmxInt8, "amx_int8"}};
  std::string s;
  for (const auto& [bit, name] : names) {
    if (f & bit) {
      if (!s.empty()) s += ' ';
      s += name;
    }
  }
  return s;
}

std::uint32_t isa_required_features(Isa level) {
  const std::uint32_t avx2 = kAvx2 | kFma | kF16c | kBmi2;
  const std::uint32_t avx512 = avx2 | kAvx512F | kAvx512BW | kAvx512VL | kAvx512DQ;
  const std::uint32_t avx512bf16 = avx512 | kAvx512Bf16 | kAvx512Vbmi | kAvx512Vnni;
  const std::uint32_t amx = avx512bf16 | kAmxTile | kAmxBf16 | kAmxInt8;
  switch (level) {
    case Isa::generic: return 0;
    case Isa::avx2: return avx2;
    case Isa::avx512: return avx512;
    case Isa::avx512bf16: return avx512bf16;
    case Isa::amx: return amx;
  }
  return ~0u;
}

Isa isa_from_features(std::uint32_t f) {
  for (Isa level : {Isa::amx, Isa::avx512bf16, Isa::avx512, Isa::avx2}) {
    const std::uint32_t need = isa_required_features(level);
    if ((f & need) == need) return level;
  }
  return Isa::generic;
}

std::string isa_unavailable_reason(Isa level) {
  const std::uint32_t need = isa_required_features(level);
  const std::uint32_t missing = need & ~cpu_info().features;
  if (missing) return std::string("cpu lacks ") + feature_list(missing);
  const Isa cap = max_isa();
  if (static_cast<int>(level) > static_cast<int>(cap))
    return std::string("capped by MLAKIT_MAX_ISA / set_max_isa at ") + isa_name(cap);
  return {};
}

}  // namespace mlakit::core

namespace mlakit {

const char* isa_name(Isa i) {
  switch (i) {
    case Isa::generic: return "generic";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512bf16: return "avx512bf16";
    case Isa::amx: return "amx";
  }
  return "?";
}

bool parse_isa(const std::string& text, Isa* out) {
  for (Isa i : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx}) {
    if (text == isa_name(i)) {
      *out = i;
      return true;
    }
  }
  return false;
}

Isa cpu_supported_isa() { return core::isa_from_features(core::cpu_info().features); }

Isa active_isa() {
  const int cap = core::cap_storage().load(std::memory_order_relaxed);
  const int have = static_cast<int>(cpu_supported_isa());
  return static_cast<Isa>(cap < have ? cap : have);
}

Isa max_isa() { return static_cast<Isa>(core::cap_storage().load(std::memory_order_relaxed)); }

void set_max_isa(Isa cap) { core::cap_storage().store(static_cast<int>(cap), std::memory_order_relaxed); }

}  // namespace mlakit
