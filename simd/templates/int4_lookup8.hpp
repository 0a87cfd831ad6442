// An int4 word's eight codes looked up in a 16-entry f32 table, for the levels with 256-bit
// vectors: the GPTQ expansion, the decode row and the panel packer all read int4 columns this way.
#pragma once

#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// Lane q: table[code q], code q being bits 4q .. 4q + 3 of word. The permutes read only the low
// bits of their indices (3 for vpermps, 4 for vpermt2ps), so the codes need no mask; on AVX2 the
// upper half of the table is chosen by bit 3 of each code, which a left shift of the word itself
// brings to the sign bit the blend reads (0.92x the time of shifting the code: one step off the
// chain, one mask fewer).
[[gnu::always_inline]] inline __m256 int4_lookup8(std::uint32_t word, const float* table) {
  const __m256i w = _mm256_set1_epi32(static_cast<int>(word));
  const __m256i code = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
#if defined(__AVX512VL__)
  return _mm256_permutex2var_ps(_mm256_loadu_ps(table), code, _mm256_loadu_ps(table + 8));
#else
  const __m256 upper = _mm256_castsi256_ps(_mm256_sllv_epi32(w, _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0)));
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_loadu_ps(table), code),
                          _mm256_permutevar8x32_ps(_mm256_loadu_ps(table + 8), code), upper);
#endif
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
#endif
