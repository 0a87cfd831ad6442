// The dot-product tile kernels, written once; compiled per level by simd/<level>/gemm.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include <unistd.h>

#include "simd/common/bf16_round.hpp"
#include "simd/common/fp8_decode_impl.hpp"
#include "simd/gemm.hpp"
#if defined(__AVX512VBMI__)
#include "simd/common/fp8_bf16_vbmi.hpp"
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

template <std::size_t R, std::size_t C>
void tile_f32(std::size_t k, const float* a, std::size_t lda, const float* b, std::size_t ldb, float* c,
              std::size_t ldc, bool accumulate) {
  F s[R][C];
  for (auto& row : s)
    for (auto& x : row) x = fzero();
  std::size_t p = 0;
  for (; p + kLanes <= k; p += kLanes) {
    F bv[C];
    for (std::size_t j = 0; j < C; ++j) bv[j] = fload(b + j * ldb + p);
    for (std::size_t r = 0; r < R; ++r) {
      const F av = fload(a + r * lda + p);
      for (std::size_t j = 0; j < C; ++j) s[r][j] = fmadd(av, bv[j], s[r][j]);
    }
  }
  if (p < k) {
    const std::size_t rest = k - p;
    F bv[C];
    for (std::size_t j = 0; j < C; ++j) bv[j] = fload_n(b + j * ldb + p, rest);
    for (std::size_t r = 0; r < R; ++r) {
      const F av = fload_n(a + r * lda + p, rest);
      for (std::size_t j = 0; j < C; ++j) s[r][j] = fmadd(av, bv[j], s[r][j]);
    }
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

template <class CT>
using TileFn = void (*)(std::size_t, const CT*, std::size_t, const CT*, std::size_t, float*, std::size_t, bool);

template <class CT, std::size_t R, std::size_t C>
constexpr TileFn<CT> tile_fn() {
  if constexpr (std::is_same_v<CT, float>) {
    return &tile_f32<R, C>;
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
template <class CT>
constexpr TileTable<TileFn<CT>> kTiles = make_tiles<TileFn<CT>>(
    []<std::size_t R, std::size_t C>() { return tile_fn<CT, R, C>(); }, std::make_index_sequence<kMr * kNr>{});

// The plain dot tiles of the compute type, as the driver calls them.
template <class CT>
struct DotTiles {
  void operator()(std::size_t mb, std::size_t nb, std::size_t k, const CT* a, std::size_t lda, const CT* b, std::size_t ldb,
                  float* c, std::size_t ldc, bool accumulate) const {
    kTiles<CT>.fn[mb - 1][nb - 1](k, a, lda, b, ldb, c, ldc, accumulate);
  }
};

// ---- B in the compute type, a register tile of rows at a time ---------------------------------
// Element rows: used in place when they already are in the compute type, else converted.
template <class CT, class TB>
struct ElementRows {
  const TB* b;
  std::size_t ldb;
  static constexpr bool kNeedsBuffer = !std::is_same_v<TB, CT>;
  static constexpr std::size_t kPanel = kNr;  // rows made ready at a time
  // Rows j0 .. j0 + nb of B (k elements each): where they are and their stride.
  std::pair<const CT*, std::size_t> rows(std::size_t j0, std::size_t nb, std::size_t k, CT* buf, std::size_t ldk) const {
    if constexpr (kNeedsBuffer) {
      for (std::size_t j = 0; j < nb; ++j) convert_row(b + (j0 + j) * ldb, buf + j * ldk, k);
      return {buf, ldk};
    } else {
      return {b + j0 * ldb, ldb};
    }
  }
  // Converted rows come from far (weights read once per block of A rows): the next panel is
  // fetched while the current one is in use, since a panel's rows lie ldb apart and the hardware
  // prefetchers see only short runs. Rows used in place are streamed by the tiles themselves.
  void prefetch(std::size_t j0, std::size_t nb, std::size_t k) const {
    if constexpr (kNeedsBuffer)
      for (std::size_t j = 0; j < nb; ++j) {
        const char* row = reinterpret_cast<const char*>(b + (j0 + j) * ldb);
        for (std::size_t off = 0; off < k * sizeof(TB); off += 64) __builtin_prefetch(row + off, 0, 3);
      }
  }
};

// Int4 columns (simd/gemm.hpp), 16 at a time: a panel is one 64-byte line of every word row, so
// each line of the codes is read once. Read in place, the rows of a chunk lie a multiple of 4 KiB
// apart (ldw words) and fall in one L1 set, which would evict a line before the next four columns
// came back for it.
constexpr std::size_t kInt4Panel = 16;

#if defined(__AVX512BW__)
// A step of a panel with AVX-512 BW: 4 word rows (32 codes per column). The rows are regrouped
// into one vector per 4 columns (dword 4i + c: row i, column c); per column a permute spreads the
// column's words over the lanes in code order and a variable shift brings each lane's code to its
// low bits, and a second permute looks the codes up in the column's table: 32 bf16 values (word
// permutes) or 2 x 16 f32 (dword permutes). The permutes read only the low bits of an index
// (5 for words, 4 for dwords), so the codes need no mask: the bf16 tables hold their 16 values
// twice, and the f32 tables are 16 wide.
namespace int4_step {

constexpr std::size_t kAhead = 16;  // word rows prefetched ahead: no hardware prefetcher follows ldw

// The step's rows r .. r + here of columns j0 .. j0 + 16 (those in `cols`), regrouped: x[q] holds
// columns 4q .. 4q + 3; missing rows and columns are zero.
inline void load(const Int4Columns& b, std::size_t j0, __mmask16 cols, std::size_t r, std::size_t here,
                 std::size_t nrows, __m512i (&x)[4]) {
  __m512i row[4];
  for (std::size_t i = 0; i < 4; ++i)
    row[i] = i < here ? _mm512_maskz_loadu_epi32(cols, b.words + (r + i) * b.ldw + j0) : _mm512_setzero_si512();
  if (r + kAhead + 4 <= nrows)
    for (std::size_t i = 0; i < 4; ++i)
      _mm_prefetch(reinterpret_cast<const char*>(b.words + (r + kAhead + i) * b.ldw + j0), _MM_HINT_T0);
  const __m512i t0 = _mm512_shuffle_i64x2(row[0], row[1], 0x44), t1 = _mm512_shuffle_i64x2(row[0], row[1], 0xEE);
  const __m512i t2 = _mm512_shuffle_i64x2(row[2], row[3], 0x44), t3 = _mm512_shuffle_i64x2(row[2], row[3], 0xEE);
  x[0] = _mm512_shuffle_i64x2(t0, t2, 0x88);
  x[1] = _mm512_shuffle_i64x2(t0, t2, 0xDD);
  x[2] = _mm512_shuffle_i64x2(t1, t3, 0x88);
  x[3] = _mm512_shuffle_i64x2(t1, t3, 0xDD);
}

// Column c's 32 codes in 16-bit lanes: lane t is code t % 8 of row t / 8, i.e. 16-bit half
// (t % 8) / 4 of dword 4 (t / 8) + c, shifted by 4 (t % 4).
inline __m512i word_codes(__m512i x, std::size_t c) {
  alignas(64) static constexpr std::uint16_t kSpread[32] = {0, 0, 0, 0, 1,  1,  1,  1,  8,  8,  8,  8,  9,  9,  9,  9,
                                                            16, 16, 16, 16, 17, 17, 17, 17, 24, 24, 24, 24, 25, 25, 25, 25};
  alignas(64) static constexpr std::uint16_t kShift[32] = {0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12,
                                                           0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12};
  const __m512i idx = _mm512_add_epi16(_mm512_load_si512(kSpread), _mm512_set1_epi16(static_cast<short>(2 * c)));
  return _mm512_srlv_epi16(_mm512_permutexvar_epi16(idx, x), _mm512_load_si512(kShift));
}

// Column c's 16 codes of half step h in dword lanes: lane t is code t % 8 of row 2h + t / 8.
inline __m512i dword_codes(__m512i x, std::size_t h, std::size_t c) {
  alignas(64) static constexpr std::int32_t kSpread[16] = {0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4};
  alignas(64) static constexpr std::int32_t kShift[16] = {0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28};
  const __m512i idx = _mm512_add_epi32(_mm512_load_si512(kSpread), _mm512_set1_epi32(static_cast<int>(8 * h + c)));
  return _mm512_srlv_epi32(_mm512_permutexvar_epi32(idx, x), _mm512_load_si512(kShift));
}

// Group g's tables of np columns as bf16, each twice. Stored as whole vectors, so that the
// lookups' vector loads are forwarded from these stores.
inline void bf16_tables(const float* tab, std::size_t groups, std::size_t g, std::size_t np, std::uint16_t (*table)[32]) {
  for (std::size_t j = 0; j < np; ++j) {
    const __m512i t = _mm512_srli_epi32(_mm512_loadu_si512(tab + (j * groups + g) * 16), 16);
    _mm512_store_si512(table[j], _mm512_broadcast_i64x4(_mm512_cvtepi32_epi16(t)));
  }
}

}  // namespace int4_step
#endif

// Rows j0 .. j0 + np (np <= kInt4Panel) of B, expanded into buf (row stride ldk).
template <class CT>
void expand_int4(const Int4Columns& b, std::size_t groups, std::size_t j0, std::size_t np, std::size_t k, CT* buf,
                 std::size_t ldk) {
  const std::size_t nrows = k / 8;
  std::size_t r = 0;
#if defined(__AVX512BW__)
  const __mmask16 cols = static_cast<__mmask16>((1u << np) - 1u);
  const std::size_t quads = (np + 3) / 4;
  const float* tab = b.tables + j0 * groups * 16;
  if constexpr (std::is_same_v<CT, std::uint16_t>) {
    alignas(64) std::uint16_t table[kInt4Panel][32];
    std::size_t loaded = ~std::size_t{0};
    for (; r < nrows; r += 4) {
      const std::size_t here = nrows - r < 4 ? nrows - r : 4;
      const std::size_t g = 8 * r / b.group_size;
      if (g != loaded) int4_step::bf16_tables(tab, groups, g, np, table);
      loaded = g;
      __m512i x[4];
      int4_step::load(b, j0, cols, r, here, nrows, x);
      for (std::size_t q = 0; q < quads; ++q)
        for (std::size_t c = 0; c < 4 && 4 * q + c < np; ++c) {
          const std::size_t j = 4 * q + c;
          const __m512i v = _mm512_permutexvar_epi16(int4_step::word_codes(x[q], c), _mm512_load_si512(table[j]));
          std::uint16_t* dst = buf + j * ldk + 8 * r;
          if (here == 4) _mm512_storeu_si512(dst, v);
          else _mm512_mask_storeu_epi16(dst, static_cast<__mmask32>((1u << (8 * here)) - 1u), v);
        }
    }
  } else {
    for (; r < nrows; r += 4) {
      const std::size_t here = nrows - r < 4 ? nrows - r : 4;
      const std::size_t g = 8 * r / b.group_size;
      __m512i x[4];
      int4_step::load(b, j0, cols, r, here, nrows, x);
      for (std::size_t q = 0; q < quads; ++q)
        for (std::size_t c = 0; c < 4 && 4 * q + c < np; ++c) {
          const std::size_t j = 4 * q + c;
          const __m512 table = _mm512_loadu_ps(tab + (j * groups + g) * 16);
          for (std::size_t h = 0; 2 * h < here; ++h) {
            const __m512 v = _mm512_permutexvar_ps(int4_step::dword_codes(x[q], h, c), table);
            float* dst = buf + j * ldk + 8 * (r + 2 * h);
            if (here >= 2 * h + 2) _mm512_storeu_ps(dst, v);
            else _mm512_mask_storeu_ps(dst, 0x00FF, v);
          }
        }
    }
  }
#elif defined(__AVX2__)
  // A word (8 codes) at a time: a variable shift and a mask put one code per lane, and two 8-entry
  // permutes of the f32 table with a blend on the code's bit 3 look them up.
  if constexpr (std::is_same_v<CT, float>) {
    const __m256i shift = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), mask = _mm256_set1_epi32(0xF);
    for (; r < nrows; ++r)
      for (std::size_t j = 0; j < np; ++j) {
        const float* t = b.tables + ((j0 + j) * groups + 8 * r / b.group_size) * 16;
        const __m256i code = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(b.words[r * b.ldw + j0 + j])), shift), mask);
        const __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(t), code);
        const __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(t + 8), code);
        _mm256_storeu_ps(buf + j * ldk + 8 * r, _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(code, 28))));
      }
  }
