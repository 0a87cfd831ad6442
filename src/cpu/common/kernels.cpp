#include "cpu/common/kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <type_traits>

#include "core/common/cpu_features.hpp"
#include "cpu/common/bf16_dot.hpp"

namespace mlakit::cpu {
namespace {

struct Entry {
  const char* family;
  Isa level;
  const void* table;
};

// The kernel list, expanded: each table's declared type must be its family's table type.
#define MLAKIT_SIMD_KERNEL(family, Type, lvl) \
  static_assert(std::is_same_v<decltype(simd::family##_##lvl), const simd::Type>, #family "_" #lvl);
#include "simd/kernels.inc"
#undef MLAKIT_SIMD_KERNEL

const Entry kEntries[] = {
#define MLAKIT_SIMD_KERNEL(family, Type, lvl) {#family, Isa::lvl, &simd::family##_##lvl},
#include "simd/kernels.inc"
#undef MLAKIT_SIMD_KERNEL
};

template <class T> constexpr const char* family_of();
template <> constexpr const char* family_of<simd::Fp8DecodeKernels>() { return "fp8_decode"; }
template <> constexpr const char* family_of<simd::GemmKernels>() { return "gemm"; }
template <> constexpr const char* family_of<simd::TopkKernels>() { return "topk"; }
template <> constexpr const char* family_of<simd::PeakKernels>() { return "peak"; }
template <> constexpr const char* family_of<simd::IndexScoreKernels>() { return "index_score"; }
template <> constexpr const char* family_of<simd::BlockScoreKernels>() { return "block_score"; }
template <> constexpr const char* family_of<simd::RopeNormKernels>() { return "rope_norm"; }
template <> constexpr const char* family_of<simd::Fp8QuantKernels>() { return "fp8_quant"; }

bool verbose() {
  static const bool v = [] {
    const char* e = std::getenv("MLAKIT_VERBOSE");
    return e && *e && std::strcmp(e, "0") != 0;
  }();
  return v;
}

// Declines of a candidate `level` when the requested level is `want`.
std::string decline_reason(Isa level, Isa want) {
  std::string why = core::isa_unavailable_reason(level);
  if (why.empty() && static_cast<int>(level) > static_cast<int>(want))
    why = std::string("above the requested level ") + isa_name(want);
  return why;
}

template <class T>
const T& choose(Isa want, std::vector<Decline>* declines) {
  const char* family = family_of<T>();
  std::vector<Decline> local;
  const T* chosen = nullptr;
  Isa chosen_level = Isa::generic;
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.family, family) != 0) continue;
    std::string why = decline_reason(e.level, want);
    if (why.empty() || e.level == Isa::generic) {
      chosen = static_cast<const T*>(e.table);
      chosen_level = e.level;
      break;
    }
    local.push_back({e.level, std::string(isa_name(e.level)) + ": " + why});
  }
  if (verbose()) {
    static std::mutex mu;
    static std::set<std::pair<std::string, int>> printed;
    std::lock_guard<std::mutex> lock(mu);
    if (printed.insert({family, static_cast<int>(want)}).second) {
      std::fprintf(stderr, "mlakit: %s kernels: %s (requested %s)\n", family, isa_name(chosen_level), isa_name(want));
      for (const Decline& d : local) std::fprintf(stderr, "mlakit:   declined %s\n", d.reason.c_str());
    }
  }
  if (declines) *declines = std::move(local);
  return *chosen;  // simd/generic is always in the list, and never declines
}

template <class T>
const T* exactly(Isa level) {
  for (const Entry& e : kEntries)
    if (e.level == level && std::strcmp(e.family, family_of<T>()) == 0) return static_cast<const T*>(e.table);
  return nullptr;
}

}  // namespace

const simd::Fp8DecodeKernels& fp8_decode_kernels(Isa level, std::vector<Decline>* d) {
  return choose<simd::Fp8DecodeKernels>(level, d);
}
const simd::GemmKernels& gemm_kernels(Isa level, std::vector<Decline>* d) { return choose<simd::GemmKernels>(level, d); }
const simd::TopkKernels& topk_kernels(Isa level, std::vector<Decline>* d) { return choose<simd::TopkKernels>(level, d); }
const simd::PeakKernels& peak_kernels(Isa level, std::vector<Decline>* d) { return choose<simd::PeakKernels>(level, d); }
const simd::IndexScoreKernels& index_score_kernels(Isa level, std::vector<Decline>* d) {
  return choose<simd::IndexScoreKernels>(level, d);
}
const simd::BlockScoreKernels& block_score_kernels(Isa level, std::vector<Decline>* d) {
  return choose<simd::BlockScoreKernels>(level, d);
}
const simd::RopeNormKernels& rope_norm_kernels(Isa level, std::vector<Decline>* d) {
  return choose<simd::RopeNormKernels>(level, d);
}
const simd::Fp8QuantKernels& fp8_quant_kernels(Isa level, std::vector<Decline>* d) {
  return choose<simd::Fp8QuantKernels>(level, d);
}

const simd::Fp8DecodeKernels& fp8_decode_kernels() { return fp8_decode_kernels(active_isa()); }
namespace {
std::atomic<const simd::GemmKernels*> gemm_for_tests{nullptr};
}  // namespace

