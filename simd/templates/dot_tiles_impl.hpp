// Dot-product tiles (C = A·Bᵀ over rows along k) and their driver, written once; every level
// compiles it through simd/<level>/gemm.cpp (simd/templates/gemm_impl.hpp assembles the table).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include <unistd.h>

#include "simd/vec/bf16_round.hpp"
#include "simd/templates/fp8_decode_impl.hpp"
#include "simd/gemm.hpp"
#if defined(__AVX512VBMI__)
#include "simd/vec/fp8_bf16_vbmi.hpp"
#endif

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// Register tile. Accumulators kMr*kNr plus kNr B vectors plus one A vector must fit the register
// file: 16 registers (generic: 8+4+1, avx2: 12+4+1 with the A load folded into the FMAs), 32 on
// AVX-512 (24+4+1). kNr = 4 matches reduce_add4, which turns a row of four accumulators into four
// adjacent outputs.
#if defined(MLAKIT_SIMD_LEVEL_generic)
constexpr std::size_t kMr = 2;
#elif defined(MLAKIT_SIMD_LEVEL_avx2)
constexpr std::size_t kMr = 3;
#else
constexpr std::size_t kMr = 6;
#endif
constexpr std::size_t kNr = 4;

#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
constexpr bool kHasBf16Dot = true;
#else
constexpr bool kHasBf16Dot = false;
#endif

// Heap scratch with plain new/delete: no standard container is instantiated with this level's flags.
template <class T>
class Scratch {
 public:
  explicit Scratch(std::size_t n) : p_(n ? static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))) : nullptr) {}
  ~Scratch() {
    if (p_) ::operator delete(p_, std::align_val_t(64));
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() const { return p_; }

 private:
  T* p_;
};

// Scratch on the stack up to N elements, on the heap beyond: for the per-call buffers of decode
// kernels, which an operator calls hundreds of times per call (a tile and chunk each).
template <class T, std::size_t N>
class LocalScratch {
 public:
  explicit LocalScratch(std::size_t n) : heap_(n > N ? n : 0) {}
  LocalScratch(const LocalScratch&) = delete;
  LocalScratch& operator=(const LocalScratch&) = delete;
  T* get() { return heap_.get() ? heap_.get() : local_; }

 private:
  alignas(64) T local_[N];
  Scratch<T> heap_;
};

inline std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

// ---- conversion of operand rows into the compute type ----------------------------------------
inline void convert_row(const float* s, float* d, std::size_t k) { std::memcpy(d, s, k * sizeof(float)); }
inline void convert_row(const std::uint16_t* s, float* d, std::size_t k) {
  std::size_t p = 0;
  for (; p + kLanes <= k; p += kLanes) fstore(d + p, fload_bf16(s + p));
  if (p < k) fstore_n(d + p, fload_bf16_n(s + p, k - p), k - p);
}
// fp8 rows through the VBMI byte tables where the level has them (the fastest exact decode
// measured, bench/RESULTS.md), else through the shared lane decode.
inline void convert_row(const std::uint8_t* s, float* d, std::size_t k) {
#if defined(__AVX512VBMI__)
  fp8_to_f32_vbmi(s, d, k);
#else
  fp8_to_f32(s, d, k);
#endif
}
inline void convert_row(const std::uint16_t* s, std::uint16_t* d, std::size_t k) { std::memcpy(d, s, k * 2); }
inline void convert_row(const std::uint8_t* s, std::uint16_t* d, std::size_t k) {
#if defined(__AVX512VBMI__)
  fp8_to_bf16_vbmi(s, d, k);
#else
  fp8_to_bf16(s, d, k);
#endif
}

// B's elements as f32 in a tile's registers, widened as they are loaded (exact for every type:
// the values convert_row gives, zero past n).
inline F fload_as_f32(const float* p) { return fload(p); }
inline F fload_as_f32(const std::uint16_t* p) { return fload_bf16(p); }
inline F fload_as_f32(const std::uint8_t* p) { return fp8_lanes_to_f32(hload_s8(p)); }
inline F fload_as_f32_n(const float* p, std::size_t n) { return fload_n(p, n); }
inline F fload_as_f32_n(const std::uint16_t* p, std::size_t n) { return fload_bf16_n(p, n); }
inline F fload_as_f32_n(const std::uint8_t* p, std::size_t n) { return fp8_lanes_to_f32(hload_s8_n(p, n)); }

