// The amx index_score kernel beyond the checks every level runs (index_score_test.cpp): the tile
// emulation itself against Intel's definition of the operations, the kernel leaving no tile state
// behind, and -- on a CPU with AMX -- the real tiles giving the emulation's bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/amx_emulation/emulated_tables.hpp"
#include "kernels/amx_emulation/emulated_tiles.hpp"
#include "kernels/kernel_list.hpp"
#include "mlakit/dtype.hpp"

namespace mlakit::kernel_tests {
namespace {

using amx_emulation::EmulatedTiles;

// A palette-1 configuration: tile t is rows[t] x colsb[t].
struct Config {
  alignas(64) std::uint8_t raw[64] = {};
  Config& tile(int t, std::uint8_t rows, std::uint16_t colsb) {
    raw[0] = 1;
    std::memcpy(raw + 16 + 2 * t, &colsb, sizeof colsb);
    raw[48 + t] = rows;
    return *this;
  }
};

std::uint16_t bf16_of(float f) { return static_cast<std::uint16_t>(bits_of(f) >> 16); }

// One output element of TDPBF16PS: C (1 x 1 f32) += A (1 x K pairs) . B (K x 1 pairs), with
// A's pairs a[2k], a[2k+1] and B's b[2k], b[2k+1].
float dp_one(float c, const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b) {
  const std::uint16_t K = static_cast<std::uint16_t>(a.size() / 2);
  Config cfg;
  cfg.tile(0, 1, 4).tile(4, 1, static_cast<std::uint16_t>(4 * K)).tile(6, static_cast<std::uint8_t>(K), 4);
  EmulatedTiles tiles(cfg.raw);
  tiles.template load<0>(&c, 4);
  tiles.template load<4>(a.data(), 4 * K);
  tiles.template load<6>(b.data(), 4);  // row k: the pair b[2k], b[2k+1]
  tiles.template dp_bf16<0, 4, 6>();
  float out = 0;
  tiles.template store<0>(&out, 4);
  return out;
}

// 2^24 + 1 rounds back to 2^24 (ties to even), so the order of the additions shows: the even and
// the odd products are summed apart, (2^24 - 2^24) + (1 + 1) = 2, where adding each pair's two
// products in turn would give ((0 + 2^24) + 1 - 2^24) + 1 = 1.
TEST(AmxEmulatedTiles, Tdpbf16psSumsEvenAndOddProductsApart) {
  const std::vector<std::uint16_t> a = {bf16_of(0x1p24f), bf16_of(1.0f), bf16_of(-0x1p24f), bf16_of(1.0f)};
  const std::vector<std::uint16_t> b(4, bf16_of(1.0f));
  EXPECT_EQ(dp_one(0.0f, a, b), 2.0f);
  // The accumulator comes last: 1 + 1 first, then 2^24 + 2 (in turn it would be 2^24 twice over).
  EXPECT_EQ(dp_one(0x1p24f, {bf16_of(1.0f), bf16_of(1.0f)}, {bf16_of(1.0f), bf16_of(1.0f)}), 0x1p24f + 2.0f);
}

TEST(AmxEmulatedTiles, DenormalInputsReadAsZeroAndDenormalResultsFlush) {
  // bf16 0x0001 is 2^-133, a denormal: times 2^100 it would be 2^-33, but reads as 0.
  EXPECT_EQ(bits_of(dp_one(0.0f, {0x0001, 0}, {bf16_of(0x1p100f), 0})), 0u);
  // 2^-100 * 2^-30 = 2^-130 is an f32 denormal: flushed to a signed zero.
  EXPECT_EQ(bits_of(dp_one(0.0f, {bf16_of(0x1p-100f), 0}, {bf16_of(0x1p-30f), 0})), 0u);
  EXPECT_EQ(bits_of(dp_one(-0.0f, {bf16_of(-0x1p-100f), 0}, {bf16_of(0x1p-30f), 0})) & 0x7FFFFFFFu, 0u);
  // A denormal accumulator reads as zero: 2^-127 + 2^-126 would be normal, but gives 2^-126.
  EXPECT_EQ(dp_one(0x1p-127f, {bf16_of(0x1p-63f), 0}, {bf16_of(0x1p-63f), 0}), 0x1p-126f);
  // Products of normal bf16 values stay exact.
  EXPECT_EQ(dp_one(0.5f, {bf16_of(3.0f), bf16_of(-0.25f)}, {bf16_of(448.0f), bf16_of(6.0f)}), 0.5f + 1344.0f - 1.5f);
}

TEST(AmxEmulatedTiles, LoadsAndStoresHonourRowsAndColsb) {
  Config cfg;
  cfg.tile(1, 3, 8);
  EmulatedTiles tiles(cfg.raw);
  EXPECT_TRUE(simd::amx_emulated_tiles_configured());
  std::vector<std::uint8_t> src(16 * 40);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i);
  tiles.load<1>(src.data(), 40);
  std::vector<std::uint8_t> dst(16 * 64, 0xEE);
  tiles.store<1>(dst.data(), 64);
  for (std::size_t r = 0; r < 16; ++r)
    for (std::size_t c = 0; c < 64; ++c)
      ASSERT_EQ(dst[r * 64 + c], r < 3 && c < 8 ? src[r * 40 + c] : 0xEE) << "row " << r << " byte " << c;
  tiles.zero<1>();
  tiles.store<1>(dst.data(), 64);
  for (std::size_t c = 0; c < 8; ++c) ASSERT_EQ(dst[c], 0u);
}

TEST(AmxEmulatedTiles, ReleaseClearsTheConfiguration) {
  {
    Config cfg;
    cfg.tile(0, 16, 64);
    EmulatedTiles tiles(cfg.raw);
    EXPECT_TRUE(simd::amx_emulated_tiles_configured());
  }
  EXPECT_FALSE(simd::amx_emulated_tiles_configured());
}

// ---- the kernel ------------------------------------------------------------------------------------

TEST(IndexScoreAmx, TableDescribesTheTileKernel) {
  const simd::IndexScoreKernels* t = cpu::index_score_kernels_at(Isa::amx);
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->level, "amx");
  EXPECT_EQ(t->head_lanes, 16u);  // a C tile row: 16 heads of one key
  EXPECT_EQ(t->head_vectors * t->head_lanes, 32u);
  EXPECT_EQ(t->keys, 32u);
  EXPECT_TRUE(t->bf16_dot);
  EXPECT_EQ(t->decode_pass_rows, 0u);  // fp8 rows are always scored in place
  EXPECT_NE(t->score_f8_queries, nullptr);
}