#endif
  // Row by row: a column's words lie ldw apart, in one L1 set (see kInt4Panel).
  for (std::size_t rr = r; rr < nrows; ++rr) {
    for (std::size_t j = 0; j < np; ++j) {
      const std::uint32_t w = b.words[rr * b.ldw + j0 + j];
      const float* t = b.tables + ((j0 + j) * groups + 8 * rr / b.group_size) * 16;
      for (std::size_t i = 0; i < 8; ++i) {
        const float v = t[(w >> (4 * i)) & 0xFu];
        if constexpr (std::is_same_v<CT, float>) {
          buf[j * ldk + 8 * rr + i] = v;
        } else {
          std::uint32_t u;
          std::memcpy(&u, &v, sizeof u);
          buf[j * ldk + 8 * rr + i] = static_cast<std::uint16_t>(u >> 16);
        }
      }
    }
  }
}

template <class CT>
struct Int4Rows {
  const Int4Columns& b;
  std::size_t groups;
  static constexpr bool kNeedsBuffer = true;
  static constexpr std::size_t kPanel = kInt4Panel;
  std::pair<const CT*, std::size_t> rows(std::size_t j0, std::size_t np, std::size_t k, CT* buf, std::size_t ldk) const {
    expand_int4(b, groups, j0, np, k, buf, ldk);
    return {buf, ldk};
  }
  void prefetch(std::size_t, std::size_t, std::size_t) const {}  // expand_int4 fetches ahead itself
};