// ---- micro-kernels ----------------------------------------------------------------------------
template <std::size_t R, std::size_t C>
inline void write_tile(const F (&s)[R][C], float* c, std::size_t ldc, bool accumulate) {
  for (std::size_t r = 0; r < R; ++r) {
    float out[4];
    const F z = fzero();
    reduce_add4(s[r][0], C > 1 ? s[r][C > 1 ? 1 : 0] : z, C > 2 ? s[r][C > 2 ? 2 : 0] : z,
                C > 3 ? s[r][C > 3 ? 3 : 0] : z, out);
    float* row = c + r * ldc;
    for (std::size_t j = 0; j < C; ++j) row[j] = accumulate ? row[j] + out[j] : out[j];
  }
}

// B's elements as f32, fp8 codes decoded without the NaN patch when kUnpatched (the two NaN codes
// come out as +-480: fp8_decode_impl.hpp), and times 2^-8 when kFolded (A then holds its rows
// times 2^8: fold_2p8).
template <bool kUnpatched, bool kFolded>
inline F widen_fp8(H code) {
  F v;
  if constexpr (kUnpatched) v = fp8_lanes_to_f32_scaled_unpatched(code);
  else v = fp8_lanes_to_f32_scaled(code);
  if constexpr (kFolded) return v;
  else return v * fsplat(256.0f);
}
template <bool kUnpatched, bool kFolded, class TB>
inline F widen_b(const TB* p) {
  if constexpr (std::is_same_v<TB, std::uint8_t>) return widen_fp8<kUnpatched, kFolded>(hload_s8(p));
  else return fload_as_f32(p);
}
template <bool kUnpatched, bool kFolded, class TB>
inline F widen_b_n(const TB* p, std::size_t n) {
  if constexpr (std::is_same_v<TB, std::uint8_t>) return widen_fp8<kUnpatched, kFolded>(hload_s8_n(p, n));
  else return fload_as_f32_n(p, n);
}

// s = the tile's dots, B in f32 or in its stored type widened in registers (the same values, so
// the same chains).
template <std::size_t R, std::size_t C, class TB, bool kUnpatched, bool kFolded>
void tile_f32_sums(F (&s)[R][C], std::size_t k, const float* a, std::size_t lda, const TB* b, std::size_t ldb) {
  for (auto& row : s)
    for (auto& x : row) x = fzero();
  std::size_t p = 0;
  for (; p + kLanes <= k; p += kLanes) {
    if constexpr (std::is_same_v<TB, float>) {
      F bv[C];
      for (std::size_t j = 0; j < C; ++j) bv[j] = fload(b + j * ldb + p);
      for (std::size_t r = 0; r < R; ++r) {
        const F av = fload(a + r * lda + p);
        for (std::size_t j = 0; j < C; ++j) s[r][j] = fmadd(av, bv[j], s[r][j]);
      }
    } else {
      // B widened a vector at a time against R rows of A held in registers: C widened vectors at
      // once did not leave the A load folded into the FMAs, and on avx2 (12 + 4 + 1 registers)
      // one accumulator lived on the stack, its chain through a store and a load every step.
      F av[R];
      for (std::size_t r = 0; r < R; ++r) av[r] = fload(a + r * lda + p);
      for (std::size_t j = 0; j < C; ++j) {
        const F bv = widen_b<kUnpatched, kFolded>(b + j * ldb + p);
        for (std::size_t r = 0; r < R; ++r) s[r][j] = fmadd(av[r], bv, s[r][j]);
      }
    }
  }
  if (p < k) {
    const std::size_t rest = k - p;
    F bv[C];
    for (std::size_t j = 0; j < C; ++j) bv[j] = widen_b_n<kUnpatched, kFolded>(b + j * ldb + p, rest);
    for (std::size_t r = 0; r < R; ++r) {
      const F av = fload_n(a + r * lda + p, rest);
      for (std::size_t j = 0; j < C; ++j) s[r][j] = fmadd(av, bv[j], s[r][j]);
    }
  }
}

