// The gemm family's tile GEMM (the amx level's pack_tiles_* and gemm_tiles): the packed layout
// element by element, every output bit for bit against a scalar model of the TDPBF16PS chain, at
// every tile edge of m, n and k, with and without block scales and accumulation, on the emulated
// tiles wherever avx512bf16 runs and on the real tiles (which must give the emulated bits) where
// the CPU has AMX. The plain dot-tile entries of the amx table are the avx512bf16 templates and
// are checked by gemm_test.cpp with every other level.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/amx_emulation/emulated_tables.hpp"
#include "kernels/kernel_list.hpp"
#include "mlakit/dtype.hpp"

namespace mlakit::kernel_tests {
namespace {

// Values below 2^-126 in magnitude to a signed zero, as the tile unit reads and writes them.
float flush(float x) { return std::fabs(x) < 0x1p-126f ? 0.0f * x : x; }

// One chain of TDPBF16PS steps over k in [k0, k1) from `acc` (read as the unit reads an
// accumulator): each step covers 32 k (the last padded with zero operands, which the unit
// multiplies too), even and odd products summed apart from 0, their sum added to acc.
template <class A, class B>
float tile_chain(float acc, std::size_t k0, std::size_t k1, A&& a, B&& b) {
  for (std::size_t s = k0; s < k1; s += 32) {
    float even = 0.0f, odd = 0.0f;
    for (std::size_t p = s; p < s + 32; p += 2) {
      const float a0 = p < k1 ? flush(a(p)) : 0.0f, b0 = p < k1 ? flush(b(p)) : 0.0f;
      const float a1 = p + 1 < k1 ? flush(a(p + 1)) : 0.0f, b1 = p + 1 < k1 ? flush(b(p + 1)) : 0.0f;
      even = flush(std::fma(a0, b0, even));
      odd = flush(std::fma(a1, b1, odd));
    }
    acc = flush(flush(acc) + flush(even + odd));
  }
  return acc;
}

bool same_bits(float x, float y) { return bits_of(x) == bits_of(y) || (std::isnan(x) && std::isnan(y)); }

struct Subject {
  const char* name;
  const simd::GemmKernels* g;
  Isa runs_on;
};

std::vector<Subject> subjects() {
  return {{"amx_emulated", &simd::gemm_amx_emulated, Isa::avx512bf16},
          {"amx", cpu::gemm_kernels_at(Isa::amx), Isa::amx}};
}

void PrintTo(const Subject& s, std::ostream* os) { *os << s.name; }

class GemmTiles : public ::testing::TestWithParam<Subject> {};

TEST(GemmTilesTable, OnlyTheAmxLevelHasTheTileGemm) {
  for (Isa l : levels_of("gemm")) {
    const simd::GemmKernels* g = cpu::gemm_kernels_at(l);
    ASSERT_NE(g, nullptr);
    const bool amx = l == Isa::amx;
    EXPECT_EQ(g->gemm_tiles != nullptr, amx) << isa_name(l);
    EXPECT_EQ(g->pack_tiles_bf16 != nullptr, amx) << isa_name(l);
    EXPECT_EQ(g->pack_tiles_f8 != nullptr, amx) << isa_name(l);
    EXPECT_EQ(g->tile_rows, amx ? 32u : 0u) << isa_name(l);
    EXPECT_EQ(g->tile_cols, amx ? 32u : 0u) << isa_name(l);
    EXPECT_EQ(g->tile_k, amx ? 32u : 0u) << isa_name(l);
  }
  EXPECT_STREQ(cpu::gemm_kernels_at(Isa::amx)->level, "amx");
  EXPECT_TRUE(cpu::gemm_kernels_at(Isa::amx)->bf16_dot);
}

// Every element of the packed strips, and nothing written between strips (ldp past the minimum)
// or past the last strip: bf16 rows and fp8 rows (every code, NaN ones included, decoded exactly).
TEST_P(GemmTiles, PackedLayoutHoldsEveryElement) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  const simd::GemmKernels& g = *GetParam().g;
  const std::uint16_t guard = 0xA5A5;
  std::uint64_t seed = 11;
  for (std::size_t cols : {1u, 15u, 16u, 17u, 33u, 48u}) {
    for (std::size_t k : {1u, 2u, 31u, 32u, 33u, 70u, 128u}) {
      Rng rng(seed++);
      const std::size_t ldb = k + seed % 3, strips = (cols + 15) / 16, ldp = 16 * simd::tile_pack_k(k) + 32;
      std::vector<std::uint16_t> bb(cols * ldb);
      std::vector<std::uint8_t> b8(cols * ldb);
      for (auto& x : bb) x = f32_to_bf16(rng.uniform(-3.0f, 3.0f));
      for (std::size_t i = 0; i < b8.size(); ++i) b8[i] = static_cast<std::uint8_t>((i * 7 + seed) % 256);
      std::vector<std::uint16_t> pb(strips * ldp + 64, guard), p8(strips * ldp + 64, guard);
      g.pack_tiles_bf16(bb.data(), ldb, cols, k, pb.data(), ldp);
      g.pack_tiles_f8(b8.data(), ldb, cols, k, p8.data(), ldp);
      for (std::size_t s = 0; s < strips; ++s) {
        for (std::size_t e = 0; e < ldp; ++e) {
          const std::size_t at = s * ldp + e;
          const std::string where = "cols " + std::to_string(cols) + " k " + std::to_string(k) + " strip " +
                                    std::to_string(s) + " element " + std::to_string(e);
          if (e >= 16 * simd::tile_pack_k(k)) {
            ASSERT_EQ(pb[at], guard) << where;
            ASSERT_EQ(p8[at], guard) << where;
            continue;
          }
          const std::size_t pair = e / 32, j = s * 16 + (e % 32) / 2, p = 2 * pair + e % 2;
          const bool live = j < cols && p < k;
          ASSERT_EQ(pb[at], live ? bb[j * ldb + p] : 0) << "bf16 " << where;
          ASSERT_EQ(p8[at], live ? static_cast<std::uint16_t>(bits_of(f8e4m3_to_f32(b8[j * ldb + p])) >> 16) : 0)
              << "f8 " << where;
        }
      }
      for (std::size_t e = strips * ldp; e < pb.size(); ++e) ASSERT_EQ(pb[e], guard);
    }
  }
}

struct Shape {
  std::size_t m, n, k;
};

// Every output against the model, C outside the tile untouched, for plain and block-scaled calls
// with and without accumulation; bf16 weights and fp8 weights (all 256 codes in every fp8 set);
// activations with a few subnormal and tiny values so that the unit's flushes are exercised.
void check_calls(const simd::GemmKernels& g, const Shape& sh, std::uint64_t seed, std::size_t block_override = 0) {
  Rng rng(seed);
  const std::size_t lda = sh.k + 3, ldb = sh.k + 1, ldc = sh.n + 5;
  std::vector<std::uint16_t> a(sh.m * lda), bb(sh.n * ldb);
  std::vector<std::uint8_t> b8(sh.n * ldb);
  for (auto& x : a) {
    const std::uint32_t r = rng.below(64);
    x = r == 0 ? static_cast<std::uint16_t>(rng.below(0x80) | (rng.below(2) << 15))  // subnormal or zero
               : f32_to_bf16(rng.uniform(-2.0f, 2.0f) * (r == 1 ? 0x1p-120f : 1.0f));
  }
  for (auto& x : bb) x = f32_to_bf16(rng.uniform(-2.0f, 2.0f));
  for (std::size_t i = 0; i < b8.size(); ++i) b8[i] = static_cast<std::uint8_t>((i * 37 + seed) % 256);
  // NaN codes (0x7F, 0xFF) would make most sums NaN: keep them to the first column.
  for (std::size_t j = 1; j < sh.n; ++j)
    for (std::size_t p = 0; p < sh.k; ++p)
      if ((b8[j * ldb + p] & 0x7F) == 0x7F) b8[j * ldb + p] ^= 0x01;
  const std::size_t ldp = 16 * simd::tile_pack_k(sh.k), strips = (sh.n + 15) / 16;
  std::vector<std::uint16_t> pb(strips * ldp), p8(strips * ldp);
  g.pack_tiles_bf16(bb.data(), ldb, sh.n, sh.k, pb.data(), ldp);
  g.pack_tiles_f8(b8.data(), ldb, sh.n, sh.k, p8.data(), ldp);
  const std::size_t block = block_override ? block_override : 32u << (seed % 3), scale_cols = 32u << (seed % 2);
  const std::size_t kblocks = (sh.k + block - 1) / block, srows = (sh.n + scale_cols - 1) / scale_cols;
  std::vector<float> scales(srows * (kblocks + 1));
  for (auto& s : scales) s = rng.uniform(0.001f, 0.02f);
  const simd::TileScales ts{scales.data(), kblocks + 1, scale_cols, block};
  std::vector<float> c0(sh.m * ldc);
  for (auto& x : c0) x = rng.uniform(-1.0f, 1.0f);
  if (!c0.empty()) c0[0] = 0x1p-130f;  // an accumulator the unit reads as zero
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;

  for (int weights = 0; weights < 2; ++weights) {
    const std::uint16_t* packed = weights ? p8.data() : pb.data();
    const auto bval = [&](std::size_t j, std::size_t p) {
      return weights ? f8e4m3_to_f32(b8[j * ldb + p]) : bf16_to_f32(bb[j * ldb + p]);
    };
    for (int scaled = 0; scaled < 2; ++scaled) {
      for (int accumulate = 0; accumulate < 2; ++accumulate) {
        std::vector<float> c(sh.m * ldc, float_of(kGuard));
        for (std::size_t i = 0; i < sh.m; ++i)
          for (std::size_t j = 0; j < sh.n; ++j)
            if (accumulate) c[i * ldc + j] = c0[i * ldc + j];
        g.gemm_tiles(sh.m, sh.n, sh.k, a.data(), lda, packed, ldp, 32, scaled ? &ts : nullptr, c.data(), ldc, accumulate);
        const std::string what = std::string(weights ? "f8" : "bf16") + (scaled ? " scaled" : "") +
                                 (accumulate ? " accumulate" : "") + " m " + std::to_string(sh.m) + " n " +
                                 std::to_string(sh.n) + " k " + std::to_string(sh.k) + " seed " + std::to_string(seed);
        for (std::size_t i = 0; i < sh.m; ++i) {
          const auto av = [&](std::size_t p) { return bf16_to_f32(a[i * lda + p]); };
          for (std::size_t j = 0; j < ldc; ++j) {
            const float got = c[i * ldc + j];
            if (j >= sh.n) {
              ASSERT_EQ(bits_of(got), kGuard) << what << ": wrote outside the tile at " << i << "," << j;
              continue;
            }
            const auto bv = [&](std::size_t p) { return bval(j, p); };
            const float start = accumulate ? c0[i * ldc + j] : 0.0f;
            float want;
            if (sh.k == 0) {
              want = start;
            } else if (!scaled) {
              want = tile_chain(start, 0, sh.k, av, bv);
            } else {
              want = start;
              for (std::size_t q = 0; q * block < sh.k; ++q) {
                const float s = scales[(j / scale_cols) * (kblocks + 1) + q];
                want = std::fma(s, tile_chain(0.0f, q * block, std::min(sh.k, (q + 1) * block), av, bv), want);
              }
            }
            ASSERT_TRUE(same_bits(got, want)) << what << " at " << i << "," << j << ": got " << got << ", model " << want;
          }
        }
      }
    }
  }
}

TEST_P(GemmTiles, EveryOutputIsTheTileChain) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  const simd::GemmKernels& g = *GetParam().g;
  std::uint64_t seed = 100;
  for (std::size_t m : {1u, 15u, 16u, 17u, 32u, 33u, 70u})
    for (std::size_t n : {1u, 16u, 17u, 32u, 33u, 70u})
      for (std::size_t k : {0u, 1u, 31u, 32u, 33u, 100u, 256u, 600u}) check_calls(g, {m, n, k}, seed++);
}