// score_f8_queries gives every query the bits score_f8 gives it alone, writes nothing past its
// n, and reads no packed query other than those it is given: queries with 0 keys, fewer keys than
// others (the causal staircase) and counts around every tile edge, every code (NaN ones included).
TEST(IndexScoreAmx, QueriesSharingKeysGetTheirOwnBits) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(Isa::avx512bf16);
  std::vector<const simd::IndexScoreKernels*> tables = {&simd::index_score_amx_emulated};
  if (cpu_skip_reason(Isa::amx).empty()) tables.push_back(cpu::index_score_kernels_at(Isa::amx));
  constexpr std::uint32_t kPoison = 0x7FBADBADu;
  std::uint64_t seed = 11;
  for (const simd::IndexScoreKernels* t : tables) {
    for (std::size_t H : {1, 17, 64}) {
      for (std::size_t D : {32, 33, 128, 300}) {
        Rng rng(seed++);
        const std::size_t queries = 1 + rng.below(8), keys = 1 + rng.below(90);
        const std::size_t stride = t->packed_floats(H, D) + 3;
        std::vector<std::uint8_t> q(queries * H * D), pool(keys * (D + 7));
        for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<std::uint8_t>(i < 256 ? i : rng.below(256));
        for (auto& c : q) c = static_cast<std::uint8_t>(rng.below(256));
        std::vector<float> w(queries * H), ks(keys);
        for (auto& x : w) x = rng.uniform(-1.0f, 1.0f);
        for (auto& x : ks) x = rng.uniform(-0.1f, 0.1f);
        std::vector<const std::uint8_t*> rows(keys);
        for (std::size_t j = 0; j < keys; ++j) rows[j] = pool.data() + ((j * 7) % keys) * (D + 7) + j % 7;
        std::vector<float> packed(queries * stride);
        for (std::size_t r = 0; r < queries; ++r)
          t->pack_query(q.data() + r * H * D, w.data() + r * H, H, D, packed.data() + r * stride);
        std::vector<std::size_t> n(queries);
        for (std::size_t r = 0; r < queries; ++r)
          n[r] = r == 0 ? keys : r == 1 ? 0 : std::min<std::size_t>(keys, rng.below(static_cast<std::uint32_t>(keys + 1)));
        std::vector<std::vector<float>> got(queries, std::vector<float>(keys + 1, float_of(kPoison)));
        std::vector<float*> out(queries);
        for (std::size_t r = 0; r < queries; ++r) out[r] = got[r].data();
        t->score_f8_queries(packed.data(), stride, queries, H, D, rows.data(), ks.data(), n.data(), out.data());
        for (std::size_t r = 0; r < queries; ++r) {
          std::vector<float> alone(keys + 1, float_of(kPoison));
          t->score_f8(packed.data() + r * stride, H, D, rows.data(), ks.data(), n[r], alone.data());
          for (std::size_t j = 0; j <= keys; ++j)
            ASSERT_EQ(bits_of(got[r][j]), j < n[r] ? bits_of(alone[j]) : kPoison)
                << t->level << " H=" << H << " D=" << D << " query " << r << " of " << queries << " (n " << n[r]
                << ") key " << j;
        }
      }
    }
  }
}