#if defined(__AVX512BW__)
// One row of A against a full panel of int4 columns, the codes expanded into registers and used
// at once (a decode token: expanding into a buffer and reading it back would cost as much as the
// dots). Per column the same chain as tile_bf16 / tile_f32 over the expanded rows: the same
// steps in the same order, the last one on masked vectors (zero beyond k in A and in B), then
// write_tile's reduction; so the outputs are bitwise those of the buffered path.
template <class CT>
void int4_row_panel(std::size_t k, const CT* a, const Int4Columns& b, std::size_t groups, std::size_t j0, float* c,
                    bool accumulate) {
  constexpr std::size_t kP = kInt4Panel;
  const std::size_t nrows = k / 8;
  const float* tab = b.tables + j0 * groups * 16;
  F acc[kP];
#pragma GCC unroll 16
  for (std::size_t j = 0; j < kP; ++j) acc[j] = fzero();
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
  alignas(64) std::uint16_t table[kP][32];
  std::size_t loaded = ~std::size_t{0};
#endif
  for (std::size_t r = 0; r < nrows; r += 4) {
    const std::size_t here = nrows - r < 4 ? nrows - r : 4;
    const std::size_t g = 8 * r / b.group_size;
    __m512i x[4];
    int4_step::load(b, j0, 0xFFFF, r, here, nrows, x);
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
    if constexpr (std::is_same_v<CT, std::uint16_t>) {
      if (g != loaded) int4_step::bf16_tables(tab, groups, g, kP, table);
      loaded = g;
      const __mmask32 valid = here == 4 ? ~__mmask32{0} : static_cast<__mmask32>((1u << (8 * here)) - 1u);
      const B av = here == 4 ? bload(a + 8 * r) : bload_n(a + 8 * r, 8 * here);
#pragma GCC unroll 16
      for (std::size_t j = 0; j < kP; ++j) {
        const __m512i code = int4_step::word_codes(x[j / 4], j % 4);
        acc[j] = bf16_dot(acc[j], av, B{_mm512_maskz_permutexvar_epi16(valid, code, _mm512_load_si512(table[j]))});
      }
    } else
#endif
    {
      for (std::size_t h = 0; 2 * h < here; ++h) {
        const bool full = here >= 2 * h + 2;
        const F av = full ? fload(a + 8 * (r + 2 * h)) : fload_n(a + 8 * (r + 2 * h), 8);
#pragma GCC unroll 16
        for (std::size_t j = 0; j < kP; ++j) {
          const __m512i code = int4_step::dword_codes(x[j / 4], h, j % 4);
          const __m512 table = _mm512_loadu_ps(tab + (j * groups + g) * 16);
          acc[j] = fmadd(av, F{_mm512_maskz_permutexvar_ps(full ? 0xFFFF : 0x00FF, code, table)}, acc[j]);
        }
      }
    }
  }
  for (std::size_t q = 0; q < kP / 4; ++q) {
    float out[4];
    reduce_add4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3], out);
    for (std::size_t j = 0; j < 4; ++j) c[4 * q + j] = accumulate ? c[4 * q + j] + out[j] : out[j];
  }
}
#endif

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

