// A scalar emulation of the AMX tile operations the amx kernels use (the policy interface of
// simd/vec/amx_tiles.hpp), so that their bodies run and are tested on CPUs without AMX.
//
// Faithful where a kernel could be wrong: the configuration is read from the 64-byte ldtilecfg
// format (palette 1 only, rows and colsb per tile); loads read rows x colsb bytes and zero the rest
// of the register; stores write rows x colsb bytes only; a tile product checks the shapes the
// hardware checks (#UD there: an abort here) and computes TDPBF16PS as the SDM orders its
// additions: per output element, the even products (a[2k]*b[2k]) and the odd ones (a[2k+1]*b[2k+1])
// are each summed from 0 over the instruction's pairs in order, one fused multiply-add rounded to
// nearest even per step; the two sums are added, and that is added to the accumulator. bf16 inputs
// are made f32 by appending 16 zero bits, denormal inputs and the accumulator read as zero (DAZ),
// every result is flushed to zero when denormal (FTZ), MXCSR is ignored. The Intrinsics Guide words
// the order differently (each pair's two products added to the accumulator in turn); the hardware
// does not follow that wording: AmxTiles.EmulationGivesTheHardwareBits (amx_tiles_test.cpp) holds
// this emulation to real tiles bit for bit on CPUs with AMX, subnormals and infinities included.
// Only a NaN's payload and sign may differ from the hardware's.
// Using a tile while no configuration is loaded aborts; the destructor is tilerelease.
//
// Scalar code only, every function with internal linkage, and compiler builtins rather than inline
// library functions: the header may be compiled with any level's flags in any number of
// translation units without an AVX-512 copy of a shared inline function reaching generic code.
// The one exception is the tile state: plain data, defined once (tile_file.cpp), so that every
// emulated kernel and the tests' "nothing left configured" checks see the same per-thread tiles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mlakit::amx_emulation {

inline constexpr int kTiles = 8;
inline constexpr std::size_t kMaxRows = 16, kMaxColsb = 64;

// The thread's tile state, as the hardware keeps it per thread.
struct TileFile {
  bool configured;
  std::uint8_t rows[kTiles];
  std::uint16_t colsb[kTiles];
  alignas(64) std::uint8_t data[kTiles][kMaxRows][kMaxColsb];
};
// The calling thread's tiles: one object for every translation unit (tile_file.cpp).
TileFile& thread_tile_file();

namespace {

[[noreturn]] inline void fault(const char* what) {
  std::fprintf(stderr, "emulated AMX: %s (a #UD on hardware)\n", what);
  std::abort();
}

inline float bf16_to_f32_daz(std::uint16_t b) {
  if ((b & 0x7F80u) == 0) b &= 0x8000u;  // exponent 0: zero or denormal, read as a signed zero
  const std::uint32_t u = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float ftz(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7F800000u) == 0) u &= 0x80000000u;  // exponent 0: zero or denormal, to a signed zero
  std::memcpy(&x, &u, sizeof x);
  return x;
}

class EmulatedTiles {
 public:
  // ldtilecfg
  explicit EmulatedTiles(const void* config) : tile_file(thread_tile_file()) {
    std::uint8_t raw[64];
    std::memcpy(raw, config, sizeof raw);
    if (raw[0] != 1) fault("ldtilecfg: palette other than 1");
    if (raw[1] != 0) fault("ldtilecfg: start_row other than 0");
    for (int i = 2; i < 16; ++i)
      if (raw[i]) fault("ldtilecfg: reserved bytes not zero");
    TileFile& f = tile_file;
    for (int t = 0; t < kTiles; ++t) {
      std::uint16_t colsb;
      std::memcpy(&colsb, raw + 16 + 2 * t, sizeof colsb);
      const std::uint8_t rows = raw[48 + t];
      if (rows > kMaxRows || colsb > kMaxColsb) fault("ldtilecfg: tile larger than 16 rows x 64 bytes");
      if ((rows == 0) != (colsb == 0)) fault("ldtilecfg: a tile with rows but no columns, or columns but no rows");
      f.rows[t] = rows;
      f.colsb[t] = colsb;
    }
    std::memset(f.data, 0, sizeof f.data);
    f.configured = true;
  }
  // tilerelease: back to the initial state.
  ~EmulatedTiles() { tile_file = TileFile{}; }
  EmulatedTiles(const EmulatedTiles&) = delete;
  EmulatedTiles& operator=(const EmulatedTiles&) = delete;