// fp8 rows are decoded without their NaN patch (two of the decode's operations per vector), and
// the tile is computed again with it where its rows hold a NaN code: the same chains, so the same
// bits. The codes are looked at in their bytes after the sums (a compare per 32 or 64 codes, the
// rows still in L1), not watched in the decoded lanes (two more operations per vector, and on
// avx2 a register a 3 x 4 tile lacked): one row of 512 against 128 fp8 rows on AMD Zen 3,
// 6.98-7.02 -> 6.65-6.68 us (the watch in the lanes, since e26d061, had taken op 5's fp8 decode
// on avx2 from 1.45-1.65 to 1.21-1.42 ms).
template <std::size_t R, std::size_t C, class TB = float, bool kFolded = false>
void tile_f32(std::size_t k, const float* a, std::size_t lda, const TB* b, std::size_t ldb, float* c,
              std::size_t ldc, bool accumulate) {
  F s[R][C];
  if constexpr (std::is_same_v<TB, std::uint8_t>) {
    tile_f32_sums<R, C, TB, true, kFolded>(s, k, a, lda, b, ldb);
    if (fp8_rows_have_nan(b, ldb, C, k)) tile_f32_sums<R, C, TB, false, kFolded>(s, k, a, lda, b, ldb);
  } else {
    tile_f32_sums<R, C, TB, false, kFolded>(s, k, a, lda, b, ldb);
  }
  write_tile<R, C>(s, c, ldc, accumulate);
}

#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
// s[r][j] += the pair dots of rows r of A and j of B over [p, end), the last step masked.
template <std::size_t R, std::size_t C>
inline void bf16_dots(F (&s)[R][C], const std::uint16_t* a, std::size_t lda, const std::uint16_t* b, std::size_t ldb,
                      std::size_t p, std::size_t end) {
  for (; p + kBf16Lanes <= end; p += kBf16Lanes) {
    B bv[C];
    for (std::size_t j = 0; j < C; ++j) bv[j] = bload(b + j * ldb + p);
    for (std::size_t r = 0; r < R; ++r) {
      const B av = bload(a + r * lda + p);
      for (std::size_t j = 0; j < C; ++j) s[r][j] = bf16_dot(s[r][j], av, bv[j]);
    }
  }
  if (p < end) {
    const std::size_t rest = end - p;
    B bv[C];
    for (std::size_t j = 0; j < C; ++j) bv[j] = bload_n(b + j * ldb + p, rest);
    for (std::size_t r = 0; r < R; ++r) {
      const B av = bload_n(a + r * lda + p, rest);
      for (std::size_t j = 0; j < C; ++j) s[r][j] = bf16_dot(s[r][j], av, bv[j]);
    }
  }
}

template <std::size_t R, std::size_t C>
void tile_bf16(std::size_t k, const std::uint16_t* a, std::size_t lda, const std::uint16_t* b, std::size_t ldb,
               float* c, std::size_t ldc, bool accumulate) {
  F s[R][C];
  for (auto& row : s)
    for (auto& x : row) x = fzero();
  bf16_dots(s, a, lda, b, ldb, 0, k);
  write_tile<R, C>(s, c, ldc, accumulate);
}

// Block-scaled weights (simd/gemm.hpp bf16_f8_block_scaled): per output, each k block's pair dots
// are summed in their own lanes, which one FMA then adds times the block's scale to the running
// lanes; a single reduction at the end. The block's sums take tile_bf16's register tile and
// the running lanes live in L1, read and written once per block (a 3 x 4 tile holding both in
// registers measured no faster, and this one shares the driver's tile shape).
template <std::size_t R, std::size_t C>
void tile_bf16_block_scaled(std::size_t k, const std::uint16_t* a, std::size_t lda, const std::uint16_t* b,
                            std::size_t ldb, const float* scales, std::size_t block, float* c, std::size_t ldc,
                            bool accumulate) {
  alignas(64) float run[R][C][kLanes];
  for (std::size_t b0 = 0, blk = 0; b0 < k; b0 += block, ++blk) {
    const std::size_t b1 = k - b0 < block ? k : b0 + block;
    F t[R][C];
    for (auto& row : t)
      for (auto& x : row) x = fzero();
    bf16_dots(t, a, lda, b, ldb, b0, b1);
    const F sv = fsplat(scales[blk]);
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t j = 0; j < C; ++j) fstore(run[r][j], fmadd(t[r][j], sv, b0 == 0 ? fzero() : fload(run[r][j])));
  }
  F s[R][C];
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t j = 0; j < C; ++j) s[r][j] = fload(run[r][j]);
  write_tile<R, C>(s, c, ldc, accumulate);
}
#endif

// A tile over A in the compute type and B in CT too, or, for the f32 tiles, in its stored type TB.
template <class CT, class TB = CT>
using TileFn = void (*)(std::size_t, const CT*, std::size_t, const TB*, std::size_t, float*, std::size_t, bool);

