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
                     &int4_expand};
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
