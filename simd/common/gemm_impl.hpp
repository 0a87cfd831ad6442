// The dot-product tile kernels, written once; compiled per level by simd/<level>/gemm.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include "simd/common/fp8_decode_impl.hpp"
#include "simd/gemm.hpp"

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
inline void convert_row(const std::uint8_t* s, float* d, std::size_t k) { fp8_to_f32(s, d, k); }
inline void convert_row(const std::uint16_t* s, std::uint16_t* d, std::size_t k) { std::memcpy(d, s, k * 2); }
inline void convert_row(const std::uint8_t* s, std::uint16_t* d, std::size_t k) { fp8_to_bf16(s, d, k); }

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
template <std::size_t R, std::size_t C>
void tile_bf16(std::size_t k, const std::uint16_t* a, std::size_t lda, const std::uint16_t* b, std::size_t ldb,
               float* c, std::size_t ldc, bool accumulate) {
  F s[R][C];
  for (auto& row : s)
    for (auto& x : row) x = fzero();
  std::size_t p = 0;
  for (; p + kBf16Lanes <= k; p += kBf16Lanes) {
    B bv[C];
    for (std::size_t j = 0; j < C; ++j) bv[j] = bload(b + j * ldb + p);
    for (std::size_t r = 0; r < R; ++r) {
      const B av = bload(a + r * lda + p);
      for (std::size_t j = 0; j < C; ++j) s[r][j] = bf16_dot(s[r][j], av, bv[j]);
    }
  }
  if (p < k) {
    const std::size_t rest = k - p;
    B bv[C];
    for (std::size_t j = 0; j < C; ++j) bv[j] = bload_n(b + j * ldb + p, rest);
    for (std::size_t r = 0; r < R; ++r) {
      const B av = bload_n(a + r * lda + p, rest);
      for (std::size_t j = 0; j < C; ++j) s[r][j] = bf16_dot(s[r][j], av, bv[j]);
    }
  }
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

// tiles[r-1][c-1] handles an r x c tile (edge tiles use the smaller instances).
template <class CT, std::size_t... Rs>
struct TileTable {
  TileFn<CT> fn[kMr][kNr];
};
template <class CT, std::size_t... Is>
constexpr TileTable<CT> make_tiles(std::index_sequence<Is...>) {
  TileTable<CT> t{};
  ((t.fn[Is / kNr][Is % kNr] = tile_fn<CT, Is / kNr + 1, Is % kNr + 1>()), ...);
  return t;
}
template <class CT>
constexpr TileTable<CT> kTiles = make_tiles<CT>(std::make_index_sequence<kMr * kNr>{});

// ---- the driver: blocks of A rows x register tiles of B rows ------------------------------------
template <class TA, class TB>
void gemm(std::size_t m, std::size_t n, std::size_t k, const TA* a, std::size_t lda, const TB* b, std::size_t ldb,
          float* c, std::size_t ldc, bool accumulate) {
  // bf16 and f8 operands are exact in bf16: on levels with a bf16 dot they run on it.
  constexpr bool kBf16 = kHasBf16Dot && !std::is_same_v<TA, float> && !std::is_same_v<TB, float>;
  using CT = std::conditional_t<kBf16, std::uint16_t, float>;
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

  constexpr bool kConvertB = !std::is_same_v<TB, CT>;
  Scratch<CT> b_buf(kConvertB ? kNr * ldk : 0);
  // Rows of A per block: keep a block of A (in the compute type) within ~64 KiB so it stays in L2
  // while every register tile of B passes over it.
  std::size_t mc = (64 * 1024) / (ldk * sizeof(CT));
  mc = mc < kMr ? kMr : mc / kMr * kMr;

  const TileTable<CT>& tiles = kTiles<CT>;
  for (std::size_t i0 = 0; i0 < m; i0 += mc) {
    const std::size_t i1 = i0 + mc < m ? i0 + mc : m;
    for (std::size_t j0 = 0; j0 < n; j0 += kNr) {
      const std::size_t nb = n - j0 < kNr ? n - j0 : kNr;
      const CT* bc;
      std::size_t ldbc;
      if constexpr (kConvertB) {
        for (std::size_t j = 0; j < nb; ++j) convert_row(b + (j0 + j) * ldb, b_buf.get() + j * ldk, k);
        bc = b_buf.get();
        ldbc = ldk;
      } else {
        bc = b + j0 * ldb;
        ldbc = ldb;
      }
      for (std::size_t i = i0; i < i1; i += kMr) {
        const std::size_t mb = i1 - i < kMr ? i1 - i : kMr;
        tiles.fn[mb - 1][nb - 1](k, ac + i * ldac, ldac, bc, ldbc, c + i * ldc + j0, ldc, accumulate);
      }
    }
  }
}

// Int4 through a 16-entry table. With AVX-512 BW, 32 nibbles (4 words) per step: one word
// permute spreads the words' 16-bit halves over 32 lanes, a variable shift and mask leave one
// nibble per lane in order, and a second word permute looks the 32 values up in the table, where
// the scalar loop spends a shift, a mask, a load and a store per weight.
void int4_expand(const std::uint32_t* words, std::size_t stride, std::size_t nwords, const std::uint16_t* table,
                 std::uint16_t* dst) {
  std::size_t r = 0;
#if defined(__AVX512BW__)
  alignas(64) static constexpr std::uint16_t kHalf[32] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
                                                          4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7};
  alignas(64) static constexpr std::uint16_t kShift[32] = {0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12,
                                                           0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12};
  const __m512i half = _mm512_load_si512(kHalf);
  const __m512i shift = _mm512_load_si512(kShift);
  const __m512i mask = _mm512_set1_epi16(0xF);
  const __m512i tab = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(table)));
  for (; r + 4 <= nwords; r += 4) {
    const __m128i w = _mm_set_epi32(static_cast<int>(words[(r + 3) * stride]), static_cast<int>(words[(r + 2) * stride]),
                                    static_cast<int>(words[(r + 1) * stride]), static_cast<int>(words[r * stride]));
    const __m512i spread = _mm512_permutexvar_epi16(half, _mm512_castsi128_si512(w));
    const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(spread, shift), mask);
    _mm512_storeu_si512(dst + 8 * r, _mm512_permutexvar_epi16(nib, tab));
  }