// Int4 columns hold bf16 values: the compute type is bf16_bf16's (TA bf16) or f32_f32's (TA f32).
template <class TA>
void gemm_int4(std::size_t m, std::size_t n, std::size_t k, const TA* a, std::size_t lda, const Int4Columns& b,
               float* c, std::size_t ldc, bool accumulate) {
  constexpr bool kBf16 = kHasBf16Dot && !std::is_same_v<TA, float>;
  using CT = std::conditional_t<kBf16, std::uint16_t, float>;
  const std::size_t groups = (k + b.group_size - 1) / b.group_size;
#if defined(__AVX512BW__)
  if (m == 1 && n >= kInt4Panel && k > 0) {
    // A decode row: full panels straight from the codes into the dot chains, the rest buffered.
    Scratch<CT> a_buf(std::is_same_v<TA, CT> ? 0 : k);
    const CT* ac;
    if constexpr (std::is_same_v<TA, CT>) {
      ac = a;
    } else {
      convert_row(a, a_buf.get(), k);
      ac = a_buf.get();
    }
    const std::size_t full = n / kInt4Panel * kInt4Panel;
    for (std::size_t j0 = 0; j0 < full; j0 += kInt4Panel) int4_row_panel<CT>(k, ac, b, groups, j0, c + j0, accumulate);
    if (full == n) return;
    const Int4Columns rest{b.words + full, b.ldw, b.tables + full * groups * 16, b.group_size};
    gemm_blocks<CT>(m, n - full, k, a, lda, Int4Rows<CT>{rest, groups}, c + full, ldc, accumulate);
    return;
  }
#endif
  gemm_blocks<CT>(m, n, k, a, lda, Int4Rows<CT>{b, groups}, c, ldc, accumulate);
}