template <class CT, class TB, std::size_t R, std::size_t C, bool kFolded = false>
constexpr TileFn<CT, TB> tile_fn() {
  if constexpr (std::is_same_v<CT, float>) {
    return &tile_f32<R, C, TB, kFolded>;
  } else {
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
    return &tile_bf16<R, C>;
#else
    return nullptr;
#endif
  }
}

// fn[r-1][c-1] handles an r x c tile (edge tiles use the smaller instances); `make` is a lambda
// templated on <R, C> that names the instance.
template <class Fn>
struct TileTable {
  Fn fn[kMr][kNr];
};
template <class Fn, class Make, std::size_t... Is>
constexpr TileTable<Fn> make_tiles(Make make, std::index_sequence<Is...>) {
  TileTable<Fn> t{};
  ((t.fn[Is / kNr][Is % kNr] = make.template operator()<Is / kNr + 1, Is % kNr + 1>()), ...);
  return t;
}
template <class CT, class TB = CT, bool kFolded = false>
constexpr TileTable<TileFn<CT, TB>> kTiles = make_tiles<TileFn<CT, TB>>(
    []<std::size_t R, std::size_t C>() { return tile_fn<CT, TB, R, C, kFolded>(); },
    std::make_index_sequence<kMr * kNr>{});

// The plain dot tiles of the compute type, as the driver calls them; with TB, the f32 tiles over
// B in its stored type, widened in registers (kFolded: fp8 rows times 2^-8 against A times 2^8).
template <class CT, class TB = CT, bool kFolded = false>
struct DotTiles {
  void operator()(std::size_t mb, std::size_t nb, std::size_t k, const CT* a, std::size_t lda, const TB* b, std::size_t ldb,
                  float* c, std::size_t ldc, bool accumulate) const {
    kTiles<CT, TB, kFolded>.fn[mb - 1][nb - 1](k, a, lda, b, ldb, c, ldc, accumulate);
  }
};

// m rows of A times 2^8 into out (row stride k), when that is exact for every element, i.e. no
// finite element has a magnitude of 2^120 or more (inf and NaN are refused too, for brevity):
// then (a·2^8)·(v·2^-8) is the product a·v before its one rounding, and an fp8 tile can skip its
// decode's multiply by 2^8 (AMD Zen 3, one row of 512 against 128 fp8 rows: 8.3-8.8 -> 7.1-7.8 us).
inline bool fold_2p8(const float* a, std::size_t lda, std::size_t m, std::size_t k, float* out) {
  const I limit = isplat(0x7B7FFFFF), magnitude = isplat(0x7FFFFFFF);
  M big = cmpgt(isplat(0), isplat(1));  // no lane
  for (std::size_t i = 0; i < m; ++i) {
    const float* row = a + i * lda;
    float* dst = out + i * k;
    std::size_t p = 0;
    for (; p + kLanes <= k; p += kLanes) {
      const F v = fload(row + p);
      big = big | cmpgt(bits(v) & magnitude, limit);
      fstore(dst + p, v * fsplat(256.0f));
    }
    if (p < k) {
      const F v = fload_n(row + p, k - p);
      big = big | cmpgt(bits(v) & magnitude, limit);
      fstore_n(dst + p, v * fsplat(256.0f), k - p);
    }
  }
  return !any(big);
}

// ---- B in the compute type, a register tile of rows at a time ---------------------------------
// Element rows: used in place when they already are in the compute type or when the tiles widen
// them (kWiden), else converted.
template <class CT, class TB, bool kWiden = false>
struct ElementRows {
  const TB* b;
  std::size_t ldb;
  static constexpr bool kNeedsBuffer = !std::is_same_v<TB, CT> && !kWiden;
  static constexpr std::size_t kPanel = kNr;  // rows made ready at a time
  // Rows j0 .. j0 + nb of B (k elements each): where they are and their stride.
  auto rows(std::size_t j0, std::size_t nb, std::size_t k, CT* buf, std::size_t ldk) const {
    if constexpr (kNeedsBuffer) {
      for (std::size_t j = 0; j < nb; ++j) convert_row(b + (j0 + j) * ldb, buf + j * ldk, k);
      return std::pair<const CT*, std::size_t>{buf, ldk};
    } else {
      return std::pair<const TB*, std::size_t>{b + j0 * ldb, ldb};
    }
  }
  // Rows not in the compute type come from far (weights read once per block of A rows): the next
  // panel is fetched while the current one is in use, since a panel's rows lie ldb apart and the
  // hardware prefetchers see only short runs. Rows used as they are, the tiles stream themselves.
  void prefetch(std::size_t j0, std::size_t nb, std::size_t k) const {
    if constexpr (!std::is_same_v<TB, CT>)
      for (std::size_t j = 0; j < nb; ++j) {
        const char* row = reinterpret_cast<const char*>(b + (j0 + j) * ldb);
        for (std::size_t off = 0; off < k * sizeof(TB); off += 64) __builtin_prefetch(row + off, 0, 3);
      }
  }
};