#endif
  for (; r < nwords; ++r) {
    const std::uint32_t w = words[r * stride];
    for (std::size_t i = 0; i < 8; ++i) dst[8 * r + i] = table[(w >> (4 * i)) & 0xFu];
  }
}

// ---- attention over gathered rows: P·V, the scaled row maximum, the shifted exponentials ------
// NN register tile: kNnR rows of A (each element broadcast) x kNnC vectors of B row p; the
// accumulators, the broadcasts and one B vector fit the register file (avx512 24+6+1 of 32,
// avx2 9+3+1 of 16).
#if defined(MLAKIT_SIMD_LEVEL_generic)
constexpr std::size_t kNnR = 2, kNnC = 2;
#elif defined(MLAKIT_SIMD_LEVEL_avx2)
constexpr std::size_t kNnR = 3, kNnC = 3;
#else
constexpr std::size_t kNnR = 6, kNnC = 4;
#endif

// One step of an NN tile: an f32 step takes one row of B and a broadcast element of A; a bf16
// step (levels with the pair dot) a zipped row pair and a broadcast pair of A, whose odd last
// element goes alone (its neighbour is not part of A).
template <class T>
struct NnStep;
template <>
struct NnStep<float> {
  using V = F;
  static constexpr std::size_t kRows = 1;
  static V a_at(const float* a, std::size_t p, std::size_t) { return fsplat(a[p]); }
  static V b_at(const float* bp, std::size_t j, std::size_t lanes) {
    return lanes == kLanes ? fload(bp + j * kLanes) : fload_n(bp + j * kLanes, lanes);
  }
  static F mac(F acc, V a, V b) { return fmadd(a, b, acc); }
};
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
template <>
struct NnStep<std::uint16_t> {
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

// Columns [0, (C - 1) * kLanes + last) of the tile; last = kLanes unless the tile ends the row.
template <class T, std::size_t R, std::size_t C>
void tile_nn(std::size_t k, const T* a, std::size_t lda, const T* b, std::size_t ldb, float* c, std::size_t ldc,
             std::size_t last, bool accumulate) {
  using S = NnStep<T>;
  // Every loop over the tile unrolled: otherwise GCC keeps the accumulators in memory.
  F s[R][C];
#pragma GCC unroll 8
  for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (std::size_t j = 0; j < C; ++j) {
      const float* cp = c + r * ldc + j * kLanes;
      s[r][j] = !accumulate ? fzero() : (j + 1 < C || last == kLanes ? fload(cp) : fload_n(cp, last));
    }
  for (std::size_t p = 0, q = 0; p < k; p += S::kRows, ++q) {
    const T* bp = b + q * ldb;
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
#pragma GCC unroll 8
  for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (std::size_t j = 0; j < C; ++j) {
      float* cp = c + r * ldc + j * kLanes;
      if (j + 1 < C || last == kLanes) fstore(cp, s[r][j]);
      else fstore_n(cp, s[r][j], last);
    }
}

template <class T>
using NnFn = void (*)(std::size_t, const T*, std::size_t, const T*, std::size_t, float*, std::size_t, std::size_t,
                      bool);
template <class T>
struct NnTable {
  NnFn<T> fn[kNnR][kNnC];
};
template <class T, std::size_t... Is>
constexpr NnTable<T> make_nn_tiles(std::index_sequence<Is...>) {
  NnTable<T> t{};
  ((t.fn[Is / kNnC][Is % kNnC] = &tile_nn<T, Is / kNnC + 1, Is % kNnC + 1>), ...);
  return t;
}
template <class T>
constexpr NnTable<T> kNnTiles = make_nn_tiles<T>(std::make_index_sequence<kNnR * kNnC>{});

// f32_nn (T = float) and bf16_nn (T = bf16, B zipped). Column blocks of kNnC vectors outside, row
// tiles inside: the block's slice of B stays in L1 while every row of A passes over it.
template <class T>
void gemm_nn(std::size_t m, std::size_t n, std::size_t k, const T* a, std::size_t lda, const T* b, std::size_t ldb,
             float* c, std::size_t ldc, bool accumulate) {
  if (m == 0 || n == 0) return;
  const std::size_t vecs = (n + kLanes - 1) / kLanes, last = n - (vecs - 1) * kLanes;
  for (std::size_t v0 = 0; v0 < vecs; v0 += kNnC) {
    const std::size_t cb = vecs - v0 < kNnC ? vecs - v0 : kNnC;
    const std::size_t tail = v0 + cb == vecs ? last : kLanes;
    for (std::size_t i = 0; i < m; i += kNnR) {
      const std::size_t rb = m - i < kNnR ? m - i : kNnR;
      kNnTiles<T>.fn[rb - 1][cb - 1](k, a + i * lda, lda, b + NnStep<T>::kRows * v0 * kLanes, ldb,
                                     c + i * ldc + v0 * kLanes, ldc, tail, accumulate);
    }
  }
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
                     &int4_expand,
                     &gemm_nn<float>,
                     &scale_max,
                     &exp_sum,
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
                     &gemm_nn<std::uint16_t>,
                     &zip_rows_bf16,
                     &to_bf16_scaled};
#else
                     nullptr,
                     nullptr,
                     nullptr};
#endif
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
