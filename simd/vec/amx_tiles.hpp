// AMX tile registers for the amx level's kernels: the 64-byte tile configuration (palette 1) and
// the tile-operations policy over the real instructions. A kernel is written once against a
// policy type `Tiles` with this interface:
//
//   Tiles tiles(&config);                       ldtilecfg; the destructor runs tilerelease
//   tiles.template zero<T>();                   tilezero tmmT
//   tiles.template load<T>(ptr, stride);        tileloadd tmmT, [ptr + stride * row]
//   tiles.template store<T>(ptr, stride);       tilestored
//   tiles.template dp_bf16<C, A, B>();          tdpbf16ps tmmC, tmmA, tmmB
//
// so that the tests can compile the same kernel over a scalar emulation of exactly these
// operations (tests/kernels/amx_emulation/) on CPUs without AMX. The policy object lives for one
// kernel call: a call leaves no tile configuration or tile data behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "simd/vec/level.hpp"

// GCC names the AMX feature macros __AMX_TILE__ / __AMX_BF16__, clang __AMXTILE__ / __AMXBF16__.
#if (defined(__AMX_TILE__) && defined(__AMX_BF16__)) || (defined(__AMXTILE__) && defined(__AMXBF16__))
#define MLAKIT_HAVE_AMX_INTRINSICS 1
#include <immintrin.h>
#endif

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// The memory operand of ldtilecfg (palette 1): per tile register, its rows and its bytes per row
// (colsb); tiles not used keep 0 x 0.
struct alignas(64) TileConfig {
  std::uint8_t palette;
  std::uint8_t start_row;
  std::uint8_t reserved[14];
  std::uint16_t colsb[16];
  std::uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

// The register plan of every amx kernel: two A tiles (tmm4, tmm5), two B tiles (tmm6, tmm7) and
// their four products C[a][b] (tmm0..tmm3), as HardwareTiles::dp_bf16 checks.
constexpr std::size_t kATiles = 2, kBTiles = 2;
constexpr int c_tile(std::size_t a, std::size_t b) { return static_cast<int>(a * kBTiles + b); }
constexpr int a_tile(std::size_t a) { return static_cast<int>(4 + a); }
constexpr int b_tile(std::size_t b) { return static_cast<int>(6 + b); }

// f(integral_constant<0>), ..., f(integral_constant<N-1>): the kernels' loops over tiles, whose
// numbers must be constants.
template <std::size_t N, class Fn>
inline void unroll(Fn&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (f(std::integral_constant<std::size_t, I>{}), ...); }(
      std::make_index_sequence<N>{});
}

// Every one of the first `count` tiles as rows x colsb.
constexpr TileConfig uniform_tile_config(unsigned count, std::uint8_t rows, std::uint16_t colsb) {
  TileConfig c{};
  c.palette = 1;
  for (unsigned t = 0; t < count; ++t) {
    c.rows[t] = rows;
    c.colsb[t] = colsb;
  }
  return c;
}

// The tile shape every amx kernel uses: all eight tiles 16 rows x 64 bytes, so an A tile row is
// 32 bf16 (16 pairs of dims) of one key and a C tile is 16 x 16 f32; a kernel's step covers the
// keys of its kATiles A tiles.
constexpr std::size_t kTileRows = 16;
constexpr std::size_t kRowBytes = 64;
constexpr std::size_t kChunkDims = 32;
constexpr std::size_t kKeys = kATiles * kTileRows;
constexpr TileConfig kTileConfig = uniform_tile_config(8, kTileRows, kRowBytes);

#if defined(MLAKIT_HAVE_AMX_INTRINSICS)
// The intrinsics paste the tile number into the instruction text, so it has to be a literal
// token: a template's tile number becomes one of eight literal calls.
#define MLAKIT_AMX_TILE_SWITCH(T, CALL)                                                                  \
  static_assert((T) >= 0 && (T) < 8, "tile registers are tmm0..tmm7");                                  \
  if constexpr ((T) == 0) CALL(0);                                                                      \
  else if constexpr ((T) == 1) CALL(1);                                                                 \
  else if constexpr ((T) == 2) CALL(2);                                                                 \
  else if constexpr ((T) == 3) CALL(3);                                                                 \
  else if constexpr ((T) == 4) CALL(4);                                                                 \
  else if constexpr ((T) == 5) CALL(5);                                                                 \
  else if constexpr ((T) == 6) CALL(6);                                                                 \
  else CALL(7)

class HardwareTiles {
 public:
  explicit HardwareTiles(const void* config) { _tile_loadconfig(config); }
  ~HardwareTiles() { _tile_release(); }
  HardwareTiles(const HardwareTiles&) = delete;
  HardwareTiles& operator=(const HardwareTiles&) = delete;

  template <int T> void zero() {
#define MLAKIT_AMX_ZERO(t) _tile_zero(t)
    MLAKIT_AMX_TILE_SWITCH(T, MLAKIT_AMX_ZERO);
#undef MLAKIT_AMX_ZERO
  }
  template <int T> void load(const void* p, std::size_t stride) {
    // GCC's tileloadd takes the address as a plain register operand and does not declare that it
    // reads memory: without this barrier the stores that filled p (key rows converted a moment
    // ago) could be moved past the load, or dropped as dead.
    __asm__ volatile("" : : "r"(p) : "memory");
#define MLAKIT_AMX_LOAD(t) _tile_loadd(t, p, static_cast<long>(stride))
    MLAKIT_AMX_TILE_SWITCH(T, MLAKIT_AMX_LOAD);
#undef MLAKIT_AMX_LOAD
  }
  template <int T> void store(void* p, std::size_t stride) {
#define MLAKIT_AMX_STORE(t) _tile_stored(t, p, static_cast<long>(stride))
    MLAKIT_AMX_TILE_SWITCH(T, MLAKIT_AMX_STORE);
#undef MLAKIT_AMX_STORE
  }
  // The accumulator in tmm0..3, the first operand in tmm4..5, the second in tmm6..7: the register
  // plan of every amx kernel so far (four C tiles, two A, two B).
  template <int C, int A, int B> void dp_bf16() {
    static_assert(C >= 0 && C < 4 && (A == 4 || A == 5) && (B == 6 || B == 7),
                  "C in tmm0..3, A in tmm4..5, B in tmm6..7");
#define MLAKIT_AMX_DP(c, a, b) \
  if constexpr (C == c && A == a && B == b) _tile_dpbf16ps(c, a, b)
    MLAKIT_AMX_DP(0, 4, 6); MLAKIT_AMX_DP(0, 4, 7); MLAKIT_AMX_DP(0, 5, 6); MLAKIT_AMX_DP(0, 5, 7);
    MLAKIT_AMX_DP(1, 4, 6); MLAKIT_AMX_DP(1, 4, 7); MLAKIT_AMX_DP(1, 5, 6); MLAKIT_AMX_DP(1, 5, 7);
    MLAKIT_AMX_DP(2, 4, 6); MLAKIT_AMX_DP(2, 4, 7); MLAKIT_AMX_DP(2, 5, 6); MLAKIT_AMX_DP(2, 5, 7);
    MLAKIT_AMX_DP(3, 4, 6); MLAKIT_AMX_DP(3, 4, 7); MLAKIT_AMX_DP(3, 5, 6); MLAKIT_AMX_DP(3, 5, 7);
#undef MLAKIT_AMX_DP
  }
};
#undef MLAKIT_AMX_TILE_SWITCH
#endif

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
