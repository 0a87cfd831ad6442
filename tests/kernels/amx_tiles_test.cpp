// The tile emulation (amx_emulation/emulated_tiles.hpp) against real tiles, on CPUs with AMX: the
// emulation is what every check of the amx kernels runs on elsewhere, so its arithmetic has to be
// the hardware's to the bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/amx_emulation/emulated_tiles.hpp"
#include "kernels/amx_hardware/tile_product.hpp"
#include "kernels/kernel_list.hpp"

namespace mlakit::kernel_tests {
namespace {

std::uint16_t bf16_bits_of(float f) { return static_cast<std::uint16_t>(bits_of(f) >> 16); }

// Operand regimes, each chosen to show one part of the arithmetic.
enum class Regime {
  moderate,       // |x| in [2^-10, 2^10]: the order of the additions (cancellation, ties)
  wide,           // |x| in [2^-30, 2^30]: absorption of small products by large sums
  flush_edge,     // products near 2^-126: which partial sums are flushed, and when
  denormal_in,    // bf16 denormals among normal values: read as zero
  special,        // infinities, NaN, signed zeros and the largest finite values, sparsely
};

std::uint16_t operand(Rng& rng, Regime regime) {
  const float m = rng.uniform(-1.0f, 1.0f);
  switch (regime) {
    case Regime::moderate: return bf16_bits_of(std::ldexp(m, static_cast<int>(rng.below(21)) - 10));
    case Regime::wide: return bf16_bits_of(std::ldexp(m, static_cast<int>(rng.below(61)) - 30));
    case Regime::flush_edge: return bf16_bits_of(std::ldexp(m, -56 - static_cast<int>(rng.below(20))));
    case Regime::denormal_in:
      if (rng.below(3) == 0) return static_cast<std::uint16_t>((rng.below(2) << 15) | (1 + rng.below(0x7F)));
      return bf16_bits_of(std::ldexp(m, static_cast<int>(rng.below(8))));
    case Regime::special: {
      static constexpr std::uint16_t kSpecial[] = {0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x0000, 0x8000, 0x7F7F, 0xFF7F};
      if (rng.below(48) == 0) return kSpecial[rng.below(sizeof kSpecial / sizeof kSpecial[0])];
      return bf16_bits_of(std::ldexp(m, static_cast<int>(rng.below(41)) - 20));
    }
  }
  return 0;
}

float accumulator(Rng& rng, Regime regime) {
  switch (rng.below(4)) {
    case 0: return 0.0f;
    case 1: return rng.uniform(-4.0f, 4.0f);
    case 2: return std::ldexp(rng.uniform(-1.0f, 1.0f), -128 + static_cast<int>(rng.below(5)));  // denormal or near
    default:
      if (regime == Regime::special && rng.below(4) == 0) {
        static constexpr std::uint32_t kSpecial[] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC12345u, 0x00000001u};
        return float_of(kSpecial[rng.below(5)]);
      }
      return std::ldexp(rng.uniform(-1.0f, 1.0f), static_cast<int>(rng.below(41)) - 20);
  }
}

TEST(AmxTiles, EmulationGivesTheHardwareBits) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(Isa::amx);
  // All eight tiles 16 rows x 64 bytes, as every amx kernel configures them.
  alignas(64) std::uint8_t config[64] = {1};
  for (int t = 0; t < 8; ++t) {
    const std::uint16_t colsb = 64;
    std::memcpy(config + 16 + 2 * t, &colsb, sizeof colsb);
    config[48 + t] = 16;
  }
  Rng rng(2024);
  std::size_t checked = 0;
  for (Regime regime : {Regime::moderate, Regime::wide, Regime::flush_edge, Regime::denormal_in, Regime::special}) {
    for (int trial = 0; trial < 150; ++trial) {
      alignas(64) std::uint16_t a[16 * 32], b[16 * 32];
      alignas(64) float c0[16 * 16], real[16 * 16], emulated[16 * 16];
      for (auto& x : a) x = operand(rng, regime);
      for (auto& x : b) x = operand(rng, regime);
      for (auto& x : c0) x = accumulator(rng, regime);
      std::memcpy(real, c0, sizeof c0);
      std::memcpy(emulated, c0, sizeof c0);
      hardware_tile_product(real, a, b);
      {
        amx_emulation::EmulatedTiles tiles(config);
        tiles.load<0>(emulated, 64);
        tiles.load<4>(a, 64);
        tiles.load<6>(b, 64);
        tiles.dp_bf16<0, 4, 6>();
        tiles.store<0>(emulated, 64);
      }
      for (std::size_t i = 0; i < 16 * 16; ++i, ++checked)
        ASSERT_TRUE(bits_of(real[i]) == bits_of(emulated[i]) || (std::isnan(real[i]) && std::isnan(emulated[i])))
            << "regime " << static_cast<int>(regime) << " trial " << trial << " row " << i / 16 << " column " << i % 16
            << ": accumulator " << c0[i] << ", real " << real[i] << ", emulated " << emulated[i];
    }
  }
  EXPECT_EQ(checked, 5u * 150 * 256);
}

}  // namespace
}  // namespace mlakit::kernel_tests
