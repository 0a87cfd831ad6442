// Kernel benchmarks: every family at every ISA level of simd/kernels.inc (levels this CPU cannot
// run are listed with the reason), named <family>/<shape>/<level>, single-threaded, with
// counters gflops or gbps and pct_peak (share of this machine's single-thread peak from the peak
// probe at its best level: for dot kernels the peak of the arithmetic their level runs on -- AMX
// tiles on amx, bf16 dot on avx512bf16, f32 FMA below --, DRAM read bandwidth for decode and
// selection). Top-k also runs std::nth_element + std::sort on the same rows as the baseline
// (<shape>/nth_element).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/peak_probe.hpp"
#include "core/common/cpu_features.hpp"
#include "cpu/common/kernels.hpp"
#include "cpu/common/library_gemm.hpp"
#include "goldens/common/engine_allocator.hpp"
#include "mlakit/dtype.hpp"

namespace mlakit::bench {
namespace {

std::uint64_t mix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
float uniform(std::uint64_t& s) { return static_cast<float>(mix(s) >> 40) * 0x1p-24f * 2.0f - 1.0f; }

std::string skip_reason(Isa level) {
  const std::uint32_t missing = core::isa_required_features(level) & ~core::cpu_info().features;
  return missing ? std::string("this CPU lacks ") + core::feature_list(missing) : std::string();
}

template <class Fn>
void add(const std::string& name, Isa level, Fn fn) {
  const std::string why = skip_reason(level);
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [why, fn](benchmark::State& st) {
    if (!why.empty()) {
      st.SkipWithError(why.c_str());
      return;
    }
    fn(st);
  });
  b->Unit(benchmark::kMicrosecond);
}

// pct_peak needs the measured time: Google Benchmark computes rates after the run, so the
// percentage is derived from the same rate counter with a scale factor.
void set_rate(benchmark::State& st, const char* name, double units_per_iter, double peak_units_per_s) {
  st.counters[name] = benchmark::Counter(units_per_iter * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["pct_peak"] =
      benchmark::Counter(units_per_iter * 100.0 / peak_units_per_s, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- fp8 decode -----------------------------------------------------------------------------------
void register_fp8_decode(Isa level) {
  const simd::Fp8DecodeKernels* k = cpu::fp8_decode_kernels_at(level);
  for (std::size_t n : {std::size_t{16384}, std::size_t{16} << 20}) {
    const std::string shape = n < (1u << 20) ? "n16k" : "n16M";
    struct Variant {
      std::string name;
      bool bf16;
      bool alt;
    };
    const std::string main_kind = k->kind, alt_kind = k->alt_kind;
    for (Variant v : {Variant{"f32_" + main_kind, false, false}, Variant{"bf16_" + main_kind, true, false},
                      Variant{"f32_" + alt_kind, false, true}, Variant{"bf16_" + alt_kind, true, true}}) {
      for (char& ch : v.name)
        if (ch == ' ') ch = '_';
      add("fp8_decode/" + v.name + "_" + shape + "/" + isa_name(level), level, [k, n, v](benchmark::State& st) {
        std::vector<std::uint8_t> src(n);
        std::uint64_t s = 1;
        for (auto& c : src) c = static_cast<std::uint8_t>(mix(s));
        std::vector<float> f(v.bf16 ? 0 : n);
        std::vector<std::uint16_t> h(v.bf16 ? n : 0);
        for (auto _ : st) {
          if (v.bf16) {
            (v.alt ? k->to_bf16_alt : k->to_bf16)(src.data(), h.data(), n);
            benchmark::DoNotOptimize(h.data());
          } else {
            (v.alt ? k->to_f32_alt : k->to_f32)(src.data(), f.data(), n);
            benchmark::DoNotOptimize(f.data());
          }
          benchmark::ClobberMemory();
        }
        const double bytes = static_cast<double>(n) * (1 + (v.bf16 ? 2 : 4));
        set_rate(st, "gbps", bytes, peak().dram_gbps_1t * 1e9);
      });
    }
  }
}

// ---- dot-product tiles -------------------------------------------------------------------------------
template <class T, class Alloc = std::allocator<T>>
std::vector<T, Alloc> random_operand(std::size_t n, std::uint64_t seed) {
  std::vector<T, Alloc> v(n);
  for (auto& x : v) {
    const float f = uniform(seed);
    if constexpr (std::is_same_v<T, float>) x = f;
    else if constexpr (std::is_same_v<T, std::uint16_t>) x = f32_to_bf16(f);
    else x = f32_to_f8e4m3(f * 4.0f);
  }
  return v;
}

template <class TA, class TB>
void gemm_case(const std::string& name, Isa level, simd::GemmFn<TA, TB> fn, bool native_bf16, std::size_t m,
               std::size_t n, std::size_t k, std::size_t ldb = 0) {
  add(name, level, [=](benchmark::State& st) {
    const auto a = random_operand<TA>(m * k, 1);
    const auto b = random_operand<TB>(n * k, 2);
    std::vector<float> c(m * n);
    for (auto _ : st) {
      fn(m, n, k, a.data(), k, b.data(), ldb ? ldb : k, c.data(), n, false);
      benchmark::DoNotOptimize(c.data());
      benchmark::ClobberMemory();
    }
    const double peak_flops = (native_bf16 ? peak().bf16_gflops_1t : peak().f32_gflops_1t) * 1e9;
    set_rate(st, "gflops", 2.0 * m * n * k, peak_flops);
  });
}

// GPTQ int4 columns (the fused QKV chunk: 128 columns of a 6144-column qweight, 512 codes each,
// groups of 128) beside bf16_bf16 over the same weights already expanded to bf16 rows: the
// difference is what reading the codes in place costs. int4_tables: one group's tables for 128
// columns, f16 scales with zero points. A decode row's chunk both ways (AVX-512 levels):
// int4_tables_then_row writes the chunk's tables, then int4_bf16 reads them; int4_row_groups forms
// each group's tables from the scales and zero points as it goes (int4_row_bf16).
void register_int4(Isa level) {
  const simd::GemmKernels* g = cpu::gemm_kernels_at(level);
  const std::string lv = isa_name(level);
  constexpr std::size_t kN = 128, kK = 512, kLdw = 6144, kGs = 128;
  for (std::size_t m : {1, 8, 64}) {
    const std::string shape = "m" + std::to_string(m) + "n128k512";
    add("gemm/int4_bf16_" + shape + "/" + lv, level, [=](benchmark::State& st) {
      const auto a = random_operand<std::uint16_t>(m * kK, 1);
      std::vector<std::uint32_t> words((kK / 8) * kLdw);
      std::uint64_t seed = 3;
      for (auto& w : words) w = static_cast<std::uint32_t>(mix(seed) >> 32);
      std::vector<float> tables(kN * (kK / kGs) * 16);
      for (auto& t : tables) t = bf16_to_f32(f32_to_bf16(uniform(seed)));
      const simd::Int4Columns cols{words.data(), kLdw, tables.data(), kGs};
      std::vector<float> c(m * kN);
      for (auto _ : st) {
        g->int4_bf16(m, kN, kK, a.data(), kK, cols, c.data(), kN, false);
        benchmark::DoNotOptimize(c.data());
        benchmark::ClobberMemory();
      }
      set_rate(st, "gflops", 2.0 * m * kN * kK, (g->bf16_dot ? peak().bf16_gflops_1t : peak().f32_gflops_1t) * 1e9);
    });
    gemm_case<std::uint16_t, std::uint16_t>("gemm/bf16_bf16_" + shape + "/" + lv, level, g->bf16_bf16, g->bf16_dot, m,
                                            kN, kK);
    // The fp8 block-scaled chunk: f32 activations already times their scales against fp8 rows, and
    // (bf16 dot levels) bf16 activations against fp8 rows with the scales applied per 128-block.
    gemm_case<float, std::uint8_t>("gemm/f32_f8_" + shape + "/" + lv, level, g->f32_f8, false, m, kN, kK);
    if (g->bf16_f8_block_scaled)
      add("gemm/bf16_f8_block_scaled_" + shape + "/" + lv, level, [=](benchmark::State& st) {
        const auto a = random_operand<std::uint16_t>(m * kK, 1);
        const auto b = random_operand<std::uint8_t>(kN * kK, 2);
        const std::vector<float> scales(kK / 128, 0.01f);
        std::vector<float> c(m * kN);
        for (auto _ : st) {
          g->bf16_f8_block_scaled(m, kN, kK, a.data(), kK, b.data(), kK, scales.data(), 128, c.data(), kN, false);
          benchmark::DoNotOptimize(c.data());
          benchmark::ClobberMemory();
        }
        set_rate(st, "gflops", 2.0 * m * kN * kK, peak().bf16_gflops_1t * 1e9);
      });
  }
  if (g->int4_row_bf16)
    for (bool groups : {false, true})
      add(std::string("gemm/") + (groups ? "int4_row_groups" : "int4_tables_then_row") + "_m1n128k512/" + lv, level,
          [=](benchmark::State& st) {
            const auto a = random_operand<std::uint16_t>(kK, 1);
            std::vector<std::uint32_t> words((kK / 8) * kLdw), zeros((kK / kGs) * (kLdw / 8));
            std::vector<std::uint16_t> scales((kK / kGs) * kLdw);
            std::uint64_t seed = 3;
            for (auto& w : words) w = static_cast<std::uint32_t>(mix(seed) >> 32);
            for (auto& z : zeros) z = static_cast<std::uint32_t>(mix(seed) >> 32);
            for (auto& x : scales) x = f32_to_f16(0.01f + 0.001f * uniform(seed));
            const simd::Int4Groups q{scales.data(), kLdw, true, zeros.data(), kLdw / 8, 0};
            std::vector<float> tables(kN * (kK / kGs) * 16), c(kN);
            const simd::Int4Columns codes_only{words.data(), kLdw, nullptr, kGs};
            const simd::Int4Columns with_tables{words.data(), kLdw, tables.data(), kGs};
            for (auto _ : st) {
              if (groups) {
                g->int4_row_bf16(kN, kK, a.data(), codes_only, q, c.data(), false);
              } else {
                for (std::size_t gi = 0; gi < kK / kGs; ++gi)
                  g->int4_tables(scales.data() + gi * kLdw, true, zeros.data() + gi * (kLdw / 8), 0, kN,
                                 tables.data() + gi * 16, (kK / kGs) * 16);
                g->int4_bf16(1, kN, kK, a.data(), kK, with_tables, c.data(), kN, false);
              }
              benchmark::DoNotOptimize(c.data());
              benchmark::ClobberMemory();
            }
            set_rate(st, "gflops", 2.0 * kN * kK, (g->bf16_dot ? peak().bf16_gflops_1t : peak().f32_gflops_1t) * 1e9);
          });
  // Act-order GPTQ taken in group order: a chunk's codes (64 word rows of 128 columns out of
  // qweight's 6144) regrouped by a shuffled order of its 512 channels; bytes written and read once.
  add("gemm/int4_regroup_k512n128/" + lv, level, [=](benchmark::State& st) {
    std::vector<std::uint32_t> words((kK / 8) * kLdw), out((kK / 8) * kN);
    std::uint64_t seed = 7;
    for (auto& w : words) w = static_cast<std::uint32_t>(mix(seed) >> 32);
    std::vector<std::uint32_t> order(kK);
    for (std::size_t i = 0; i < kK; ++i) order[i] = static_cast<std::uint32_t>(i);
    for (std::size_t i = kK - 1; i > 0; --i) std::swap(order[i], order[mix(seed) % (i + 1)]);
    for (auto _ : st) {
      g->int4_regroup(words.data(), kLdw, order.data(), kK / 8, kN, out.data(), kN);
      benchmark::DoNotOptimize(out.data());
      benchmark::ClobberMemory();
    }
    set_rate(st, "gbps", 2.0 * 4 * (kK / 8) * kN, peak().dram_gbps_1t * 1e9);
  });
  add("gemm/int4_tables_n128/" + lv, level, [=](benchmark::State& st) {
    std::vector<std::uint16_t> scales(kN);
    std::vector<std::uint32_t> zeros(kN / 8);
    std::uint64_t seed = 5;
    for (auto& s : scales) s = f32_to_f16(0.01f + 0.001f * uniform(seed));
    for (auto& z : zeros) z = static_cast<std::uint32_t>(mix(seed) >> 32);
    std::vector<float> tables(kN * 16);
    for (auto _ : st) {
      g->int4_tables(scales.data(), true, zeros.data(), 0, kN, tables.data(), 16);
      benchmark::DoNotOptimize(tables.data());
      benchmark::ClobberMemory();
    }
    st.counters["tables_per_us"] = benchmark::Counter(static_cast<double>(kN) * 1e-6 * static_cast<double>(st.iterations()),
                                                      benchmark::Counter::kIsRate);
  });
}

// The panel GEMM on one chunk of the fused QKV projection's work tile (256 rows x 256 weight
// columns over 256 of K, bf16 weights): the weight panels packed (widened) inside the timed loop
// as the operator does, the activations already f32 rows. Beside it the dot tile on the same
// product and the BLAS library's single-threaded sgemm on f32 operands converted beforehand.
void register_panel(Isa level) {
  const simd::GemmKernels* g = cpu::gemm_kernels_at(level);
  const std::string lv = isa_name(level);
  constexpr std::size_t kM = 256, kN = 256, kK = 256;
  const std::string shape = "m256n256k256";
  add("gemm/panel_bf16w_" + shape + "/" + lv, level, [=](benchmark::State& st) {
    const auto a = random_operand<float>(kM * kK, 1);
    const auto b = random_operand<std::uint16_t>(kN * kK, 2);
    std::vector<float> panel(g->panel_cols * kK), c(kM * kN);
    for (auto _ : st) {
      for (std::size_t j0 = 0; j0 < kN; j0 += g->panel_cols) {
        const std::size_t cols = std::min<std::size_t>(g->panel_cols, kN - j0);
        g->pack_panel_bf16(b.data() + j0 * kK, kK, cols, kK, panel.data());
        g->gemm_panel(kM, cols, kK, a.data(), kK, panel.data(), c.data() + j0, kN, false);
      }
      benchmark::DoNotOptimize(c.data());
      benchmark::ClobberMemory();
    }
    set_rate(st, "gflops", 2.0 * kM * kN * kK, peak().f32_gflops_1t * 1e9);
  });
  // The same with the activations (bf16 rows) packed into the register tiles' groups inside the
  // timed loop, as the operator does per chunk (gemm_panel_packed).
  add("gemm/panel_packed_rows_bf16w_" + shape + "/" + lv, level, [=](benchmark::State& st) {
    const auto x = random_operand<std::uint16_t>(kM * kK, 1);
    const auto b = random_operand<std::uint16_t>(kN * kK, 2);
    const std::size_t groups = (kM + g->panel_rows - 1) / g->panel_rows;
    std::vector<float> ap(groups * g->panel_rows * kK), panel(g->panel_cols * kK), c(kM * kN);
    for (auto _ : st) {
      g->pack_rows_bf16(x.data(), kK, kM, kK, ap.data());
      for (std::size_t j0 = 0; j0 < kN; j0 += g->panel_cols) {
        const std::size_t cols = std::min<std::size_t>(g->panel_cols, kN - j0);
        g->pack_panel_bf16(b.data() + j0 * kK, kK, cols, kK, panel.data());
        g->gemm_panel_packed(kM, cols, kK, ap.data(), panel.data(), c.data() + j0, kN, false);
      }
      benchmark::DoNotOptimize(c.data());
      benchmark::ClobberMemory();
    }
    set_rate(st, "gflops", 2.0 * kM * kN * kK, peak().f32_gflops_1t * 1e9);
  });
  gemm_case<float, float>("gemm/f32_f32_" + shape + "/" + lv, level, g->f32_f32, false, kM, kN, kK);
  // The library's row once, under the generic level (it runs on every CPU).
  if (level == Isa::generic && cpu::library_gemm::available())
    add("gemm/library_sgemm_" + shape + "/openblas", level, [=](benchmark::State& st) {
      const auto a = random_operand<float>(kM * kK, 1);
      const auto b = random_operand<float>(kN * kK, 2);
      std::vector<float> c(kM * kN);
      const cpu::library_gemm::SingleThreaded one;
      for (auto _ : st) {
        cpu::library_gemm::sgemm_nt(kM, kN, kK, a.data(), kK, b.data(), kK, c.data(), kN);
        benchmark::DoNotOptimize(c.data());
        benchmark::ClobberMemory();
      }
      set_rate(st, "gflops", 2.0 * kM * kN * kK, peak().f32_gflops_1t * 1e9);
    });
}

// The tile GEMM (AMX levels) on the fused QKV projection's work tile, one call of k: 256 rows x
// 256 weight columns x 1024, the weights packed beforehand (dense bf16, and fp8 with a scale per
// 128 x 128 block applied on the tile sums), against the AMX tile peak; and the packing itself
// (GB/s of weights read and packed bf16 written). With 1024 columns (bf16) each 32-row block of A
// is copied into the tile layout once for 32 column blocks instead of 8: against the work tile,
// the copies' share of its time.
void register_tiles(Isa level) {
  const simd::GemmKernels* g = cpu::gemm_kernels_at(level);
  if (!g->gemm_tiles) return;
  const std::string lv = isa_name(level);
  constexpr std::size_t kK = 1024;
  const std::size_t ldp = 16 * simd::tile_pack_k(kK);
  struct Shape {
    std::size_t m, n;
    bool fp8;
  };
  for (const Shape sh : {Shape{256, 256, false}, Shape{256, 256, true}, Shape{256, 1024, false}}) {
    const std::size_t kM = sh.m, kN = sh.n;
    const bool fp8 = sh.fp8;
    const std::string shape = "_m" + std::to_string(kM) + "n" + std::to_string(kN) + "k" + std::to_string(kK);
    add(std::string("gemm/tiles_") + (fp8 ? "f8_scaled" : "bf16") + shape + "/" + lv, level, [=](benchmark::State& st) {
      const auto a = random_operand<std::uint16_t>(kM * kK, 1);
      const auto bb = random_operand<std::uint16_t>(kN * kK, 2);
      const auto b8 = random_operand<std::uint8_t>(kN * kK, 2);
      std::vector<std::uint16_t> packed((kN / 16) * ldp);
      if (fp8) g->pack_tiles_f8(b8.data(), kK, kN, kK, packed.data(), ldp);
      else g->pack_tiles_bf16(bb.data(), kK, kN, kK, packed.data(), ldp);
      const std::vector<float> scales((kN + 127) / 128 * (kK / 128), 0.01f);
      const simd::TileScales ts{scales.data(), kK / 128, 128, 128};
      std::vector<float> c(kM * kN);
      for (auto _ : st) {
        g->gemm_tiles(kM, kN, kK, a.data(), kK, packed.data(), ldp, 32, fp8 ? &ts : nullptr, c.data(), kN, false);
        benchmark::DoNotOptimize(c.data());
        benchmark::ClobberMemory();
      }
      set_rate(st, "gflops", 2.0 * kM * kN * kK, peak().amx_gflops_1t * 1e9);
    });
  }
  constexpr std::size_t kN = 256;
  for (const bool fp8 : {false, true}) {
    add(std::string("gemm/tiles_pack_") + (fp8 ? "f8" : "bf16") + "_n256k1024/" + lv, level, [=](benchmark::State& st) {
      const auto bb = random_operand<std::uint16_t>(kN * kK, 2);
      const auto b8 = random_operand<std::uint8_t>(kN * kK, 2);
      std::vector<std::uint16_t> packed((kN / 16) * ldp);
      for (auto _ : st) {
        if (fp8) g->pack_tiles_f8(b8.data(), kK, kN, kK, packed.data(), ldp);
        else g->pack_tiles_bf16(bb.data(), kK, kN, kK, packed.data(), ldp);
        benchmark::DoNotOptimize(packed.data());
        benchmark::ClobberMemory();
      }
      st.counters["gbps"] = benchmark::Counter(static_cast<double>(kN * kK) * (fp8 ? 3 : 4) *
                                                   static_cast<double>(st.iterations()),
                                               benchmark::Counter::kIsRate);
    });
  }
}

void register_gemm(Isa level) {
  const simd::GemmKernels* g = cpu::gemm_kernels_at(level);
  const std::string lv = isa_name(level);
  struct Shape {
    std::size_t m, n, k;
  };
  // Indexer tiles: 64 (or 32) query heads against one page of 64 / 128 keys over head_dim 128;
  // MSA: 8 index heads against a 128-key block.
  for (Shape s : {Shape{64, 64, 128}, Shape{64, 128, 128}, Shape{32, 128, 128}, Shape{8, 128, 128}}) {
    const std::string shape = "m" + std::to_string(s.m) + "n" + std::to_string(s.n) + "k" + std::to_string(s.k);
    gemm_case<float, float>("gemm/f32_f32_" + shape + "/" + lv, level, g->f32_f32, false, s.m, s.n, s.k);
    gemm_case<std::uint16_t, std::uint16_t>("gemm/bf16_bf16_" + shape + "/" + lv, level, g->bf16_bf16, g->bf16_dot,
                                            s.m, s.n, s.k);
    gemm_case<std::uint8_t, std::uint8_t>("gemm/f8_f8_" + shape + "/" + lv, level, g->f8_f8, g->bf16_dot, s.m, s.n,
                                          s.k);
    gemm_case<float, std::uint8_t>("gemm/f32_f8_" + shape + "/" + lv, level, g->f32_f8, false, s.m, s.n, s.k);
    gemm_case<std::uint16_t, std::uint8_t>("gemm/bf16_f8_" + shape + "/" + lv, level, g->bf16_f8, g->bf16_dot, s.m,
                                           s.n, s.k);
  }
  // Sparse MLA, one 64-row chunk for 128 heads: the scores over qk 576 (rows along k) and P·V into
  // v 512 (B along n: value rows, zipped in pairs for bf16_nn).
  gemm_case<std::uint16_t, std::uint16_t>("gemm/bf16_bf16_m128n64k576/" + lv, level, g->bf16_bf16, g->bf16_dot, 128, 64,
                                          576);
  gemm_case<float, float>("gemm/f32_nn_m128n512k64/" + lv, level, g->f32_nn, false, 128, 512, 64, 512);
  if (g->bf16_nn)
    gemm_case<std::uint16_t, std::uint16_t>("gemm/bf16_nn_m128n512k64/" + lv, level, g->bf16_nn, true, 128, 512, 64,
                                            1024);
  // MLA prefill attention, 64 queries of one head against 64 keys: scores over qk 192 against
  // pair-major K, and P·V into v 128 accumulated (f32 or bf16 value rows).
  if (g->bf16_nn)
    gemm_case<std::uint16_t, std::uint16_t>("gemm/bf16_nn_m64n64k192/" + lv, level, g->bf16_nn, true, 64, 64, 192, 128);
  gemm_case<float, float>("gemm/f32_nn_m64n128k64/" + lv, level, g->f32_nn, false, 64, 128, 64, 128);
  gemm_case<float, std::uint16_t>("gemm/f32_bf16_nn_m64n128k64/" + lv, level, g->f32_bf16_nn, false, 64, 128, 64, 128);
  // MLA prefill's K store: 128 projected rows (256 columns) -> their 128 nope columns as the B of
  // the scores' NN tile, in chunks of 128 keys. GB/s of f32 read and bf16 written.
  for (const bool pairs : {false, true}) {
    const auto fn = pairs ? g->pack_pairs_bf16 : g->transpose_bf16;
    if (!fn) continue;
    add(std::string("gemm/") + (pairs ? "pack_pairs_bf16" : "transpose_bf16") + "_r128n128/" + lv, level,
        [=](benchmark::State& st) {
          const auto x = random_operand<float>(128 * 256, 1);
          std::vector<std::uint16_t> d(128 * 128);
          for (auto _ : st) {
            fn(x.data(), 256, 128, 128, d.data(), 128);
            benchmark::DoNotOptimize(d.data());
            benchmark::ClobberMemory();
          }
          st.counters["gbps"] = benchmark::Counter(128.0 * 128 * 6 * static_cast<double>(st.iterations()),
                                                   benchmark::Counter::kIsRate);
        });
  }
  // Sparse MLA's f32 scores, one 64-slot chunk of 128 heads: Sᵀ (slots as rows) into rows of
  // heads, and a gathered bf16 cache row (qk 576) widened. GB/s of f32 read and written.
  add("gemm/transpose_f32_r64n128/" + lv, level, [=](benchmark::State& st) {
    const auto x = random_operand<float>(64 * 128, 1);
    std::vector<float> d(128 * 64);
    for (auto _ : st) {
      g->transpose_f32(x.data(), 128, 64, 128, d.data(), 64);
      benchmark::DoNotOptimize(d.data());
      benchmark::ClobberMemory();
    }
    st.counters["gbps"] = benchmark::Counter(64.0 * 128 * 8 * static_cast<double>(st.iterations()),
                                             benchmark::Counter::kIsRate);
  });
  // Op 5's weight panels formed alone: 256 weight rows x 256 of k (eight panels of panel_cols
  // columns) from bf16 rows and from fp8 rows with a scale per 128 of k. GB/s of f32 panel written
  // (the rows read are a half and a quarter of it).
  for (const bool fp8 : {false, true})
    add(std::string("gemm/pack_panels_") + (fp8 ? "f8_scaled" : "bf16") + "_n256k256/" + lv, level,
        [=](benchmark::State& st) {
      constexpr std::size_t kN = 256, kK = 256;
      const auto w16 = random_operand<std::uint16_t>(kN * kK, 1);
      std::vector<std::uint8_t> w8(kN * kK);
      for (std::size_t i = 0; i < w8.size(); ++i) w8[i] = static_cast<std::uint8_t>(i * 37 + i / 256);
      const std::vector<float> scales = {0.5f, 0.25f};
      std::vector<float> panels(kN * kK);
      for (auto _ : st) {
        for (std::size_t j0 = 0; j0 < kN; j0 += g->panel_cols) {
          float* panel = panels.data() + j0 * kK;
          if (fp8) g->pack_panel_f8_scaled(w8.data() + j0 * kK, kK, g->panel_cols, kK, scales.data(), 128, panel);
          else g->pack_panel_bf16(w16.data() + j0 * kK, kK, g->panel_cols, kK, panel);
        }
        benchmark::DoNotOptimize(panels.data());
        benchmark::ClobberMemory();
      }
      st.counters["gbps"] = benchmark::Counter(4.0 * kN * kK * static_cast<double>(st.iterations()),
                                               benchmark::Counter::kIsRate);
    });
  add("gemm/widen_bf16_n576/" + lv, level, [=](benchmark::State& st) {
    const auto x = random_operand<std::uint16_t>(576, 1);
    std::vector<float> d(576);
    for (auto _ : st) {
      g->widen_bf16(x.data(), d.data(), 576);
      benchmark::DoNotOptimize(d.data());
      benchmark::ClobberMemory();
    }
    st.counters["gbps"] = benchmark::Counter(576.0 * 6 * static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  });
  register_int4(level);
  register_panel(level);
  register_tiles(level);
}

// ---- top-k ------------------------------------------------------------------------------------------
struct TopkShape {
  std::size_t n, k;
  const char* data;  // "uniform" or "ties"
};
// "normal": scores that bunch the way an indexer's do (many near the k-th best, few far above);
// n1536 with k2048 is a causal row short enough that every score is sorted.
const TopkShape kTopkShapes[] = {{131072, 2048, "uniform"}, {32768, 2048, "uniform"}, {8192, 2048, "uniform"},
                                 {8192, 2048, "normal"},    {1536, 2048, "normal"},   {131072, 2048, "ties"},
                                 {1024, 16, "uniform"},     {256, 64, "uniform"}};

std::vector<float> topk_rows(const TopkShape& s) {
  std::vector<float> x(s.n);
  std::uint64_t seed = 5;
  const std::string data = s.data;
  for (auto& v : x) {
    if (data == "ties") v = std::floor(uniform(seed) * 50.0f);
    else if (data == "normal") {  // Box-Muller over two uniforms in [0, 1)
      const float u1 = 0.5f * (uniform(seed) + 1.0f), u2 = 0.5f * (uniform(seed) + 1.0f);
      v = std::sqrt(-2.0f * std::log(1.0f - u1)) * std::cos(6.2831853f * u2);
    }
    else v = uniform(seed);
  }
  return x;
}

std::string topk_shape_name(const TopkShape& s) {
  const std::string data = s.data;
  return "n" + std::to_string(s.n) + "_k" + std::to_string(s.k) + (data == "uniform" ? "" : "_" + data);
}

void register_topk(Isa level) {
  const simd::TopkKernels* t = cpu::topk_kernels_at(level);
  for (const TopkShape& s : kTopkShapes) {
    add("topk/" + topk_shape_name(s) + "/" + isa_name(level), level, [t, s](benchmark::State& st) {
      const auto x = topk_rows(s);
      std::vector<unsigned char> scratch(simd::topk_scratch_bytes(s.n, s.k));
      std::vector<std::int32_t> out(s.k);
      for (auto _ : st) {
        benchmark::DoNotOptimize(t->select(x.data(), s.n, s.k, simd::TopkNan::last, out.data(), scratch.data()));
        benchmark::ClobberMemory();
      }
      set_rate(st, "gbps", 4.0 * s.n, peak().dram_gbps_1t * 1e9);
    });
  }
}

// ---- FP8 group quantization (op 3 step 4) ----------------------------------------------------------
// One DeepSeek-V3 latent row (512 bf16 values) as four groups of 128: the maximum, then the codes.
// GB/s of bf16 read and codes written.
void register_fp8_quant(Isa level) {
  const simd::Fp8QuantKernels* k = cpu::fp8_quant_kernels_at(level);
  add("fp8_quant/row_n512_g128/" + std::string(isa_name(level)), level, [k](benchmark::State& st) {
    constexpr std::size_t kN = 512, kGroup = 128;
    std::uint64_t seed = 13;
    std::vector<std::uint16_t> x(kN);
    for (auto& v : x) v = f32_to_bf16(8.0f * uniform(seed));
    std::vector<std::uint8_t> codes(kN);
    for (auto _ : st) {
      for (std::size_t g = 0; g < kN; g += kGroup) {
        const float amax = k->amax_bf16(x.data() + g, kGroup);
        k->encode_bf16(x.data() + g, kGroup, amax > 0 ? 448.0f / amax : 0.0f, codes.data() + g);
      }
      benchmark::ClobberMemory();
    }
    set_rate(st, "gbps", 3.0 * kN, peak().dram_gbps_1t * 1e9);
  });
}

// ---- RoPE / RMSNorm (op 3 steps 1-2), in place -------------------------------------------------
// One token of DeepSeek-V3: RoPE on the rope part (64) of 128 query heads (rows 192 apart), and
// RMSNorm of a 512-wide latent row. GB/s of bf16 read and written.
void register_rope_norm(Isa level) {
  const simd::RopeNormKernels* k = cpu::rope_norm_kernels_at(level);
  const std::string lv = isa_name(level);
  add("rope_norm/rope_h128_r64/" + lv, level, [k](benchmark::State& st) {
    constexpr std::size_t kRows = 128, kStride = 192, kPairs = 32;
    std::uint64_t seed = 5;
    std::vector<std::uint16_t> x(kRows * kStride);
    for (auto& v : x) v = f32_to_bf16(uniform(seed));
    std::vector<float> cs(2 * kPairs);
    for (std::size_t p = 0; p < kPairs; ++p) {
      cs[2 * p] = std::cos(0.1f * static_cast<float>(p));
      cs[2 * p + 1] = std::sin(0.1f * static_cast<float>(p));
    }
    for (auto _ : st) {
      k->rope_bf16(x.data() + 128, kStride, kRows, cs.data(), kPairs);
      benchmark::ClobberMemory();
    }
    set_rate(st, "gbps", 2.0 * 2 * kRows * 2 * kPairs, peak().dram_gbps_1t * 1e9);
  });
  add("rope_norm/rms_norm_n512/" + lv, level, [k](benchmark::State& st) {
    constexpr std::size_t kN = 512;
    std::uint64_t seed = 9;
    std::vector<std::uint16_t> x(kN), gamma(kN), x0(kN);
    for (auto& v : x0) v = f32_to_bf16(uniform(seed));
    for (auto& v : gamma) v = f32_to_bf16(1.0f + 0.1f * uniform(seed));
    for (auto _ : st) {
      x = x0;  // normalizing in place again would shrink the values towards fixed points
      k->rms_norm_bf16(x.data(), kN, gamma.data(), 1e-6f);
      benchmark::ClobberMemory();
    }
    set_rate(st, "gbps", 2.0 * 3 * kN, peak().dram_gbps_1t * 1e9);
  });
}

// Baseline: std::nth_element then std::sort of the k winners, the spec order as the comparator.
void register_topk_baseline() {
  for (const TopkShape& s : kTopkShapes) {
    add("topk/" + topk_shape_name(s) + "/nth_element", Isa::generic, [s](benchmark::State& st) {
      const auto x = topk_rows(s);
      std::vector<std::int32_t> idx(s.n), out(s.k);
      auto better = [&x](std::int32_t a, std::int32_t b) {
        const float fa = x[a], fb = x[b];
        const bool na = std::isnan(fa), nb = std::isnan(fb);
        if (na || nb) return (!na && nb) || (na && nb && a < b);
        return fa > fb || (fa == fb && a < b);
      };
      for (auto _ : st) {
        for (std::size_t i = 0; i < s.n; ++i) idx[i] = static_cast<std::int32_t>(i);
        const std::size_t m = std::min(s.k, s.n);
        std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(m - 1), idx.end(), better);
        std::sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(m), better);
        std::copy(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(m), out.begin());
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
      }
      set_rate(st, "gbps", 4.0 * s.n, peak().dram_gbps_1t * 1e9);
    });
  }
}

// ---- block-max scores (MSA block indexer) -----------------------------------------------------------
// `rows` query rows (packed in groups of the level's lanes) against one block of n keys of head_dim
// 128: 256 rows = a prefill tile (32 tokens x 8 index heads), 8 rows = one decode token.
void register_block_score(Isa level) {
  const simd::BlockScoreKernels* k = cpu::block_score_kernels_at(level);
  const std::string lv = isa_name(level);
  struct Shape {
    std::size_t rows, n, dim;
  };
  for (Shape s : {Shape{256, 128, 128}, Shape{64, 128, 128}, Shape{8, 128, 128}, Shape{8, 256, 128}, Shape{8, 512, 128}}) {
    for (bool f8 : {false, true}) {
      const std::string name = std::string("block_score/") + (f8 ? "f8" : "bf16") + "_rows" + std::to_string(s.rows) +
                               "_n" + std::to_string(s.n) + "_d" + std::to_string(s.dim) + "/" + lv;
      add(name, level, [k, s, f8, level](benchmark::State& st) {
        const std::size_t groups = (s.rows + k->lanes - 1) / k->lanes;
        const auto q = random_operand<std::uint16_t>(s.rows * s.dim, 1);
        const auto kb = random_operand<std::uint16_t>(s.n * s.dim, 2);
        const auto k8 = random_operand<std::uint8_t>(s.n * s.dim, 3);
        std::vector<unsigned char> qt(k->packed_q_bytes(s.rows, s.dim));
        std::vector<float> out(groups * k->lanes);
        std::vector<unsigned char> scratch(k->scratch_bytes(s.rows, s.dim));
        k->pack_q(q.data(), s.rows, s.dim, s.dim, qt.data());
        for (auto _ : st) {
          if (f8) k->block_max_f8(s.rows, s.dim, qt.data(), k8.data(), s.dim, s.n, nullptr, 0.125f, out.data(), scratch.data(), nullptr, 0);
          else k->block_max_bf16(s.rows, s.dim, qt.data(), kb.data(), s.dim, s.n, nullptr, 0.125f, out.data(), scratch.data(), nullptr, 0);
          benchmark::DoNotOptimize(out.data());
          benchmark::ClobberMemory();
        }
        set_rate(st, "gflops", 2.0 * static_cast<double>(s.rows * s.n * s.dim), relevant_gflops(peak(), level, false) * 1e9);
      });
    }
  }
  // A decode worker's sweep: one token (8 index heads) against 16384 blocks of 128 keys (256 MiB
  // of fp8, 512 MiB of bf16: far past the L3) visited in a shuffled page order, each call told the
  // next page so it can prefetch it; what the single-block shape above cannot show is the wait for
  // DRAM. The pages lie on huge pages unless MLAKIT_HUGE_PAGES=0, which adds the TLB's misses.
  for (bool f8 : {false, true}) {
    constexpr std::size_t kRows = 8, kN = 128, kDim = 128, kPages = 16384;
    const std::string name = std::string("block_score/") + (f8 ? "f8" : "bf16") + "_rows8_sweep16384_n128_d128/" + lv;
    add(name, level, [k, f8, level](benchmark::State& st) {
      const auto q = random_operand<std::uint16_t>(kRows * kDim, 1);
      // Placed as a serving engine places its cache (engine_allocator.hpp).
      using goldens::EngineAllocator;
      const auto kb = random_operand<std::uint16_t, EngineAllocator<std::uint16_t>>(f8 ? 0 : kPages * kN * kDim, 2);
      const auto k8 = random_operand<std::uint8_t, EngineAllocator<std::uint8_t>>(f8 ? kPages * kN * kDim : 0, 3);
      const std::vector<std::size_t> order = page_order(kPages, true);
      std::vector<unsigned char> qt(k->packed_q_bytes(kRows, kDim));
      std::vector<float> out(k->lanes), best(kRows, 0.0f);
      std::vector<unsigned char> scratch(k->scratch_bytes(kRows, kDim));
      k->pack_q(q.data(), kRows, kDim, kDim, qt.data());
      for (auto _ : st) {
        for (std::size_t i = 0; i < kPages; ++i) {
          const std::size_t at = order[i] * kN * kDim, next = i + 1 < kPages ? order[i + 1] * kN * kDim : 0;
          const std::size_t next_n = i + 1 < kPages ? kN : 0;
          if (f8) k->block_max_f8(kRows, kDim, qt.data(), k8.data() + at, kDim, kN, nullptr, 0.125f, out.data(), scratch.data(), next_n ? k8.data() + next : nullptr, next_n);
          else k->block_max_bf16(kRows, kDim, qt.data(), kb.data() + at, kDim, kN, nullptr, 0.125f, out.data(), scratch.data(), next_n ? kb.data() + next : nullptr, next_n);
          best[i % kRows] += out[i % kRows];
        }
        benchmark::DoNotOptimize(best.data());
        benchmark::ClobberMemory();
      }
      set_rate(st, "gflops", 2.0 * static_cast<double>(kRows * kPages * kN * kDim), relevant_gflops(peak(), level, false) * 1e9);
    });
  }
}

// ---- lightning-indexer score tiles ---------------------------------------------------------------
// One query of H heads x D 128 (packed once) against n keys, decoded f32 rows (`score`, the prefill
// path) or fp8 rows read in place (`score_f8`, the decode path): n 256 keeps the rows in L1/L2, n 4096
// reads them from L3 (2 MiB of f32, 512 KiB of fp8). Flops 2*H*D per key.
void register_index_score(Isa level) {
  const simd::IndexScoreKernels* k = cpu::index_score_kernels_at(level);
  const std::string lv = isa_name(level);
  struct Shape {
    std::size_t heads, n, dim;
  };
  for (Shape s : {Shape{64, 256, 128}, Shape{64, 4096, 128}, Shape{32, 4096, 128}}) {
    const std::string name = "index_score/h" + std::to_string(s.heads) + "_n" + std::to_string(s.n) + "_d" +
                             std::to_string(s.dim) + "/" + lv;
    add(name, level, [k, s, level](benchmark::State& st) {
      const auto q = random_operand<std::uint8_t>(s.heads * s.dim, 1);
      const auto w = random_operand<float>(s.heads, 2);
      const auto keys = random_operand<float>(s.n * s.dim, 3);
      const auto ks = random_operand<float>(s.n, 4);
      std::vector<float> packed(k->packed_floats(s.heads, s.dim)), out(s.n);
      k->pack_query(q.data(), w.data(), s.heads, s.dim, packed.data());
      for (auto _ : st) {
        k->score(packed.data(), s.heads, s.dim, keys.data(), s.dim, ks.data(), s.n, out.data());
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
      }
      set_rate(st, "gflops", 2.0 * static_cast<double>(s.heads * s.n * s.dim), relevant_gflops(peak(), level, false) * 1e9);
    });
    // The same keys as fp8 codes read in place through row pointers (the decode path).
    add("index_score/f8rows_h" + std::to_string(s.heads) + "_n" + std::to_string(s.n) + "_d" + std::to_string(s.dim) +
            "/" + lv,
        level, [k, s, level](benchmark::State& st) {
          const auto q = random_operand<std::uint8_t>(s.heads * s.dim, 1);
          const auto w = random_operand<float>(s.heads, 2);
          const auto codes = random_operand<std::uint8_t>(s.n * s.dim, 3);
          const auto ks = random_operand<float>(s.n, 4);
          std::vector<const std::uint8_t*> rows(s.n);
          for (std::size_t j = 0; j < s.n; ++j) rows[j] = codes.data() + j * s.dim;
          std::vector<float> packed(k->packed_floats(s.heads, s.dim)), out(s.n);
          k->pack_query(q.data(), w.data(), s.heads, s.dim, packed.data());
          for (auto _ : st) {
            k->score_f8(packed.data(), s.heads, s.dim, rows.data(), ks.data(), s.n, out.data());
            benchmark::DoNotOptimize(out.data());
            benchmark::ClobberMemory();
          }
          set_rate(st, "gflops", 2.0 * static_cast<double>(s.heads * s.n * s.dim), relevant_gflops(peak(), level, false) * 1e9);
        });
  }
}

// ---- the probe kernels themselves -----------------------------------------------------------------
void register_peak(Isa level) {
  const simd::PeakKernels* p = cpu::peak_kernels_at(level);
  const std::string lv = isa_name(level);
  add("peak/f32_fma/" + lv, level, [p](benchmark::State& st) {
    for (auto _ : st) benchmark::DoNotOptimize(p->f32_fma(10000, 1.0f));
    set_rate(st, "gflops", 10000 * p->f32_flops_per_iter, peak().f32_gflops_1t * 1e9);
  });
  add("peak/bf16_dot/" + lv, level, [p](benchmark::State& st) {
    for (auto _ : st) benchmark::DoNotOptimize(p->bf16_dot(10000, 1.0f));
    set_rate(st, "gflops", 10000 * p->bf16_flops_per_iter, peak().bf16_gflops_1t * 1e9);
  });
  // The tile GEMM's step alone (amx_bf16_streamed): B held in L1 (16 KiB) or streamed from L2 (1
  // MiB), against the tile probe's rate.
  if (p->amx_bf16_streamed)
    for (const std::size_t b_steps : {std::size_t{8}, std::size_t{512}})
      add("peak/amx_tiles_streamed_b" + std::to_string(b_steps * 2) + "k/" + lv, level, [p, b_steps](benchmark::State& st) {
        for (auto _ : st) benchmark::DoNotOptimize(p->amx_bf16_streamed(10000, 1.0f, b_steps));
        set_rate(st, "gflops", 10000 * p->amx_flops_per_iter, peak().amx_gflops_1t * 1e9);
      });
  // What one core can read from a paged cache with no arithmetic: 16384 pages of 16 KiB (an fp8
  // block of 128 keys x 128) in page order or shuffled, optionally prefetching the next page a
  // few lines per KiB read, as the block-score sweep does. The bound of a decode sweep's DRAM
  // wait, beside the streaming probe (which the hardware prefetchers help across page ends).
  struct PageRead {
    const char* name;
    bool shuffled, prefetch;
  };
  for (PageRead r : {PageRead{"in_order", false, false}, PageRead{"shuffled", true, false},
                     PageRead{"shuffled_prefetch_next", true, true}}) {
    add(std::string("peak/page_read_16k_") + r.name + "/" + lv, level, [p, r](benchmark::State& st) {
      constexpr std::size_t kPages = 16384, kPageFloats = kPagedReadPageFloats;
      std::vector<float, goldens::EngineAllocator<float>> buf(kPages * kPageFloats, 1.0f);
      const std::vector<std::size_t> order = page_order(kPages, r.shuffled);
      for (auto _ : st)
        benchmark::DoNotOptimize(page_walk_sum(p->read_sum, buf.data(), order.data(), 0, kPages, kPageFloats, r.prefetch));
      set_rate(st, "gbps", static_cast<double>(kPages * kPageFloats * sizeof(float)), peak().dram_gbps_1t * 1e9);
    });
  }
}

}  // namespace
}  // namespace mlakit::bench

int main(int argc, char** argv) {
  using namespace mlakit;
  using namespace mlakit::bench;
#define MLAKIT_SIMD_KERNEL(family, Type, lvl) register_##family(Isa::lvl);
#include "simd/kernels.inc"
#undef MLAKIT_SIMD_KERNEL
  register_topk_baseline();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const PeakFigures& p = peak();
  std::fprintf(stderr, "%s\n", describe(p).c_str());
  benchmark::AddCustomContext("cpu_model", core::cpu_info().model);
  benchmark::AddCustomContext("cpu_features", core::feature_list(core::cpu_info().features));
  benchmark::AddCustomContext("isa_level", isa_name(active_isa()));
  benchmark::AddCustomContext("peak", describe(p));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
