// The amx block_score kernel beyond the checks every level runs (block_score_test.cpp): the table,
// the kernel leaving no tile state behind, and -- on a CPU with AMX -- the real tiles giving the
// emulation's bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/amx_emulation/emulated_tables.hpp"
#include "kernels/amx_emulation/tile_dot_model.hpp"
#include "kernels/kernel_list.hpp"
#include "mlakit/dtype.hpp"

namespace mlakit::kernel_tests {
namespace {

TEST(BlockScoreAmx, TableDescribesTheTileKernel) {
  const simd::BlockScoreKernels* t = cpu::block_score_kernels_at(Isa::amx);
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->level, "amx");
  EXPECT_EQ(t->lanes, 16u);  // a C tile row: 16 query rows of one key
  EXPECT_EQ(t->tile_groups, 2u);
  EXPECT_EQ(t->tile_keys, 32u);
  EXPECT_EQ(t->pair_rows, 0u);  // every call on the tiles, a decode token's too
}

// Every call loads the tile configuration and releases it: none is left on the thread, after a
// call that sees no key (which touches no tile) or any other, through either entry.
TEST(BlockScoreAmx, EmulatedCallsLeaveNoTileState) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(Isa::avx512bf16);
  const simd::BlockScoreKernels& t = simd::block_score_amx_emulated;
  const std::size_t rows = 40, dim = 40, groups = 3;
  std::vector<std::uint16_t> q(rows * dim, 0x3F80);  // 1.0
  std::vector<unsigned char> packed(t.packed_q_bytes(rows, dim));
  t.pack_q(q.data(), rows, dim, dim, packed.data());
  std::vector<unsigned char> scratch(t.scratch_bytes(rows, dim));
  std::vector<std::uint16_t> kb(33 * dim, 0x3F80);
  std::vector<std::uint8_t> k8(33 * dim, 0x38);  // 1.0
  std::vector<std::int32_t> none(groups * 16, 0);
  std::vector<float> out(groups * 16);
  for (std::size_t n : {0, 1, 16, 17, 33}) {
    for (const std::int32_t* limit : {static_cast<const std::int32_t*>(nullptr), static_cast<const std::int32_t*>(none.data())}) {
      t.block_max_bf16(rows, dim, packed.data(), kb.data(), dim, n, limit, 1.0f, out.data(), scratch.data(), nullptr, 0);
      EXPECT_FALSE(simd::amx_emulated_tiles_configured()) << "bf16, n=" << n;
      for (std::size_t r = 0; r < rows; ++r)
        ASSERT_EQ(out[r], n == 0 || limit ? -std::numeric_limits<float>::infinity() : float(dim)) << n << " " << r;
      t.block_max_f8(rows, dim, packed.data(), k8.data(), dim, n, limit, 1.0f, out.data(), scratch.data(), nullptr, 0);
      EXPECT_FALSE(simd::amx_emulated_tiles_configured()) << "f8, n=" << n;
      for (std::size_t r = 0; r < rows; ++r)
        ASSERT_EQ(out[r], n == 0 || limit ? -std::numeric_limits<float>::infinity() : float(dim)) << n << " " << r;
    }
  }
}

// The operator's prefill tile: 256 rows (32 tokens x 8 heads) against a block of 128 keys of
// dim 128, with the causal staircase the MSA block indexer passes (token t sees t + 1 + offset
// keys, the last tokens see the whole block), bitwise against the scalar model of a TDPBF16PS
// chain (tile_dot_model.hpp), for both key types.
TEST(BlockScoreAmx, EmulatedPrefillTileMatchesTheTileArithmetic) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(Isa::avx512bf16);
  const simd::BlockScoreKernels& t = simd::block_score_amx_emulated;
  const std::size_t rows = 256, heads = 8, dim = 128, n = 128, ldk = 160;
  Rng rng(77);
  std::vector<std::uint16_t> q(rows * dim), kb(n * ldk);
  std::vector<std::uint8_t> k8(n * ldk);
  for (auto& x : q) x = f32_to_bf16(rng.uniform(-2.0f, 2.0f));
  for (auto& x : kb) x = f32_to_bf16(rng.uniform(-2.0f, 2.0f));
  for (auto& x : k8) x = static_cast<std::uint8_t>(rng.below(256) & 0xF7);  // no NaN codes
  std::vector<std::int32_t> limit(rows);
  for (std::size_t r = 0; r < rows; ++r) limit[r] = static_cast<std::int32_t>(r / heads * 5 + 1);
  std::vector<unsigned char> packed(t.packed_q_bytes(rows, dim)), scratch(t.scratch_bytes(rows, dim));
  t.pack_q(q.data(), rows, dim, dim, packed.data());
  std::vector<float> ob(rows), o8(rows);
  t.block_max_bf16(rows, dim, packed.data(), kb.data(), ldk, n, limit.data(), 0.088388f, ob.data(), scratch.data(),
                   nullptr, 0);
  t.block_max_f8(rows, dim, packed.data(), k8.data(), ldk, n, limit.data(), 0.088388f, o8.data(), scratch.data(),
                 k8.data(), n);
  for (std::size_t r = 0; r < rows; ++r) {
    float wb = -std::numeric_limits<float>::infinity(), w8 = wb;
    for (std::size_t j = 0; j < std::min<std::size_t>(n, static_cast<std::size_t>(limit[r])); ++j) {
      const auto qv = [&](std::size_t d) { return bf16_to_f32(q[r * dim + d]); };
      const float ab = tile_dot(dim, qv, [&](std::size_t d) { return bf16_to_f32(kb[j * ldk + d]); });
      const float a8 = tile_dot(dim, qv, [&](std::size_t d) { return f8e4m3_to_f32(k8[j * ldk + d]); });
      wb = std::max(wb, ab * 0.088388f);
      w8 = std::max(w8, a8 * 0.088388f);
    }
    ASSERT_EQ(bits_of(ob[r]), bits_of(wb)) << "bf16 row " << r;
    ASSERT_EQ(bits_of(o8[r]), bits_of(w8)) << "f8 row " << r;
  }
}