void set_gemm_kernels_for_tests(const simd::GemmKernels* table) { gemm_for_tests.store(table); }
const simd::GemmKernels& gemm_kernels() {
  const simd::GemmKernels* t = gemm_for_tests.load(std::memory_order_relaxed);
  return t ? *t : gemm_kernels(active_isa());
}
const simd::TopkKernels& topk_kernels() { return topk_kernels(active_isa()); }
const simd::IndexScoreKernels& index_score_kernels() { return index_score_kernels(active_isa()); }
const simd::BlockScoreKernels& block_score_kernels() { return block_score_kernels(active_isa()); }
const simd::RopeNormKernels& rope_norm_kernels() { return rope_norm_kernels(active_isa()); }
const simd::Fp8QuantKernels& fp8_quant_kernels() { return fp8_quant_kernels(active_isa()); }

const simd::Fp8DecodeKernels* fp8_decode_kernels_at(Isa level) { return exactly<simd::Fp8DecodeKernels>(level); }
const simd::GemmKernels* gemm_kernels_at(Isa level) { return exactly<simd::GemmKernels>(level); }
const simd::TopkKernels* topk_kernels_at(Isa level) { return exactly<simd::TopkKernels>(level); }
const simd::PeakKernels* peak_kernels_at(Isa level) { return exactly<simd::PeakKernels>(level); }
const simd::IndexScoreKernels* index_score_kernels_at(Isa level) { return exactly<simd::IndexScoreKernels>(level); }
const simd::BlockScoreKernels* block_score_kernels_at(Isa level) { return exactly<simd::BlockScoreKernels>(level); }
const simd::RopeNormKernels* rope_norm_kernels_at(Isa level) { return exactly<simd::RopeNormKernels>(level); }
const simd::Fp8QuantKernels* fp8_quant_kernels_at(Isa level) { return exactly<simd::Fp8QuantKernels>(level); }

std::vector<Isa> kernel_levels() {
  std::vector<Isa> levels;
  for (const Entry& e : kEntries) {
    bool seen = false;
    for (Isa l : levels) seen = seen || l == e.level;
    if (!seen) levels.push_back(e.level);
  }
  // A level that only some families have (amx) first shows up late in the list.
  std::sort(levels.begin(), levels.end(), [](Isa a, Isa b) { return static_cast<int>(a) > static_cast<int>(b); });
  return levels;
}

std::vector<std::pair<std::string, std::string>> kernel_choices() {
  const Isa want = active_isa();
  std::vector<std::pair<std::string, std::string>> out;
  const simd::Fp8DecodeKernels& f = fp8_decode_kernels(want);
  out.emplace_back("fp8_decode", std::string(f.level) + " (" + f.kind + ")");
  const simd::GemmKernels& g = gemm_kernels(want);
  out.emplace_back("gemm", std::string(g.level) + " (" + std::to_string(g.mr) + "x" + std::to_string(g.nr) +
                               " tile, " + (g.bf16_dot ? "bf16 dot" : "f32 FMA") +
                               (g.bf16_dot && !bf16_dot::use(g) ? "; ops 3-5 on f32 FMA here (MLAKIT_BF16_DOT)" : "") +
                               (g.gemm_tiles ? "; " + std::to_string(g.tile_rows) + "x" + std::to_string(g.tile_cols) +
                                                   " blocks of AMX bf16 tiles (tdpbf16ps)"
                                             : "") +
                               ")");
  out.emplace_back("topk", topk_kernels(want).level);
  const simd::IndexScoreKernels& is = index_score_kernels(want);
  const bool amx_tiles = std::strcmp(is.level, "amx") == 0;
  out.emplace_back("index_score", std::string(is.level) + " (" + std::to_string(is.head_vectors * is.head_lanes) +
                                      " heads x " + std::to_string(is.keys) + " keys tile, " +
                                      (amx_tiles ? "bf16 pair dot on AMX bf16 tiles (tdpbf16ps)"
                                                 : is.bf16_dot ? "bf16 pair dot" : "f32 FMA") +
                                      ")");
  const simd::BlockScoreKernels& bs = block_score_kernels(want);
  if (std::strcmp(bs.level, "amx") == 0) {
    out.emplace_back("block_score", std::string(bs.level) + " (" + std::to_string(bs.tile_groups * bs.lanes) +
                                        " query rows x " + std::to_string(bs.tile_keys) +
                                        " keys of AMX bf16 tiles (tdpbf16ps), every call)");
  } else {
    out.emplace_back("block_score", std::string(bs.level) + " (" + std::to_string(bs.lanes) + " query rows per vector, " +
                                        std::to_string(bs.tile_groups) + "x" + std::to_string(bs.tile_keys) + " tile, " +
                                        (bs.bf16_dot ? "bf16 pair dot" : "f32 FMA") +
                                        (bs.pair_rows ? "; calls of <= " + std::to_string(bs.pair_rows) +
                                                            " rows: two keys per vector"
                                                      : "") +
                                        ")");
  }
  const simd::RopeNormKernels& rn = rope_norm_kernels(want);
  out.emplace_back("rope_norm", std::string(rn.level) + " (" + rn.kind + ")");
  out.emplace_back("fp8_quant", fp8_quant_kernels(want).level);
  return out;
}

}  // namespace mlakit::cpu