// pack_query writes the B-tile layout simd/templates/index_score_amx_impl.hpp describes, every float
// of it: head tile t, dim chunk s, pair row k, head n holds the bf16 patterns of q[h, 2p] (low half)
// and q[h, 2p+1] (high half), p = 16s + k, h = 16t + n; 0 for heads past H and dims past D; then
// the weights, 0 past H. Every code, head and dim count around the tile edges, the real table too
// where the CPU runs it.
TEST(IndexScoreAmx, PackedQueryFollowsTheTileLayout) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(Isa::avx512bf16);
  std::vector<const simd::IndexScoreKernels*> tables = {&simd::index_score_amx_emulated};
  if (cpu_skip_reason(Isa::amx).empty()) tables.push_back(cpu::index_score_kernels_at(Isa::amx));
  const auto bf16_bits = [](std::uint8_t code) { return static_cast<std::uint32_t>(f32_to_bf16(f8e4m3_to_f32(code))); };
  std::uint64_t seed = 5;
  for (const simd::IndexScoreKernels* t : tables) {
    for (std::size_t H : {1, 15, 16, 17, 33, 64}) {
      for (std::size_t D : {1, 2, 31, 32, 33, 128, 130}) {
        Rng rng(seed++);
        std::vector<std::uint8_t> q(H * D);
        for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<std::uint8_t>(i < 256 ? i : rng.below(256));
        std::vector<float> w(H);
        for (auto& x : w) x = rng.uniform(-1.0f, 1.0f);
        const std::size_t HT = (H + 15) / 16, S = (D + 31) / 32, floats = t->packed_floats(H, D);
        ASSERT_EQ(floats, HT * (S * 256 + 16));
        std::vector<float> packed(floats + 1, float_of(0x7FBADBADu));
        t->pack_query(q.data(), w.data(), H, D, packed.data());
        EXPECT_EQ(bits_of(packed[floats]), 0x7FBADBADu) << "wrote past packed_floats";
        for (std::size_t tt = 0; tt < HT; ++tt)
          for (std::size_t s = 0; s < S; ++s)
            for (std::size_t k = 0; k < 16; ++k)
              for (std::size_t n = 0; n < 16; ++n) {
                const std::size_t h = 16 * tt + n, p = 16 * s + k;
                const auto code_bits = [&](std::size_t d) { return h < H && d < D ? bf16_bits(q[h * D + d]) : 0u; };
                const std::uint32_t want = code_bits(2 * p) | code_bits(2 * p + 1) << 16;
                ASSERT_EQ(bits_of(packed[(tt * S + s) * 256 + k * 16 + n]), want)
                    << t->level << " H=" << H << " D=" << D << " tile " << tt << " chunk " << s << " row " << k << " head " << n;
              }
        for (std::size_t h = 0; h < HT * 16; ++h)
          ASSERT_EQ(bits_of(packed[HT * S * 256 + h]), h < H ? bits_of(w[h]) : 0u) << t->level << " weight " << h;
      }
    }
  }
}