// The budget of a block of A rows: half of this core's L2 as the C library reports it (the other
// half for B's panels and C), within [64 KiB, 1 MiB]; 256 KiB where it reports nothing. With
// 64 KiB, 64 rows of a 4096-wide bf16 activation were 8 blocks, each reading the whole weight
// panel again: the Llama-3-8B QKV projection at 512 tokens took 46 ms, against 38 ms with 512 KiB
// (bench/RESULTS.md). Which rows share a block changes no result: each output is one tile's chain.
inline std::size_t a_block_bytes() {
  static const std::size_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    std::size_t b = l2 > 0 ? static_cast<std::size_t>(l2) / 2 : std::size_t{256} << 10;
    if (b < (std::size_t{64} << 10)) b = std::size_t{64} << 10;
    if (b > (std::size_t{1} << 20)) b = std::size_t{1} << 20;
    return b;
  }();
  return bytes;
}

// Rows up to which bf16 rows of B are widened in the tiles' registers rather than converted into
// a panel. Measured on AMD Zen 3 (avx2, 2 threads, Llama-3-8B dense, alternating processes): at 8
// rows (three row groups) 5.65-6.06 ms against 6.39-7.22 converted; at 32 rows, once no accumulator
// of the widening tile was left on the stack, 13.3 ms against 15.4-16.0 (before that, 20.9-21.3
// against 16.1-19.3); fp8 rows, whose decode does not hide behind the FMAs, lose already at 8 rows
// (5.4-6.1 against 3.3-3.6 ms). So on avx2 every bf16 call below the panel GEMM's 64 dense rows
// widens (33-63 rows not measured apart); the other levels keep one register tile of rows, not
// measured there.
#if defined(MLAKIT_SIMD_LEVEL_avx2)
constexpr std::size_t kWidenBf16Rows = 64;
#else
constexpr std::size_t kWidenBf16Rows = kMr;
#endif

// ---- the driver: blocks of A rows x register tiles of B rows ------------------------------------
// `tile(mb, nb, k, a, lda, b, ldb, c, ldc, accumulate)` computes an mb x nb tile (mb <= kMr,
// nb <= kNr): the plain dot tiles unless told otherwise.
template <class CT, class TA, class BRows, class Tile = DotTiles<CT>>
void gemm_blocks(std::size_t m, std::size_t n, std::size_t k, const TA* a, std::size_t lda, const BRows& b, float* c,
                 std::size_t ldc, bool accumulate, const Tile& tile = Tile{}) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] = 0.0f;
    return;
  }
  const std::size_t ldk = round_up(k, 64 / sizeof(CT));  // row stride of converted operands

  // A in the compute type: used in place when it already is, else converted once.
  constexpr bool kConvertA = !std::is_same_v<TA, CT>;
  Scratch<CT> a_buf(kConvertA ? m * ldk : 0);
  const CT* ac;
  std::size_t ldac;
  if constexpr (kConvertA) {
    for (std::size_t i = 0; i < m; ++i) convert_row(a + i * lda, a_buf.get() + i * ldk, k);
    ac = a_buf.get();
    ldac = ldk;
  } else {
    ac = a;
    ldac = lda;
  }

  Scratch<CT> b_buf(BRows::kNeedsBuffer ? BRows::kPanel * ldk : 0);
  // Rows of A per block: a block of A (in the compute type) stays in L2 while every register tile
  // of B passes over it. Every block reads B's panels again (from memory, and converted or
  // expanded again), so the blocks are as few as the budget allows and of even size: 64 rows of
  // 1 KiB are one block, not 60 and 4.
  const std::size_t fit = a_block_bytes() / (ldk * sizeof(CT));
  const std::size_t mc_max = fit < kMr ? kMr : fit;
  const std::size_t blocks = (m + mc_max - 1) / mc_max;
  const std::size_t mc = round_up((m + blocks - 1) / blocks, kMr);

  for (std::size_t i0 = 0; i0 < m; i0 += mc) {
    const std::size_t i1 = i0 + mc < m ? i0 + mc : m;
    for (std::size_t j0 = 0; j0 < n; j0 += BRows::kPanel) {
      const std::size_t np = n - j0 < BRows::kPanel ? n - j0 : BRows::kPanel;
      const auto [bc, ldbc] = b.rows(j0, np, k, b_buf.get(), ldk);
      if (j0 + np < n) b.prefetch(j0 + np, n - j0 - np < BRows::kPanel ? n - j0 - np : BRows::kPanel, k);
      for (std::size_t jj = 0; jj < np; jj += kNr) {
        const std::size_t nb = np - jj < kNr ? np - jj : kNr;
        for (std::size_t i = i0; i < i1; i += kMr) {
          const std::size_t mb = i1 - i < kMr ? i1 - i : kMr;
          tile(mb, nb, k, ac + i * ldac, ldac, bc + jj * ldbc, ldbc, c + i * ldc + j0 + jj, ldc, accumulate);
        }
      }
    }
  }
}

