#include "simd/common/fp8_decode_impl.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// Byte tables for vpermi2b: high and low byte of the bf16 pattern of codes 0..127 (the sign bit is
// or-ed in separately), split in two 64-byte halves each.
struct ByteTables {
  alignas(64) std::uint8_t hi[128];
  alignas(64) std::uint8_t lo[128];
  // vpermb indices that order 64 codes so that the in-lane byte unpacks below produce words in
  // code order: position 16L+j takes code 8L+j, position 16L+8+j takes code 32+8L+j (j < 8).
  alignas(64) std::uint8_t order[64];
  constexpr ByteTables() : hi(), lo(), order() {
    for (unsigned c = 0; c < 128; ++c) {
      const std::uint32_t bf = kFp8Table.f32[c] >> 16;
      hi[c] = static_cast<std::uint8_t>(bf >> 8);
      lo[c] = static_cast<std::uint8_t>(bf & 0xFF);
    }
    for (unsigned lane = 0; lane < 4; ++lane)
      for (unsigned j = 0; j < 8; ++j) {
        order[16 * lane + j] = static_cast<std::uint8_t>(8 * lane + j);
        order[16 * lane + 8 + j] = static_cast<std::uint8_t>(32 + 8 * lane + j);
      }
  }
};
constexpr ByteTables kBytes{};

// 64 codes -> bf16 patterns of codes 0..31 (w0) and 32..63 (w1).
inline void decode64(__m512i codes, __m512i* w0, __m512i* w1) {
  const __m512i p = _mm512_permutexvar_epi8(_mm512_load_si512(kBytes.order), codes);
  const __m512i sign = _mm512_and_si512(p, _mm512_set1_epi8(static_cast<char>(0x80)));
  const __m512i hi = _mm512_or_si512(
      _mm512_permutex2var_epi8(_mm512_load_si512(kBytes.hi), p, _mm512_load_si512(kBytes.hi + 64)), sign);
  const __m512i lo = _mm512_permutex2var_epi8(_mm512_load_si512(kBytes.lo), p, _mm512_load_si512(kBytes.lo + 64));
  *w0 = _mm512_unpacklo_epi8(lo, hi);
  *w1 = _mm512_unpackhi_epi8(lo, hi);
}

inline __m512 bf16_words_to_f32(__m256i w) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(w), 16));
}

inline __mmask16 mask16(std::size_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }
inline __mmask32 mask32(std::size_t n) { return n >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << n) - 1u); }

void fp8_to_bf16_lut(const std::uint8_t* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  __m512i w0, w1;
  for (; i + 64 <= n; i += 64) {
    decode64(_mm512_loadu_si512(src + i), &w0, &w1);
    _mm512_storeu_si512(dst + i, w0);
    _mm512_storeu_si512(dst + i + 32, w1);
  }
  if (i < n) {
    const std::size_t r = n - i;  // 1..63
    decode64(_mm512_maskz_loadu_epi8(static_cast<__mmask64>((1ull << r) - 1ull), src + i), &w0, &w1);
    _mm512_mask_storeu_epi16(dst + i, mask32(r), w0);
    if (r > 32) _mm512_mask_storeu_epi16(dst + i + 32, mask32(r - 32), w1);
  }
}

inline void store_f32_from_words(float* dst, __m512i w, std::size_t count) {  // count in 1..32
  _mm512_mask_storeu_ps(dst, mask16(count), bf16_words_to_f32(_mm512_castsi512_si256(w)));
  if (count > 16) _mm512_mask_storeu_ps(dst + 16, mask16(count - 16), bf16_words_to_f32(_mm512_extracti64x4_epi64(w, 1)));
}

void fp8_to_f32_lut(const std::uint8_t* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  __m512i w0, w1;
  for (; i + 64 <= n; i += 64) {
    decode64(_mm512_loadu_si512(src + i), &w0, &w1);
    _mm512_storeu_ps(dst + i, bf16_words_to_f32(_mm512_castsi512_si256(w0)));
    _mm512_storeu_ps(dst + i + 16, bf16_words_to_f32(_mm512_extracti64x4_epi64(w0, 1)));
    _mm512_storeu_ps(dst + i + 32, bf16_words_to_f32(_mm512_castsi512_si256(w1)));
    _mm512_storeu_ps(dst + i + 48, bf16_words_to_f32(_mm512_extracti64x4_epi64(w1, 1)));
  }
  if (i < n) {
    const std::size_t r = n - i;  // 1..63
    decode64(_mm512_maskz_loadu_epi8(static_cast<__mmask64>((1ull << r) - 1ull), src + i), &w0, &w1);
    store_f32_from_words(dst + i, w0, r < 32 ? r : 32);
    if (r > 32) store_f32_from_words(dst + i + 32, w1, r - 32);
  }
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS

namespace mlakit::simd {
extern const Fp8DecodeKernels fp8_decode_avx512bf16;
// The shared rebias kernels stay the default until the byte-table path has been measured on a
// VBMI machine; both are exercised by the kernel tests there.
const Fp8DecodeKernels fp8_decode_avx512bf16 = {"avx512bf16",
                                                avx512bf16::fp8_to_f32,
                                                avx512bf16::fp8_to_bf16,
                                                "rebias",
                                                avx512bf16::fp8_to_f32_lut,
                                                avx512bf16::fp8_to_bf16_lut,
                                                "vpermi2b"};
}  // namespace mlakit::simd