// An operator's work tile: 128 rows x 128 columns x 1024 k, a chunk of a larger k continued
// through accumulate, both weight kinds, three seeds.
TEST_P(GemmTiles, OperatorTileIsTheTileChain) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  for (std::uint64_t seed : {1u, 2u, 3u}) check_calls(*GetParam().g, {128, 128, 1024}, seed);
}

// B as rows zipped by pairs along n (the P·V operand: value rows, zip_rows_bf16's layout), read in
// place with ldp = 32 and ldq = twice the zipped row length: the bits of the packed columns of
// the same values, at the edges of m, n and k (pair rows past k zero, as callers leave them).
TEST_P(GemmTiles, ZippedRowPairsReadInPlace) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  const simd::GemmKernels& g = *GetParam().g;
  std::uint64_t seed = 900;
  for (std::size_t m : {1u, 17u, 33u})
    for (std::size_t n : {1u, 16u, 24u, 40u})
      for (std::size_t k : {1u, 2u, 31u, 33u, 64u}) {
        Rng rng(seed++);
        const std::size_t ldz = (n + 15) / 16 * 16 + 16, pair_rows = simd::tile_pack_k(k) / 2;
        std::vector<std::uint16_t> a(m * k), v(k * n);
        for (auto& x : a) x = f32_to_bf16(rng.uniform(-2.0f, 2.0f));
        for (auto& x : v) x = f32_to_bf16(rng.uniform(-2.0f, 2.0f));
        std::vector<std::uint16_t> zipped(pair_rows * 2 * ldz, 0x7F80);  // +inf past n: never stored columns
        for (std::size_t q = 0; q < pair_rows; ++q)
          for (std::size_t j = 0; j < n; ++j)
            for (std::size_t e = 0; e < 2; ++e)
              zipped[q * 2 * ldz + 2 * j + e] = 2 * q + e < k ? v[(2 * q + e) * n + j] : 0;
        std::vector<std::uint16_t> columns(n * k);  // B[j][p] = v[p][j]
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t p = 0; p < k; ++p) columns[j * k + p] = v[p * n + j];
        const std::size_t ldp = 16 * simd::tile_pack_k(k);
        std::vector<std::uint16_t> packed(((n + 15) / 16) * ldp);
        g.pack_tiles_bf16(columns.data(), k, n, k, packed.data(), ldp);
        std::vector<float> cz(m * n, -1.0f), cp(m * n, -2.0f);
        g.gemm_tiles(m, n, k, a.data(), k, zipped.data(), 32, 2 * ldz, nullptr, cz.data(), n, false);
        g.gemm_tiles(m, n, k, a.data(), k, packed.data(), ldp, 32, nullptr, cp.data(), n, false);
        for (std::size_t i = 0; i < m * n; ++i)
          ASSERT_EQ(bits_of(cz[i]), bits_of(cp[i])) << "m " << m << " n " << n << " k " << k << " at " << i;
      }
}