template <class TA, class TB>
void gemm(std::size_t m, std::size_t n, std::size_t k, const TA* a, std::size_t lda, const TB* b, std::size_t ldb,
          float* c, std::size_t ldc, bool accumulate) {
  // bf16 and f8 operands are exact in bf16: on levels with a bf16 dot they run on it.
  constexpr bool kBf16 = kHasBf16Dot && !std::is_same_v<TA, float> && !std::is_same_v<TB, float>;
  using CT = std::conditional_t<kBf16, std::uint16_t, float>;
  if constexpr (std::is_same_v<CT, float> && !std::is_same_v<TB, float>) {
    // Rows of A that one register tile covers (decode tokens): B widened in the tiles' registers,
    // each element once as the buffered path does, without writing a panel and reading it back
    // (which took 3.6x the tiles' own time at one row on AMD Zen 3). The same chains. bf16 rows
    // on avx2 up to kWidenBf16Rows, widened again for each group of kMr rows: a shift per vector
    // that runs beside the FMAs.
    if (m <= kMr || (std::is_same_v<TB, std::uint16_t> && m <= kWidenBf16Rows)) {
      if constexpr (std::is_same_v<TA, float> && std::is_same_v<TB, std::uint8_t>) {
        LocalScratch<float, 4096> folded(m * k);
        if (fold_2p8(a, lda, m, k, folded.get())) {
          gemm_blocks<float>(m, n, k, folded.get(), k, ElementRows<float, TB, true>{b, ldb}, c, ldc, accumulate,
                             DotTiles<float, TB, true>{});
          return;
        }
      }
      gemm_blocks<float>(m, n, k, a, lda, ElementRows<float, TB, true>{b, ldb}, c, ldc, accumulate, DotTiles<float, TB>{});
      return;
    }
  }
  gemm_blocks<CT>(m, n, k, a, lda, ElementRows<CT, TB>{b, ldb}, c, ldc, accumulate);
}

#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
using ScaledTileFn = void (*)(std::size_t, const std::uint16_t*, std::size_t, const std::uint16_t*, std::size_t,
                              const float*, std::size_t, float*, std::size_t, bool);
constexpr TileTable<ScaledTileFn> kScaledTiles = make_tiles<ScaledTileFn>(
    []<std::size_t R, std::size_t C>() { return &tile_bf16_block_scaled<R, C>; }, std::make_index_sequence<kMr * kNr>{});

struct BlockScaledTiles {
  const float* scales;
  std::size_t block;
  void operator()(std::size_t mb, std::size_t nb, std::size_t k, const std::uint16_t* a, std::size_t lda,
                  const std::uint16_t* b, std::size_t ldb, float* c, std::size_t ldc, bool accumulate) const {
    kScaledTiles.fn[mb - 1][nb - 1](k, a, lda, b, ldb, scales, block, c, ldc, accumulate);
  }
};

// The fp8 rows widened to bf16 once per panel (exact), the activations used in place.
void gemm_bf16_f8_block_scaled(std::size_t m, std::size_t n, std::size_t k, const std::uint16_t* a, std::size_t lda,
                               const std::uint8_t* b, std::size_t ldb, const float* scales, std::size_t block,
                               float* c, std::size_t ldc, bool accumulate) {
  gemm_blocks<std::uint16_t>(m, n, k, a, lda, ElementRows<std::uint16_t, std::uint8_t>{b, ldb}, c, ldc, accumulate,
                             BlockScaledTiles{scales, block});
}
#endif
}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