// The real tiles against the emulation: the same packed queries, and the same bits for every
// row's maximum through both entries, on random data (NaN keys included) over row, dim and key
// counts around every tile edge, with and without per-row limits (any NaN for a NaN: the
// hardware's NaN payloads are not modelled).
TEST(BlockScoreAmx, RealTilesGiveTheEmulatedBits) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(Isa::amx);
  const simd::BlockScoreKernels& real = *cpu::block_score_kernels_at(Isa::amx);
  const simd::BlockScoreKernels& emu = simd::block_score_amx_emulated;
  std::uint64_t seed = 1;
  for (std::size_t rows : {9u, 16u, 17u, 33u, 64u, 256u}) {
    for (std::size_t dim : {1u, 17u, 32u, 64u, 128u, 130u}) {
      for (std::size_t n : {1u, 15u, 16u, 17u, 32u, 33u, 128u}) {
        Rng rng(seed++);
        const std::size_t ldk = dim + (seed % 3), groups = (rows + 15) / 16;
        std::vector<std::uint16_t> q(rows * dim);
        for (auto& x : q) x = f32_to_bf16(rng.uniform(-2.0f, 2.0f));
        std::vector<std::uint16_t> kb(n * ldk + 1);
        for (auto& x : kb) x = f32_to_bf16(rng.uniform(-2.0f, 2.0f));
        std::vector<std::uint8_t> k8(n * ldk + 1);
        for (auto& x : k8) x = static_cast<std::uint8_t>(rng.below(256));
        if (seed % 5 == 0) kb[rng.below(static_cast<std::uint32_t>(n * ldk))] = 0x7FC0;
        std::vector<std::int32_t> limit(groups * 16);
        for (std::size_t r = 0; r < limit.size(); ++r) limit[r] = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(n + 2))) - 1;
        std::vector<unsigned char> pr(real.packed_q_bytes(rows, dim)), pe(emu.packed_q_bytes(rows, dim));
        real.pack_q(q.data(), rows, dim, dim, pr.data());
        emu.pack_q(q.data(), rows, dim, dim, pe.data());
        ASSERT_EQ(pr, pe) << "packed queries, rows " << rows << " dim " << dim;
        std::vector<unsigned char> scratch(real.scratch_bytes(rows, dim));
        for (const std::int32_t* lim : {static_cast<const std::int32_t*>(nullptr), static_cast<const std::int32_t*>(limit.data())}) {
          std::vector<float> a(groups * 16), b(groups * 16);
          const auto same = [](float x, float y) { return bits_of(x) == bits_of(y) || (std::isnan(x) && std::isnan(y)); };
          const std::string what = "rows " + std::to_string(rows) + " dim " + std::to_string(dim) + " n " +
                                   std::to_string(n) + (lim ? " limits" : "");
          real.block_max_bf16(rows, dim, pr.data(), kb.data(), ldk, n, lim, 0.125f, a.data(), scratch.data(), nullptr, 0);
          emu.block_max_bf16(rows, dim, pe.data(), kb.data(), ldk, n, lim, 0.125f, b.data(), scratch.data(), nullptr, 0);
          for (std::size_t r = 0; r < rows; ++r)
            ASSERT_TRUE(same(a[r], b[r])) << "bf16 " << what << " row " << r << ": real " << a[r] << ", emulated " << b[r];
          real.block_max_f8(rows, dim, pr.data(), k8.data(), ldk, n, lim, -0.5f, a.data(), scratch.data(), nullptr, 0);
          emu.block_max_f8(rows, dim, pe.data(), k8.data(), ldk, n, lim, -0.5f, b.data(), scratch.data(), nullptr, 0);
          for (std::size_t r = 0; r < rows; ++r)
            ASSERT_TRUE(same(a[r], b[r])) << "f8 " << what << " row " << r << ": real " << a[r] << ", emulated " << b[r];
        }
      }
    }
  }
}

}  // namespace
}  // namespace mlakit::kernel_tests