  template <int T> void zero() {
    check<T>();
    std::memset(tile_file.data[T], 0, sizeof tile_file.data[T]);
  }
  template <int T> void load(const void* p, std::size_t stride) {
    check<T>();
    TileFile& f = tile_file;
    std::memset(f.data[T], 0, sizeof f.data[T]);
    for (std::size_t r = 0; r < f.rows[T]; ++r)
      std::memcpy(f.data[T][r], static_cast<const std::uint8_t*>(p) + r * stride, f.colsb[T]);
  }
  template <int T> void store(void* p, std::size_t stride) {
    check<T>();
    const TileFile& f = tile_file;
    for (std::size_t r = 0; r < f.rows[T]; ++r)
      std::memcpy(static_cast<std::uint8_t*>(p) + r * stride, f.data[T][r], f.colsb[T]);
  }
  // tdpbf16ps tmmC, tmmA, tmmB: C (M x N f32) += A (M x K bf16 pairs) . B (K x N bf16 pairs).
  template <int C, int A, int B> void dp_bf16() {
    check<C>();
    check<A>();
    check<B>();
    static_assert(C != A && C != B && A != B, "tdpbf16ps needs three distinct tiles");
    TileFile& f = tile_file;
    const std::size_t M = f.rows[C], N = f.colsb[C] / 4u, K = f.colsb[A] / 4u;
    if (f.colsb[C] % 4 || f.colsb[A] % 4 || f.colsb[B] != f.colsb[C] || f.rows[A] != M || f.rows[B] != K)
      fault("tdpbf16ps: tile shapes do not agree");
    for (std::size_t m = 0; m < M; ++m) {
      float acc[kMaxColsb / 4];
      std::memcpy(acc, f.data[C][m], N * sizeof(float));
      for (std::size_t n = 0; n < N; ++n) {
        float even = 0.0f, odd = 0.0f;
        for (std::size_t k = 0; k < K; ++k) {
          const float a0 = bf16_to_f32_daz(bf16(A, m, 2 * k)), a1 = bf16_to_f32_daz(bf16(A, m, 2 * k + 1));
          const float b0 = bf16_to_f32_daz(bf16(B, k, 2 * n)), b1 = bf16_to_f32_daz(bf16(B, k, 2 * n + 1));
          even = ftz(__builtin_fmaf(a0, b0, even));
          odd = ftz(__builtin_fmaf(a1, b1, odd));
        }
        acc[n] = ftz(ftz(acc[n]) + ftz(even + odd));  // DAZ on the accumulator too
      }
      std::memset(f.data[C][m], 0, kMaxColsb);  // the row past colsb is zeroed
      std::memcpy(f.data[C][m], acc, N * sizeof(float));
    }
    for (std::size_t m = M; m < kMaxRows; ++m) std::memset(f.data[C][m], 0, kMaxColsb);
  }

 private:
  TileFile& tile_file;

  template <int T> void check() const {
    static_assert(T >= 0 && T < kTiles, "tile registers are tmm0..tmm7");
    if (!tile_file.configured) fault("tile instruction without a tile configuration");
    if (tile_file.rows[T] == 0) fault("tile instruction on a tile the configuration leaves unused");
  }
  std::uint16_t bf16(int t, std::size_t row, std::size_t i) const {
    std::uint16_t v;
    std::memcpy(&v, tile_file.data[t][row] + 2 * i, sizeof v);
    return v;
  }
};

}  // namespace
}  // namespace mlakit::amx_emulation