// Value tables of int4 columns, one vector of codes at a time per column.
void int4_tables(const std::uint16_t* scales, bool scales_f16, const std::uint32_t* zero_words, std::size_t n,
                 float* tables, std::size_t stride) {
  static_assert(16 % kLanes == 0, "a table is whole vectors");
  alignas(64) static constexpr float kCodes[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  for (std::size_t c = 0; c < n; ++c) {
    // The level's f16 converter is exact (subnormals included, whatever MXCSR says).
    const F s = scales_f16 ? f16_to_f32(hsplat(static_cast<std::int16_t>(scales[c])))
                           : floats(isplat(static_cast<std::int32_t>(std::uint32_t{scales[c]} << 16)));
    const float z = zero_words ? static_cast<float>((zero_words[c / 8] >> (4 * (c % 8))) & 0xFu) : 8.0f;
    for (std::size_t q = 0; q < 16; q += kLanes) {
      const I u = bits((fload(kCodes + q) - fsplat(z)) * s);
      fstore(tables + c * stride + q, floats(shl<16>(bf16_round_bits(u))));
    }
  }
}

// ---- attention over gathered rows: P·V, the scaled row maximum, the shifted exponentials ------
// NN register tile: kNnR rows of A (each element broadcast) x kNnC vectors of B row p; the
// accumulators, the broadcasts and one B vector fit the register file (avx512 24+6+1 of 32,
// avx2 12+3+1 of 16; 3 x 3 was 10-15 % slower here).
#if defined(MLAKIT_SIMD_LEVEL_generic)
constexpr std::size_t kNnR = 2, kNnC = 2;
#elif defined(MLAKIT_SIMD_LEVEL_avx2)
constexpr std::size_t kNnR = 3, kNnC = 4;
#else
constexpr std::size_t kNnR = 6, kNnC = 4;
#endif

// One step of an NN tile: an f32 step takes one row of B (f32, or bf16 widened exactly) and a
// broadcast element of A; a bf16 step (levels with the pair dot) a zipped row pair and a broadcast
// pair of A, whose odd last element goes alone (its neighbour is not part of A).
template <class TA, class TB>
struct NnStep;
struct NnStepF32 {
  using V = F;
  static constexpr std::size_t kRows = 1;
  static V a_at(const float* a, std::size_t p, std::size_t) { return fsplat(a[p]); }
  static V b_at(const float* bp, std::size_t j, std::size_t lanes) {
    return lanes == kLanes ? fload(bp + j * kLanes) : fload_n(bp + j * kLanes, lanes);
  }
  static V b_at(const std::uint16_t* bp, std::size_t j, std::size_t lanes) {
    return lanes == kLanes ? fload_bf16(bp + j * kLanes) : fload_bf16_n(bp + j * kLanes, lanes);
  }
  static F mac(F acc, V a, V b) { return fmadd(a, b, acc); }
};
template <>
struct NnStep<float, float> : NnStepF32 {};
template <>
struct NnStep<float, std::uint16_t> : NnStepF32 {};
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
template <>
struct NnStep<std::uint16_t, std::uint16_t> {
  using V = B;
  static constexpr std::size_t kRows = 2;
  static V a_at(const std::uint16_t* a, std::size_t p, std::size_t k) {
    if (p + 1 < k) return bsplat_pair(a + p);
    const std::uint16_t pair[2] = {a[p], 0};
    return bsplat_pair(pair);
  }
  static V b_at(const std::uint16_t* bp, std::size_t j, std::size_t lanes) {
    return lanes == kLanes ? bload(bp + j * kBf16Lanes) : bload_n(bp + j * kBf16Lanes, 2 * lanes);
  }
  static F mac(F acc, V a, V b) { return bf16_dot(acc, a, b); }
};
#endif

// Where the sums go: C (+)= sum, or, with row and column scales, C (+)= (rs[i] * cs[j]) * sum (one
// product, then one fused multiply-add per output).
struct NnOut {
  float* c;
  std::size_t ldc;
  bool accumulate;
  const float* rs = nullptr;  // the tile's rows' scales, or null
  const float* cs = nullptr;  // the tile's columns' scales (with rs)
};

// Columns [0, (C - 1) * kLanes + last) of the tile; last = kLanes unless the tile ends the row.
template <class TA, class TB, std::size_t R, std::size_t C>
void tile_nn(std::size_t k, const TA* a, std::size_t lda, const TB* b, std::size_t ldb, NnOut out, std::size_t last) {
  using S = NnStep<TA, TB>;
  const auto load_n = [&](const float* p, std::size_t j) {
    return j + 1 < C || last == kLanes ? fload(p + j * kLanes) : fload_n(p + j * kLanes, last);
  };
  // A scaled sum starts from zero: the scale applies to the tile's sum alone.
  const bool chain_from_c = out.accumulate && !out.rs;
  // Every loop over the tile unrolled: otherwise GCC keeps the accumulators in memory.
  F s[R][C];
#pragma GCC unroll 8
  for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (std::size_t j = 0; j < C; ++j) s[r][j] = chain_from_c ? load_n(out.c + r * out.ldc, j) : fzero();
  for (std::size_t p = 0, q = 0; p < k; p += S::kRows, ++q) {
    const TB* bp = b + q * ldb;
    typename S::V av[R];
#pragma GCC unroll 8
    for (std::size_t r = 0; r < R; ++r) av[r] = S::a_at(a + r * lda, p, k);
#pragma GCC unroll 8
    for (std::size_t j = 0; j < C; ++j) {
      const typename S::V bv = S::b_at(bp, j, j + 1 < C ? kLanes : last);
#pragma GCC unroll 8
      for (std::size_t r = 0; r < R; ++r) s[r][j] = S::mac(s[r][j], av[r], bv);
    }
  }
  if (out.rs) {
    F cs[C];
#pragma GCC unroll 8
    for (std::size_t j = 0; j < C; ++j) cs[j] = load_n(out.cs, j);
#pragma GCC unroll 8
    for (std::size_t r = 0; r < R; ++r) {
      const F rs = fsplat(out.rs[r]);
#pragma GCC unroll 8
      for (std::size_t j = 0; j < C; ++j)
        s[r][j] = out.accumulate ? fmadd(rs * cs[j], s[r][j], load_n(out.c + r * out.ldc, j)) : rs * cs[j] * s[r][j];
    }
  }
#pragma GCC unroll 8
  for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (std::size_t j = 0; j < C; ++j) {
      float* cp = out.c + r * out.ldc + j * kLanes;
      if (j + 1 < C || last == kLanes) fstore(cp, s[r][j]);
      else fstore_n(cp, s[r][j], last);
    }
}

template <class TA, class TB>
using NnFn = void (*)(std::size_t, const TA*, std::size_t, const TB*, std::size_t, NnOut, std::size_t);
template <class TA, class TB>
struct NnTable {
  NnFn<TA, TB> fn[kNnR][kNnC];
};
template <class TA, class TB, std::size_t... Is>
constexpr NnTable<TA, TB> make_nn_tiles(std::index_sequence<Is...>) {
  NnTable<TA, TB> t{};
  ((t.fn[Is / kNnC][Is % kNnC] = &tile_nn<TA, TB, Is / kNnC + 1, Is % kNnC + 1>), ...);
  return t;
}
template <class TA, class TB>
constexpr NnTable<TA, TB> kNnTiles = make_nn_tiles<TA, TB>(std::make_index_sequence<kNnR * kNnC>{});

// f32_nn (f32 x f32), f32_bf16_nn (f32 x bf16) and bf16_nn (bf16 x bf16, B zipped), plain or
// scaled. Column blocks of kNnC vectors outside, row tiles inside: the block's slice of B stays in
// L1 while every row of A passes over it.
template <class TA, class TB>
void nn_blocks(std::size_t m, std::size_t n, std::size_t k, const TA* a, std::size_t lda, const TB* b,
               std::size_t ldb, NnOut out) {
  if (m == 0 || n == 0) return;
  const std::size_t vecs = (n + kLanes - 1) / kLanes, last = n - (vecs - 1) * kLanes;
  for (std::size_t v0 = 0; v0 < vecs; v0 += kNnC) {
    const std::size_t cb = vecs - v0 < kNnC ? vecs - v0 : kNnC;
    const std::size_t tail = v0 + cb == vecs ? last : kLanes;
    for (std::size_t i = 0; i < m; i += kNnR) {
      const std::size_t rb = m - i < kNnR ? m - i : kNnR;
      NnOut tile = out;
      tile.c = out.c + i * out.ldc + v0 * kLanes;
      if (out.rs) {
        tile.rs = out.rs + i;
        tile.cs = out.cs + v0 * kLanes;
      }
      kNnTiles<TA, TB>.fn[rb - 1][cb - 1](k, a + i * lda, lda, b + NnStep<TA, TB>::kRows * v0 * kLanes, ldb, tile,
                                          tail);
    }
  }
}

template <class TA, class TB>
void gemm_nn(std::size_t m, std::size_t n, std::size_t k, const TA* a, std::size_t lda, const TB* b,
             std::size_t ldb, float* c, std::size_t ldc, bool accumulate) {
  nn_blocks<TA, TB>(m, n, k, a, lda, b, ldb, NnOut{c, ldc, accumulate});
}

// f32_nn_scaled and bf16_nn_scaled.
template <class T>
void gemm_nn_scaled(std::size_t m, std::size_t n, std::size_t k, const T* a, std::size_t lda, const T* b,
                    std::size_t ldb, const float* rs, const float* cs, float* c, std::size_t ldc, bool accumulate) {
  nn_blocks<T, T>(m, n, k, a, lda, b, ldb, NnOut{c, ldc, accumulate, rs, cs});
}

// Column j of kLanes rows of x as the lanes of a vector (rows past the last valid one read row 0
// again): a gather where the level has one.
class ColumnReader {
 public:
  ColumnReader(const float* x, std::size_t ldx, std::size_t lanes) : x_(reinterpret_cast<const std::uint32_t*>(x)) {
    for (std::size_t i = 0; i < kLanes; ++i) offsets_[i] = static_cast<std::int32_t>((i < lanes ? i : 0) * ldx);
    idx_ = iload(offsets_);
  }
  I operator()(std::size_t j) const {
#if defined(MLAKIT_SIMD_LEVEL_generic)
    alignas(64) std::int32_t v[kLanes];
    for (std::size_t i = 0; i < kLanes; ++i) std::memcpy(&v[i], x_ + offsets_[i] + j, sizeof v[i]);
    return iload(v);
#else
    return igather(x_ + j, idx_);
#endif
  }

 private:
  const std::uint32_t* x_;
  alignas(64) std::int32_t offsets_[kLanes];
  I idx_;
};

// f(column reader, first row, rows in this vector) for each kLanes rows of x.
template <class Fn>
void for_row_lanes(const float* x, std::size_t ldx, std::size_t rows, Fn&& f) {
  for (std::size_t i0 = 0; i0 < rows; i0 += kLanes) {
    const std::size_t lanes = rows - i0 < kLanes ? rows - i0 : kLanes;
    f(ColumnReader(x + i0 * ldx, ldx, lanes), i0, lanes);
  }
}

void transpose_bf16(const float* x, std::size_t ldx, std::size_t rows, std::size_t n, std::uint16_t* dst,
                    std::size_t ldd) {
  for_row_lanes(x, ldx, rows, [&](const ColumnReader& col, std::size_t i0, std::size_t lanes) {
    for (std::size_t j = 0; j < n; ++j) {
      const I r = bf16_round_bits(col(j));
      if (lanes == kLanes) istore_u16(dst + j * ldd + i0, r);
      else istore_u16_n(dst + j * ldd + i0, r, lanes);
    }
  });
}

// To nearest even, as mlakit::f32_to_bf16.
void round_bf16(const float* x, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) istore_u16(dst + i, bf16_round_bits(bits(fload(x + i))));
  if (i < n) istore_u16_n(dst + i, bf16_round_bits(bits(fload_n(x + i, n - i))), n - i);
}

