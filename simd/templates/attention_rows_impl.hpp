// The rest of an attention over gathered rows (sparse MLA) beside the score tiles: P·V as NN
// register tiles, the scaled row maximum, the shifted exponentials and the bf16 packings.
#pragma once

#include <cstddef>
#include <cstdint>

#include "simd/templates/dot_tiles_impl.hpp"
#include "simd/templates/tile_out.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

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

// Columns [0, (C - 1) * kLanes + last) of the tile; last = kLanes unless the tile ends the row.
template <class TA, class TB, std::size_t R, std::size_t C>
void tile_nn(std::size_t k, const TA* a, std::size_t lda, const TB* b, std::size_t ldb, TileOut out, std::size_t last) {
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
using NnFn = void (*)(std::size_t, const TA*, std::size_t, const TB*, std::size_t, TileOut, std::size_t);
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
               std::size_t ldb, TileOut out) {
  if (m == 0 || n == 0) return;
  const std::size_t vecs = (n + kLanes - 1) / kLanes, last = n - (vecs - 1) * kLanes;
  for (std::size_t v0 = 0; v0 < vecs; v0 += kNnC) {
    const std::size_t cb = vecs - v0 < kNnC ? vecs - v0 : kNnC;
    const std::size_t tail = v0 + cb == vecs ? last : kLanes;
    for (std::size_t i = 0; i < m; i += kNnR) {
      const std::size_t rb = m - i < kNnR ? m - i : kNnR;
      TileOut tile = out;
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
  nn_blocks<TA, TB>(m, n, k, a, lda, b, ldb, TileOut{c, ldc, accumulate});
}

// f32_nn_scaled and bf16_nn_scaled.
template <class T>
void gemm_nn_scaled(std::size_t m, std::size_t n, std::size_t k, const T* a, std::size_t lda, const T* b,
                    std::size_t ldb, const float* rs, const float* cs, float* c, std::size_t ldc, bool accumulate) {
  nn_blocks<T, T>(m, n, k, a, lda, b, ldb, TileOut{c, ldc, accumulate, rs, cs});
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

void widen_bf16(const std::uint16_t* x, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) fstore(dst + i, fload_bf16(x + i));
  if (i < n) fstore_n(dst + i, fload_bf16_n(x + i, n - i), n - i);
}

// To nearest even, as mlakit::f32_to_bf16.
void round_bf16(const float* x, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) istore_u16(dst + i, bf16_round_bits(bits(fload(x + i))));
  if (i < n) istore_u16_n(dst + i, bf16_round_bits(bits(fload_n(x + i, n - i))), n - i);
}

// hi, mid, lo as simd/gemm.hpp's split_bf16x3: each part the rounding of what the parts before it
// leave (an exact f32 difference).
inline void split_lanes(F v, I& h, I& m, I& l) {
  h = bf16_round_bits(bits(v));
  const F r = v - floats(shl<16>(h));
  m = bf16_round_bits(bits(r));
  l = bf16_round_bits(bits(r - floats(shl<16>(m))));
}
void split_bf16x3(const float* x, std::size_t n, std::uint16_t* hi, std::uint16_t* mid, std::uint16_t* lo) {
  I h, m, l;
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    split_lanes(fload(x + i), h, m, l);
    istore_u16(hi + i, h);
    istore_u16(mid + i, m);
    istore_u16(lo + i, l);
  }
  if (i < n) {
    split_lanes(fload_n(x + i, n - i), h, m, l);
    istore_u16_n(hi + i, h, n - i);
    istore_u16_n(mid + i, m, n - i);
    istore_u16_n(lo + i, l, n - i);
  }
}

alignas(64) constexpr std::int32_t kLaneIndex[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
inline M first_lanes(std::size_t n) { return cmpgt(isplat(static_cast<std::int32_t>(n)), iload(kLaneIndex)); }

// Bit j of a 32-bit mask word, lane by lane: the lanes of k-th vector of a word hold bits k·kLanes...
alignas(64) constexpr std::int32_t kLaneBit[32] = {
    1 << 0,  1 << 1,  1 << 2,  1 << 3,  1 << 4,  1 << 5,  1 << 6,  1 << 7,  1 << 8,  1 << 9,  1 << 10,
    1 << 11, 1 << 12, 1 << 13, 1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 18, 1 << 19, 1 << 20, 1 << 21,
    1 << 22, 1 << 23, 1 << 24, 1 << 25, 1 << 26, 1 << 27, 1 << 28, 1 << 29, 1 << 30, static_cast<std::int32_t>(1u << 31)};

void mask_select(float* x, const std::uint32_t* bits, std::size_t n, float fill) {
  const F fv = fsplat(fill);
  const I zero = isplat(0);
  for (std::size_t w = 0; w * 32 < n; ++w) {
    const I word = isplat(static_cast<std::int32_t>(bits[w]));
    for (std::size_t k = 0; k < 32; k += kLanes) {
      const std::size_t j = w * 32 + k;
      if (j >= n) break;
      const M clear = cmpeq(word & iload(kLaneBit + k), zero);
      if (j + kLanes <= n) {
        fstore(x + j, select(clear, fv, fload(x + j)));
      } else {
        fstore_n(x + j, select(clear, fv, fload_n(x + j, n - j)), n - j);
      }
    }
  }
}

void scale_round_bf16(float* x, std::size_t n, float f) {
  const F fs = fsplat(f);
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) fstore(x + i, floats(shl<16>(bf16_round_bits(bits(fload(x + i) * fs)))));
  if (i < n) fstore_n(x + i, floats(shl<16>(bf16_round_bits(bits(fload_n(x + i, n - i) * fs)))), n - i);
}

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

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