// Scale blocks that do not divide the 512 k of a pass (96: passes of 480) and the largest (1024:
// passes of 1024), over several passes.
TEST_P(GemmTiles, ScaleBlocksSpanWholePasses) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam().runs_on);
  for (std::size_t block : {96u, 1024u}) check_calls(*GetParam().g, {40, 40, 2100}, 7 + block, block);
}

// A call loads the tile configuration and releases it, whatever its shape.
TEST(GemmTilesEmulated, CallsLeaveNoTileState) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(Isa::avx512bf16);
  const simd::GemmKernels& g = simd::gemm_amx_emulated;
  std::vector<std::uint16_t> a(40 * 40, 0x3F80), packed(3 * 16 * 64, 0);
  std::vector<float> c(40 * 40);
  const float one = 1.0f;
  const simd::TileScales ts{&one, 0, 64, 64};
  for (std::size_t k : {0u, 1u, 40u})
    for (const simd::TileScales* s : {static_cast<const simd::TileScales*>(nullptr), &ts}) {
      g.gemm_tiles(40, 40, k, a.data(), 40, packed.data(), 16 * 64, 32, s, c.data(), 40, false);
      EXPECT_FALSE(simd::amx_emulated_tiles_configured()) << "k " << k;
    }
}

// The real tiles give the emulated bits on random operands at the edges (any NaN for a NaN).
TEST(GemmTilesReal, RealTilesGiveTheEmulatedBits) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(Isa::amx);
  const simd::GemmKernels& real = *cpu::gemm_kernels_at(Isa::amx);
  const simd::GemmKernels& emu = simd::gemm_amx_emulated;
  std::uint64_t seed = 500;
  for (std::size_t m : {1u, 17u, 33u})
    for (std::size_t n : {1u, 17u, 33u})
      for (std::size_t k : {1u, 33u, 128u}) {
        Rng rng(seed++);
        std::vector<std::uint16_t> a(m * k), b(n * k);
        for (auto& x : a) x = static_cast<std::uint16_t>(rng.below(65536));  // every pattern: NaN, inf, subnormal
        for (auto& x : b) x = static_cast<std::uint16_t>(rng.below(65536));
        const std::size_t ldp = 16 * simd::tile_pack_k(k), strips = (n + 15) / 16;
        std::vector<std::uint16_t> pr(strips * ldp), pe(strips * ldp);
        real.pack_tiles_bf16(b.data(), k, n, k, pr.data(), ldp);
        emu.pack_tiles_bf16(b.data(), k, n, k, pe.data(), ldp);
        ASSERT_EQ(pr, pe);
        std::vector<float> cr(m * n), ce(m * n);
        real.gemm_tiles(m, n, k, a.data(), k, pr.data(), ldp, 32, nullptr, cr.data(), n, false);
        emu.gemm_tiles(m, n, k, a.data(), k, pe.data(), ldp, 32, nullptr, ce.data(), n, false);
        for (std::size_t i = 0; i < m * n; ++i)
          ASSERT_TRUE(same_bits(cr[i], ce[i])) << "m " << m << " n " << n << " k " << k << " at " << i;
      }
}

INSTANTIATE_TEST_SUITE_P(Levels, GemmTiles, ::testing::ValuesIn(subjects()),
                         [](const ::testing::TestParamInfo<Subject>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mlakit::kernel_tests