alignas(64) constexpr std::int32_t kLaneIndex[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
inline M first_lanes(std::size_t n) { return cmpgt(isplat(static_cast<std::int32_t>(n)), iload(kLaneIndex)); }

float scale_max(float* x, const float* f, float c, std::size_t n) {
  const F cs = fsplat(c);
  F mx = fsplat(-__builtin_inff());
  bool nan = false;
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    F v = fload(x + i);
    if (f) v = v * fload(f + i);
    v = v * cs;
    fstore(x + i, v);
    nan = nan || any(is_nan(v));
    mx = fmax(mx, v);
  }
  if (i < n) {
    const std::size_t rest = n - i;
    F v = fload_n(x + i, rest);
    if (f) v = v * fload_n(f + i, rest);
    v = v * cs;
    fstore_n(x + i, v, rest);
    nan = nan || any(is_nan(v));
    mx = fmax(mx, select(first_lanes(rest), v, fsplat(-__builtin_inff())));
  }
  if (nan) return __builtin_nanf("");
  alignas(64) float lanes[kLanes];
  fstore(lanes, mx);
  float best = lanes[0];
  for (std::size_t l = 1; l < kLanes; ++l) best = lanes[l] > best ? lanes[l] : best;
  return best;
}

// exp(x) for x <= 0 or NaN. x = n ln2 + r with n = nearest(x log2 e) (the 1.5 * 2^23 rounding
// constant) and r reduced in two steps (the high part of ln 2 has few bits, so n times it is
// exact); exp(r) by the degree-7 polynomial of the Cephes expf (about 1 ulp); 2^n added to the
// exponent field. Below -86.5, n could leave the normal range: those flush to 0.
inline F exp_nonpositive(F x) {
  const F lo = fsplat(-86.5f);
  const F xc = fmax(x, lo);
  const F t = fmadd(xc, fsplat(1.44269504088896341f), fsplat(12582912.0f));
  const F nf = t - fsplat(12582912.0f);
  const I ni = bits(t) + isplat(-0x4B400000);
  F r = fmadd(nf, fsplat(-0.693359375f), xc);
  r = fmadd(nf, fsplat(2.12194440e-4f), r);
  F p = fsplat(1.9875691500e-4f);
  p = fmadd(p, r, fsplat(1.3981999507e-3f));
  p = fmadd(p, r, fsplat(8.3334519073e-3f));
  p = fmadd(p, r, fsplat(4.1665795894e-2f));
  p = fmadd(p, r, fsplat(1.6666665459e-1f));
  p = fmadd(p, r, fsplat(5.0000001201e-1f));
  const F y = fmadd(p, r * r, r) + fsplat(1.0f);
  const F e = floats(bits(y) + shl<23>(ni));
  return select(is_nan(x), x, select(flt(x, lo), fzero(), e));
}