// Every call loads the tile configuration and releases it: none is left on the thread, after a
// call of n = 0 (which loads nothing) or of any n, through either entry.
TEST(IndexScoreAmx, EmulatedCallsLeaveNoTileState) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(Isa::avx512bf16);
  const simd::IndexScoreKernels& t = simd::index_score_amx_emulated;
  const std::size_t H = 20, D = 40;
  std::vector<std::uint8_t> q(H * D, 0x38);
  std::vector<float> w(H, 1.0f), packed(t.packed_floats(H, D));
  t.pack_query(q.data(), w.data(), H, D, packed.data());
  std::vector<float> k(33 * D, 1.0f), ks(33, 1.0f), out(33);
  std::vector<std::uint8_t> codes(D, 0x38);
  std::vector<const std::uint8_t*> rows(33, codes.data());
  for (std::size_t n : {0, 1, 16, 17, 33}) {
    t.score(packed.data(), H, D, k.data(), D, ks.data(), n, out.data());
    EXPECT_FALSE(simd::amx_emulated_tiles_configured()) << "score, n=" << n;
    t.score_f8(packed.data(), H, D, rows.data(), ks.data(), n, out.data());
    EXPECT_FALSE(simd::amx_emulated_tiles_configured()) << "score_f8, n=" << n;
  }
  for (std::size_t j = 0; j < 33; ++j) EXPECT_EQ(out[j], float(H * D)) << j;  // 1 * 1 per dim and head
}

// The real tiles against the emulation: the same packed query, and the same bits for every score
// of both entries (any NaN for a NaN: the hardware's NaN payloads are not modelled), on random
// data (every code, NaN ones included) over head counts, dims and key counts around every tile edge.
TEST(IndexScoreAmx, RealTilesGiveTheEmulatedBits) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(Isa::amx);
  const simd::IndexScoreKernels& real = *cpu::index_score_kernels_at(Isa::amx);
  const simd::IndexScoreKernels& emu = simd::index_score_amx_emulated;
  constexpr std::uint32_t kPoison = 0x7FBADBADu;
  std::uint64_t seed = 1;
  for (std::size_t H : {1, 15, 16, 17, 32, 33, 64, 96}) {
    for (std::size_t D : {1, 2, 31, 32, 33, 128, 256, 257, 300}) {
      Rng rng(seed++);
      const std::size_t n = 1 + rng.below(70);
      std::vector<std::uint8_t> q(H * D), pool((n + 3) * (D + 5));
      std::vector<float> w(H), ks(n);
      for (auto& c : q) c = static_cast<std::uint8_t>(rng.below(256));
      for (auto& c : pool) c = static_cast<std::uint8_t>(rng.below(256));
      for (auto& x : w) x = rng.uniform(-1.0f, 1.0f);
      for (auto& x : ks) x = rng.uniform(-0.1f, 0.1f);
      std::vector<const std::uint8_t*> rows(n);
      std::vector<float> k(n * (D + 1));
      for (std::size_t j = 0; j < n; ++j) {
        rows[j] = pool.data() + ((j * 5) % (n + 3)) * (D + 5) + j % 5;
        for (std::size_t d = 0; d < D; ++d) k[j * (D + 1) + d] = f8e4m3_to_f32(rows[j][d]);
      }
      std::vector<float> pr(real.packed_floats(H, D), float_of(kPoison));
      std::vector<float> pe(emu.packed_floats(H, D), float_of(kPoison));
      ASSERT_EQ(pr.size(), pe.size());
      real.pack_query(q.data(), w.data(), H, D, pr.data());
      emu.pack_query(q.data(), w.data(), H, D, pe.data());
      ASSERT_EQ(std::memcmp(pr.data(), pe.data(), pr.size() * sizeof(float)), 0) << "H=" << H << " D=" << D;
      for (bool f8 : {false, true}) {
        auto run = [&](const simd::IndexScoreKernels& t) {
          std::vector<float> out(n + 1, float_of(kPoison));
          if (f8) t.score_f8(pr.data(), H, D, rows.data(), ks.data(), n, out.data());
          else t.score(pr.data(), H, D, k.data(), D + 1, ks.data(), n, out.data());
          EXPECT_EQ(bits_of(out[n]), kPoison) << "wrote past n";
          return out;
        };
        const auto got = run(real), want = run(emu);
        for (std::size_t j = 0; j < n; ++j)
          ASSERT_TRUE(bits_of(got[j]) == bits_of(want[j]) || (std::isnan(got[j]) && std::isnan(want[j])))
              << (f8 ? "score_f8" : "score") << " H=" << H << " D=" << D << " n=" << n << " key " << j << ": real "
              << got[j] << ", emulated " << want[j];
      }
    }
  }
}

}  // namespace
}  // namespace mlakit::kernel_tests