float exp_sum(float* x, float m, std::size_t n) {
  const F ms = fsplat(m);
  F acc = fzero();
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const F e = exp_nonpositive(fload(x + i) - ms);
    fstore(x + i, e);
    acc = acc + e;
  }
  if (i < n) {
    const std::size_t rest = n - i;
    const F e = select(first_lanes(rest), exp_nonpositive(fload_n(x + i, rest) - ms), fzero());
    fstore_n(x + i, e, rest);
    acc = acc + e;
  }
  return reduce_add(acc);
}

#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
void zip_rows_bf16(const std::uint16_t* r0, const std::uint16_t* r1, std::size_t n, std::uint16_t* dst) {
  std::size_t j = 0;
  B lo, hi;
  for (; j + kBf16Lanes <= n; j += kBf16Lanes) {
    bzip_words(bload(r0 + j), r1 ? bload(r1 + j) : bzero(), &lo, &hi);
    bstore(dst + 2 * j, lo);
    bstore(dst + 2 * j + kBf16Lanes, hi);
  }
  if (j < n) {
    const std::size_t rest = n - j;  // < 32 words of each row: 2 * rest < 64 words out
    bzip_words(bload_n(r0 + j, rest), r1 ? bload_n(r1 + j, rest) : bzero(), &lo, &hi);
    if (2 * rest <= kBf16Lanes) {
      if (2 * rest == kBf16Lanes) bstore(dst + 2 * j, lo);
      else bstore_n(dst + 2 * j, lo, 2 * rest);
    } else {
      bstore(dst + 2 * j, lo);
      bstore_n(dst + 2 * j + kBf16Lanes, hi, 2 * rest - kBf16Lanes);
    }
  }
}

void pack_pairs_bf16(const float* x, std::size_t ldx, std::size_t rows, std::size_t n, std::uint16_t* dst,
                     std::size_t ldd) {
  auto* out = reinterpret_cast<std::int32_t*>(dst);
  for_row_lanes(x, ldx, rows, [&](const ColumnReader& col, std::size_t i0, std::size_t lanes) {
    for (std::size_t p = 0; 2 * p < n; ++p) {
      const I lo = bf16_round_bits(col(2 * p));
      const I hi = 2 * p + 1 < n ? shl<16>(bf16_round_bits(col(2 * p + 1))) : isplat(0);
      if (lanes == kLanes) istore(out + p * ldd + i0, lo | hi);
      else istore_n(out + p * ldd + i0, lo | hi, lanes);
    }
  });
}

void to_bf16_scaled(const float* x, const float* f, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + kBf16Lanes <= n; i += kBf16Lanes) {
    F a = fload(x + i), b = fload(x + i + kLanes);
    if (f) {
      a = a * fload(f + i);
      b = b * fload(f + i + kLanes);
    }
    bstore(dst + i, bf16_from_f32(a, b));
  }
  for (; i < n; i += kLanes) {
    const std::size_t rest = n - i < kLanes ? n - i : kLanes;
    F a = fload_n(x + i, rest);
    if (f) a = a * fload_n(f + i, rest);
    bstore_n(dst + i, bf16_from_f32(a, fzero()), rest);
  }
}
#endif

constexpr GemmKernels make_gemm_kernels() {
  return GemmKernels{kLevelName,
                     static_cast<unsigned>(kMr),
                     static_cast<unsigned>(kNr),
                     kHasBf16Dot,
                     &gemm<float, float>,
                     &gemm<std::uint16_t, std::uint16_t>,
                     &gemm<std::uint8_t, std::uint8_t>,
                     &gemm<float, std::uint8_t>,
                     &gemm<std::uint16_t, std::uint8_t>,
                     &gemm_int4<std::uint16_t>,
                     &gemm_int4<float>,
                     &int4_tables,
                     &gemm_nn<float, float>,
                     &gemm_nn<float, std::uint16_t>,
                     &round_bf16,
                     &gemm_nn_scaled<float>,
                     &transpose_bf16,
                     &scale_max,
                     &exp_sum,
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
                     &gemm_nn<std::uint16_t, std::uint16_t>,
                     &zip_rows_bf16,
                     &to_bf16_scaled,
                     &gemm_nn_scaled<std::uint16_t>,
                     &pack_pairs_bf16,
                     &gemm_bf16_f8_block_scaled};
#else
                     nullptr,
                     nullptr,
                     nullptr,
                     nullptr,
                     nullptr,
                     nullptr};
#endif
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
