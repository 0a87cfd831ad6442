// GPTQ int4 columns read in place (simd/gemm.hpp Int4Columns): panels of 16 columns expanded once per
// block of A rows into the dot tiles of dot_tiles_impl.hpp, a single decode row straight into its
// chains on AVX-512 and AVX2, and the per-group value tables.
#pragma once

#include <cstddef>
#include <cstdint>

#include "simd/templates/dot_tiles_impl.hpp"
#include "simd/templates/int4_lookup8.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

// Int4 columns (simd/gemm.hpp), 16 at a time: a panel is one 64-byte line of every word row, so
// each line of the codes is read once. Read in place, the rows of a chunk lie a multiple of 4 KiB
// apart (ldw words) and fall in one L1 set, which would evict a line before the next four columns
// came back for it.
constexpr std::size_t kInt4Panel = 16;

// The 16 codes as f32: a table is (codes - z) * s, one vector per 16 on AVX-512.
alignas(64) constexpr float kInt4Codes[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

void int4_tables(const std::uint16_t* scales, bool scales_f16, const std::uint32_t* zero_words, int zero_bias,
                 std::size_t n, float* tables, std::size_t stride);

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

// The lines of word rows r + kAhead .. + 3 of the panel at j0, or, past its nrows rows, of the next
// panel (j0 + 16) from its first row when there is one: a decode row runs panel after panel, and
// each panel's first rows would otherwise come from memory unasked (0.95x the time of GPTQ decode).
// Inlined by force: as a function of its own, GCC found it free of side effects and dropped the
// calls.
[[gnu::always_inline]] inline void prefetch_ahead(const Int4Columns& b, std::size_t j0, std::size_t r,
                                                  std::size_t nrows, bool next) {
  const std::size_t ra = r + kAhead;
  const std::uint32_t* rows = nullptr;
  if (ra + 4 <= nrows) rows = b.words + ra * b.ldw + j0;
  else if (next && ra >= nrows && ra + 4 <= 2 * nrows) rows = b.words + (ra - nrows) * b.ldw + j0 + kInt4Panel;
  if (rows)
    for (std::size_t i = 0; i < 4; ++i) _mm_prefetch(reinterpret_cast<const char*>(rows + i * b.ldw), _MM_HINT_T0);
}

// The step's rows r .. r + here of columns j0 .. j0 + 16 (those in `cols`), regrouped: x[q] holds
// columns 4q .. 4q + 3; missing rows and columns are zero.
inline void load(const Int4Columns& b, std::size_t j0, __mmask16 cols, std::size_t r, std::size_t here,
                 __m512i (&x)[4]) {
  __m512i row[4];
  for (std::size_t i = 0; i < 4; ++i)
    row[i] = i < here ? _mm512_maskz_loadu_epi32(cols, b.words + (r + i) * b.ldw + j0) : _mm512_setzero_si512();
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

// Where a decode row's panel takes its group's tables from (`form(g, table)`: 16 columns, one
// 64-byte table each, as f32 values or as bf16 values twice). FromTables: the call's value tables
// (int4_tables' layout). FromGroups: the scales and zero points themselves, each table made as
// int4_tables makes it (the same f32 operations, then the same rounding; below for the pair dot's
// subnormals), so the same outputs; a call then neither writes its tables (as many bytes as its
// codes) nor reads them back (GPTQ decode 0.83-0.86x the time on an Intel Xeon with avx512bf16).
struct FromTables {
  const float* tab;  // the panel's first column's tables
  std::size_t groups;
  template <class CT>
  void form(std::size_t g, __m512i (&table)[kInt4Panel]) const {
    if constexpr (std::is_same_v<CT, std::uint16_t>)
      bf16_tables(tab, groups, g, kInt4Panel, reinterpret_cast<std::uint16_t(*)[32]>(table));
    else
      for (std::size_t j = 0; j < kInt4Panel; ++j) table[j] = _mm512_loadu_si512(tab + (j * groups + g) * 16);
  }
};
struct FromGroups {
  const Int4Groups& q;
  std::size_t j0;  // the panel's first column (a multiple of 16: its zero points are two whole words)
  template <class CT>
  void form(std::size_t g, __m512i (&table)[kInt4Panel]) const {
    const __m256i sw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.scales + g * q.lds + j0));
    alignas(64) float s[16], z[16];
    const __m512 scale = q.scales_f16 ? _mm512_cvtph_ps(sw)
                                      : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(sw), 16));
    _mm512_store_ps(s, scale);
    if (q.zero_words) {
      // Lanes 0-7 take word j0 / 8, lanes 8-15 the next; lane j its nibble j % 8.
      const __m512i w = _mm512_permutexvar_epi32(
          _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
          _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q.zero_words + g * q.ldz + j0 / 8))));
      const __m512i nib = _mm512_and_si512(
          _mm512_srlv_epi32(w, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28)),
          _mm512_set1_epi32(0xF));
      _mm512_store_ps(z, _mm512_cvtepi32_ps(_mm512_add_epi32(nib, _mm512_set1_epi32(q.zero_bias))));
    } else {
      _mm512_store_ps(z, _mm512_set1_ps(8.0f));
    }
    const auto value = [&](std::size_t j) { return (fload(kInt4Codes) - fsplat(z[j])) * fsplat(s[j]); };
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
    // vcvtne2ps2bf16 rounds as bf16_round_bits does (to nearest even, NaN quieted the same way)
    // but makes subnormal values zero, which the pair dot that reads these tables reads them as
    // anyway: the same outputs, for a third of the instructions.
    if constexpr (std::is_same_v<CT, std::uint16_t>) {
#pragma GCC unroll 8
      for (std::size_t j = 0; j < kInt4Panel; j += 2) {
        // Column j's bf16 values in the low half, column j + 1's in the high half.
        const __m512i w = bf16_from_f32(value(j), value(j + 1)).v;
        table[j] = _mm512_shuffle_i64x2(w, w, 0x44);
        table[j + 1] = _mm512_shuffle_i64x2(w, w, 0xEE);
      }
      return;
    }
#endif
#pragma GCC unroll 16
    for (std::size_t j = 0; j < kInt4Panel; ++j) {
      const I u = bf16_round_bits(bits(value(j)));
      if constexpr (std::is_same_v<CT, std::uint16_t>) table[j] = _mm512_broadcast_i64x4(_mm512_cvtepi32_epi16(u.v));
      else table[j] = shl<16>(u).v;
    }
  }
};

}  // namespace int4_step
#elif defined(__AVX2__)
// AVX2's decode row: 8 columns at a time, two word rows (16 codes of each column) a step. A
// column's table is 16 bf16 values (f32 with zero low halves), so two 16-byte tables of its
// bytes 2 and 3 hold all of it, and vpshufb looks 16 codes up in each of two columns at once, one
// column per 128-bit lane: two in-lane shuffles and six unpacks for 32 values, where the 8-entry
// permutes took two permutes, two shifts and a blend for 8 (on Zen 3 a word cost about 6 cycles
// that way, 1.8 this way).
namespace int4_step {

constexpr std::size_t kRowCols = 8;
constexpr std::size_t kAhead = 16;  // word rows prefetched ahead: no hardware prefetcher follows ldw

// A group's tables as bytes for vpshufb: pair q holds columns q (lane 0) and q + 4 (lane 1), the
// pairing the regrouped word rows of `codes` give; lo[q] byte 2 of each of the 16 values, hi[q]
// byte 3 (a value is a bf16 value in f32: its low half is zero).
struct ByteTables {
  __m256i lo[4], hi[4];
};

// Tables formed ahead (int4_row_tables), as stored.
inline void load(const std::uint8_t* src, ByteTables& t) {
  const auto* v = reinterpret_cast<const __m256i*>(src);
  for (std::size_t i = 0; i < 4; ++i) {
    t.lo[i] = _mm256_loadu_si256(v + i);
    t.hi[i] = _mm256_loadu_si256(v + 4 + i);
  }
}

// Group g's tables of the 8 columns at j0 (a multiple of 8: their zero points are one whole word),
// formed as the group begins: the 16 codes' values of all 8 columns at once, each by int4_tables'
// operations ((code - z) * s in f32, then rounded to bf16 as bf16_round_bits rounds), so the
// tables path's values, and the call neither writes its tables nor reads them back.
struct FromGroups {
  const Int4Groups& q;
  std::size_t j0;
  void form(std::size_t g, ByteTables& t) const {
    if (q.row_tables != nullptr) {  // formed ahead by int4_row_tables (below)
      load(q.row_tables + j0 / kRowCols * q.ldt + g * sizeof(ByteTables), t);
      return;
    }
    form_from_groups(g, t);
  }
  void form_from_groups(std::size_t g, ByteTables& t) const {
    const std::uint16_t* sp = q.scales + g * q.lds + j0;
    const __m128i sw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sp));
    const F s = q.scales_f16 ? f16_to_f32(H{sw}) : F{_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(sw), 16))};
    F z = fsplat(8.0f);
    if (q.zero_words) {
      const __m256i nib = _mm256_and_si256(
          _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(q.zero_words[g * q.ldz + j0 / 8])),
                            _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
          _mm256_set1_epi32(0xF));
      z = F{_mm256_cvtepi32_ps(_mm256_add_epi32(nib, _mm256_set1_epi32(q.zero_bias)))};
    }
    // Without a NaN or infinite scale no value is NaN, and rounding to nearest even is four integer
    // operations (an overflow carries into the exponent and gives infinity, as it should); else
    // bf16_round_bits itself. Only bytes 2 and 3 of the sum are read.
    const bool finite = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(
                            _mm256_and_si256(bits(s).v, _mm256_set1_epi32(0x7F800000)), _mm256_set1_epi32(0x7F800000)))) == 0;
    // Within a lane (columns 4L .. 4L + 3): byte 2 of each value, then byte 3.
    const __m256i pick = _mm256_setr_epi8(2, 6, 10, 14, 3, 7, 11, 15, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                          2, 6, 10, 14, 3, 7, 11, 15, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i b[16];
#pragma GCC unroll 16
    for (std::size_t c = 0; c < 16; ++c) {
      const I u = bits((fsplat(static_cast<float>(c)) - z) * s);
      const I r = finite ? u + isplat(0x7FFF) + (shr<16>(u) & isplat(1)) : shl<16>(bf16_round_bits(u));
      b[c] = _mm256_shuffle_epi8(r.v, pick);
    }
    // Transposed within each lane: the units grow from bytes to 8 bytes, two codes a unit, then
    // four, eight and sixteen.
    __m256i e[8], glo[4], ghi[4];
    for (std::size_t i = 0; i < 8; ++i) e[i] = _mm256_unpacklo_epi8(b[2 * i], b[2 * i + 1]);
    for (std::size_t m = 0; m < 4; ++m) {
      glo[m] = _mm256_unpacklo_epi16(e[2 * m], e[2 * m + 1]);  // codes 4m .. 4m + 3 of columns 0-3, byte 2
      ghi[m] = _mm256_unpackhi_epi16(e[2 * m], e[2 * m + 1]);  // byte 3
    }
    const auto finish = [](const __m256i (&gm)[4], __m256i (&out)[4]) {
      const __m256i k01a = _mm256_unpacklo_epi32(gm[0], gm[1]), k23a = _mm256_unpackhi_epi32(gm[0], gm[1]);  // codes 0-7
      const __m256i k01b = _mm256_unpacklo_epi32(gm[2], gm[3]), k23b = _mm256_unpackhi_epi32(gm[2], gm[3]);  // 8-15
      out[0] = _mm256_unpacklo_epi64(k01a, k01b);
      out[1] = _mm256_unpackhi_epi64(k01a, k01b);
      out[2] = _mm256_unpacklo_epi64(k23a, k23b);
      out[3] = _mm256_unpackhi_epi64(k23a, k23b);
    };
    finish(glo, t.lo);
    finish(ghi, t.hi);
  }
};

// Word rows r and r + 1 (w0, w1) of 8 columns as code bytes, half h of them: c[i] holds column
// 2h + i's 16 codes (row r's eight, then row r + 1's, in code order) in lane 0 and column
// 2h + i + 4's in lane 1.
inline void codes(__m256i w0, __m256i w1, std::size_t h, __m256i (&c)[2]) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i u = h == 0 ? _mm256_unpacklo_epi32(w0, w1) : _mm256_unpackhi_epi32(w0, w1);
  // A byte holds codes 2i (low nibble) and 2i + 1: interleaving the two nibble planes restores the
  // order.
  const __m256i lo = _mm256_and_si256(u, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(u, 4), nibble);
  c[0] = _mm256_unpacklo_epi8(lo, hi);
  c[1] = _mm256_unpackhi_epi8(lo, hi);
}

// Where a step's code bytes come from (half(h, c) gives codes' c for half h): word rows r and
// r + 1 of 8 columns in qweight's layout (StepWords), or the step as int4_row_codes laid it out
// ahead (StepCodes: per half one vector, c[0] in its low nibbles and c[1] in its high ones, so
// that two integer operations replace codes' three shuffles, and a block's steps one stream
// instead of rows a page or more apart: Llama-3-8B GPTQ T 1 on one thread of Zen 3 2.32-2.53 ->
// 1.96-2.07 ms).
struct StepWords {
  __m256i w0, w1;
  [[gnu::always_inline]] void half(std::size_t h, __m256i (&c)[2]) const { codes(w0, w1, h, c); }
};
// Word rows w and, when kTwo, w + ldw (else none, its codes zero and unused).
template <bool kTwo>
[[gnu::always_inline]] inline StepWords step_words(const std::uint32_t* w, std::size_t ldw) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)),
          kTwo ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + ldw)) : _mm256_setzero_si256()};
}
constexpr std::size_t kStepBytes = 64;  // a step of a block in int4_row_codes' layout
// Bytes of laid-out codes an expansion asks for ahead of a step: without, decode batches waited on
// the loads (Llama-3-8B GPTQ T 8 on one thread of Zen 3: 9.5-11.5 ms against 9.1-9.6 reading the
// words; 2 KiB ahead 8.8-9.1; 512 bytes 9.4). The decode row measured level with and without (its
// lookups bound it).
constexpr std::size_t kStepsAhead = 2048;
struct StepCodes {
  const std::uint8_t* v;
  [[gnu::always_inline]] void half(std::size_t h, __m256i (&c)[2]) const {
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 32 * h));
    c[0] = _mm256_and_si256(u, nibble);
    c[1] = _mm256_and_si256(_mm256_srli_epi16(u, 4), nibble);
  }
};

// The steps of a run of blocks of 8 columns (block i at column j0 + 8i), and what each step asks
// for ahead of itself: at<kTwo>(r, i) is block i's step at word row r (rows r and r + 1 where
// kTwo), ahead(r) the prefetches a step of rows r and r + 1 issues first.
// qweight's words: word rows `ahead_rows` on, whose lines lie a row (a page or more) apart and
// which no hardware prefetcher follows, for the first and last of the run's `width` columns; past
// the last row, with `next`, the first rows of the 8 columns after the run (a decode row's next
// block).
struct WordSteps {
  const Int4Columns& b;
  std::size_t j0, width, nrows;
  bool next;
  [[gnu::always_inline]] void ahead(std::size_t r) const {
    for (std::size_t ra = r + kAhead; ra < r + kAhead + 2; ++ra) {
      if (ra < nrows) {
        const std::uint32_t* row = b.words + ra * b.ldw + j0;
        _mm_prefetch(reinterpret_cast<const char*>(row), _MM_HINT_T0);
        if (width > kRowCols) _mm_prefetch(reinterpret_cast<const char*>(row + width - 1), _MM_HINT_T0);
      } else if (next && ra < 2 * nrows) {
        _mm_prefetch(reinterpret_cast<const char*>(b.words + (ra - nrows) * b.ldw + j0 + width), _MM_HINT_T0);
      }
    }
  }
  template <bool kTwo>
  [[gnu::always_inline]] StepWords at(std::size_t r, std::size_t i) const {
    return step_words<kTwo>(b.words + r * b.ldw + j0 + kRowCols * i, b.ldw);
  }
};
// int4_row_codes' layout (block i's steps at v + i * ldr, one stream): `ahead_bytes` on in each
// block, or nothing (0).
struct CodeSteps {
  const std::uint8_t* v;
  std::size_t ldr, blocks, ahead_bytes;
  [[gnu::always_inline]] void ahead(std::size_t r) const {
    if (ahead_bytes == 0) return;
    for (std::size_t i = 0; i < blocks; ++i)
      _mm_prefetch(reinterpret_cast<const char*>(v + i * ldr + r / 2 * kStepBytes + ahead_bytes), _MM_HINT_T0);
  }
  template <bool kTwo>
  [[gnu::always_inline]] StepCodes at(std::size_t r, std::size_t i) const {
    return {v + i * ldr + r / 2 * kStepBytes};
  }
};

// A step's code bytes (rows r and r + 1 of 8 columns), each pair q of them (the step's c[i] of
// half h for q = 2h + i) looked up in the pair's tables and handed to use(q, v0, v1): v0 holds row
// r's 8 bf16 values of column q in lane 0 and of column q + 4 in lane 1 as 16-bit words (low byte
// from lo, high from hi), v1 row r + 1's.
template <class Step, class Use>
[[gnu::always_inline]] inline void pair_words(const Step& step, const ByteTables& t, Use use) {
#pragma GCC unroll 2
  for (std::size_t h = 0; h < 2; ++h) {
    __m256i code[2];
    step.half(h, code);
#pragma GCC unroll 2
    for (std::size_t i = 0; i < 2; ++i) {
      const std::size_t q = 2 * h + i;
      const __m256i l = _mm256_shuffle_epi8(t.lo[q], code[i]), hb = _mm256_shuffle_epi8(t.hi[q], code[i]);
      use(q, _mm256_unpacklo_epi8(l, hb), _mm256_unpackhi_epi8(l, hb));
    }
  }
}

// One step of a decode row: pair_words' values against x (parity_quads' layout at the rows' first
// element); kTwo: the step's second row is there. A dword of a pair's words shifted up by 16 is its
// even element as f32, masked it is its odd one, exactly. So the pair's chains are ev[q] (the even
// elements of columns q and q + 4, one per lane) and od[q] (the odd ones), and a vector of values
// costs an integer operation where widening the words took a shuffle (the shuffles bound this loop
// on Zen 3).
template <bool kTwo, class Step>
[[gnu::always_inline]] inline void row_step(const Step& step, const float* x, const ByteTables& t, F (&ev)[4],
                                            F (&od)[4]) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const auto even = [](__m256i v) __attribute__((always_inline)) { return F{_mm256_castsi256_ps(_mm256_slli_epi32(v, 16))}; };
  const auto odd = [&](__m256i v) __attribute__((always_inline)) { return F{_mm256_castsi256_ps(_mm256_and_si256(v, high))}; };
  pair_words(step, t, [&](std::size_t q, __m256i v0, __m256i v1) __attribute__((always_inline)) {
    // x read again for every pair, as the FMAs' memory operands: held in registers across the
    // pairs, it pushed two chains onto the stack.
    const float* xs = x;
    asm volatile("" : "+r"(xs));
    ev[q] = fmadd(fload(xs), even(v0), ev[q]);
    od[q] = fmadd(fload(xs + 8), odd(v0), od[q]);
    if constexpr (kTwo) {
      ev[q] = fmadd(fload(xs + 16), even(v1), ev[q]);
      od[q] = fmadd(fload(xs + 24), odd(v1), od[q]);
    }
  });
}

// One step of an expansion: pair_words' values written out as f32 (each word the upper half of an
// f32), column q's 8 or 16 (kTwo) elements at out + q * ldk.
template <bool kTwo, class Step>
[[gnu::always_inline]] inline void expand_step(const Step& step, const ByteTables& t, float* out, std::size_t ldk) {
  const __m256i zero = _mm256_setzero_si256();
  pair_words(step, t, [&](std::size_t q, __m256i v0, __m256i v1) __attribute__((always_inline)) {
    // Elements 0-3 and 4-7 of a row of columns q (lane 0) and q + 4 (lane 1).
    const __m256 e03 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v0));
    const __m256 e47 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v0));
    float* a = out + q * ldk;
    float* b = out + (q + 4) * ldk;
    _mm256_storeu_ps(a, _mm256_permute2f128_ps(e03, e47, 0x20));
    _mm256_storeu_ps(b, _mm256_permute2f128_ps(e03, e47, 0x31));
    if constexpr (kTwo) {
      const __m256 f03 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v1));
      const __m256 f47 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v1));
      _mm256_storeu_ps(a + 8, _mm256_permute2f128_ps(f03, f47, 0x20));
      _mm256_storeu_ps(b + 8, _mm256_permute2f128_ps(f03, f47, 0x31));
    }
  });
}

// The byte tables of 8 columns whose f32 tables (int4_tables' values) lie `stride` floats apart.
inline void byte_tables(const float* tab, std::size_t stride, ByteTables& t) {
  // Within a lane of eight 16-bit values: their low bytes, then their high bytes.
  const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,  //
                                         0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  __m256i col[kRowCols];
  for (std::size_t j = 0; j < kRowCols; ++j) {
    const __m256i v0 = _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tab + j * stride)), 16);
    const __m256i v1 = _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tab + j * stride + 8)), 16);
    // packus works within lanes (values 0-3, 8-11 | 4-7, 12-15): the quadwords put back in order.
    const __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(v0, v1), 0xD8);
    // [low bytes 0-7, high bytes 0-7 | low 8-15, high 8-15] -> [low 0-15 | high 0-15].
    col[j] = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(w, split), 0xD8);
  }
  for (std::size_t q = 0; q < 4; ++q) {
    t.lo[q] = _mm256_permute2x128_si256(col[q], col[q + 4], 0x20);
    t.hi[q] = _mm256_permute2x128_si256(col[q], col[q + 4], 0x31);
  }
}

// The row a decode row reads (k a multiple of 8): per 8 elements their even ones twice, then their
// odd ones twice, [x0 x2 x4 x6 x0 x2 x4 x6 x1 x3 x5 x7 x1 x3 x5 x7], the lanes of row_step's chains.
inline void parity_quads(const float* a, std::size_t k, float* out) {
  for (std::size_t r = 0; 8 * r < k; ++r) {
    const __m256 x = _mm256_loadu_ps(a + 8 * r);
    const __m256 e = _mm256_permutevar8x32_ps(x, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
    const __m256 o = _mm256_permutevar8x32_ps(x, _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7));
    _mm256_storeu_ps(out + 16 * r, e);
    _mm256_storeu_ps(out + 16 * r + 8, o);
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
      int4_step::prefetch_ahead(b, j0, r, nrows, false);
      int4_step::load(b, j0, cols, r, here, x);
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
      int4_step::prefetch_ahead(b, j0, r, nrows, false);
      int4_step::load(b, j0, cols, r, here, x);
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
  // Whole blocks of 8 columns two word rows a step, through the decode row's byte tables, their
  // codes from int4_row_codes' layout where b has it; the rest a word (8 codes) at a time, looked
  // up in its column's f32 table. Each step asks for the word rows kAhead on (a page or more
  // apart: GPTQ T 8 spent 21 % of its samples waiting on them), or the laid-out codes kStepsAhead
  // bytes on.
  if constexpr (std::is_same_v<CT, float>) {
    constexpr std::size_t kC = int4_step::kRowCols;
    const std::size_t blocks = np / kC, group_rows = b.group_size / 8;
    // Rows r (and r + 1 where two) of the columns past the whole blocks, from their words.
    const auto rest = [&](std::size_t r, bool two, std::size_t g) {
      for (std::size_t rr = r; rr < r + (two ? 2 : 1); ++rr)
        for (std::size_t j = kC * blocks; j < np; ++j)
          _mm256_storeu_ps(buf + j * ldk + 8 * rr,
                           int4_lookup8(b.words[rr * b.ldw + j0 + j], b.tables + ((j0 + j) * groups + g) * 16));
    };
    int4_step::ByteTables t[kInt4Panel / kC];
    for (std::size_t g = 0; r < nrows; ++g) {
      for (std::size_t i = 0; i < blocks; ++i)
        if (b.row_tables != nullptr)
          int4_step::load(b.row_tables + ((j0 + kC * i) / kC) * b.ldt + g * sizeof(int4_step::ByteTables), t[i]);
        else
          int4_step::byte_tables(b.tables + ((j0 + kC * i) * groups + g) * 16, groups * 16, t[i]);
      const std::size_t group_end = nrows - r < group_rows ? nrows : r + group_rows;
      const auto steps = [&](const auto& from) __attribute__((always_inline)) {
        for (; r < group_end; r += 2) {
          from.ahead(r);
          const bool two = r + 1 < group_end;
          for (std::size_t i = 0; i < blocks; ++i) {
            float* out = buf + kC * i * ldk + 8 * r;
            if (two) int4_step::expand_step<true>(from.template at<true>(r, i), t[i], out, ldk);
            else int4_step::expand_step<false>(from.template at<false>(r, i), t[i], out, ldk);
          }
          rest(r, two, g);
        }
      };
      if (b.row_codes != nullptr)
        steps(int4_step::CodeSteps{b.row_codes + j0 / kC * b.ldr, b.ldr, blocks, int4_step::kStepsAhead});
      else
        steps(int4_step::WordSteps{b, j0, np, nrows, false});
      r = group_end;
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

// Word rows in another order of k (simd/gemm.hpp int4_regroup). Each out word is built in a
// register from its eight sources, one uniform shift each: a loop the level's vectors run along
// the columns. On Zen 3 a chunk of 64 rows x 128 columns takes 8.1 us at the generic level (SSE2,
// where op 5 had compiled it) and 6.1 at avx2; Llama-3-8B act-order GPTQ T 1 without a pack
// 3.49-3.94 -> 2.87-3.93 ms in alternating processes (3.53-3.59 -> 2.88-3.01 in a quieter pair).
void int4_regroup(const std::uint32_t* words, std::size_t ldw, const std::uint32_t* order, std::size_t rows,
                  std::size_t n, std::uint32_t* out, std::size_t ldo) {
  for (std::size_t r = 0; r < rows; ++r) {
    const std::uint32_t* src[8];
    unsigned from[8];
    for (std::size_t i = 0; i < 8; ++i) {
      const std::uint32_t k = order[8 * r + i];
      src[i] = words + (k / 8) * ldw;
      from[i] = 4 * (k % 8);
    }
    std::uint32_t* __restrict dst = out + r * ldo;
    for (std::size_t j = 0; j < n; ++j) {
      std::uint32_t w = 0;
      for (unsigned i = 0; i < 8; ++i) w |= ((src[i][j] >> from[i]) & 0xFu) << (4 * i);
      dst[j] = w;
    }
  }
}

// The first n columns of b as f32 rows (the panel GEMM packs them), 16 columns at a time.
void int4_rows_f32(const Int4Columns& b, std::size_t n, std::size_t k, float* rows, std::size_t ldr) {
  const std::size_t groups = (k + b.group_size - 1) / b.group_size;
  for (std::size_t j0 = 0; j0 < n; j0 += kInt4Panel)
    expand_int4<float>(b, groups, j0, n - j0 < kInt4Panel ? n - j0 : kInt4Panel, k, rows + j0 * ldr, ldr);
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
// write_tile's reduction; so the outputs are bitwise those of the buffered path. Each group's
// tables are formed (Src::form) as the group begins; `next`: a full panel follows at j0 + 16.
template <class CT, class Src>
void int4_row_panel(std::size_t k, const CT* a, const Int4Columns& b, const Src& src, std::size_t j0, float* c,
                    bool accumulate, bool next) {
  constexpr std::size_t kP = kInt4Panel;
  const std::size_t nrows = k / 8, group_rows = b.group_size / 8;  // a multiple of the 4-row step
  F acc[kP];
#pragma GCC unroll 16
  for (std::size_t j = 0; j < kP; ++j) acc[j] = fzero();
  alignas(64) __m512i table[kP];
  for (std::size_t g = 0, r = 0; r < nrows; ++g) {
    src.template form<CT>(g, table);
    const std::size_t group_end = nrows - r < group_rows ? nrows : r + group_rows;
    for (; r < group_end; r += 4) {
      const std::size_t here = nrows - r < 4 ? nrows - r : 4;
      int4_step::prefetch_ahead(b, j0, r, nrows, next);
      __m512i x[4];
      int4_step::load(b, j0, 0xFFFF, r, here, x);
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
      if constexpr (std::is_same_v<CT, std::uint16_t>) {
        const __mmask32 valid = here == 4 ? ~__mmask32{0} : static_cast<__mmask32>((1u << (8 * here)) - 1u);
        const B av = here == 4 ? bload(a + 8 * r) : bload_n(a + 8 * r, 8 * here);
#pragma GCC unroll 16
        for (std::size_t j = 0; j < kP; ++j) {
          const __m512i code = int4_step::word_codes(x[j / 4], j % 4);
          acc[j] = bf16_dot(acc[j], av, B{_mm512_maskz_permutexvar_epi16(valid, code, _mm512_load_si512(&table[j]))});
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
            const __m512 t = _mm512_castsi512_ps(_mm512_load_si512(&table[j]));
            acc[j] = fmadd(av, F{_mm512_maskz_permutexvar_ps(full ? 0xFFFF : 0x00FF, code, t)}, acc[j]);
          }
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

#if defined(__AVX512BW__)
constexpr std::size_t kInt4RowCols = kInt4Panel;
#elif defined(__AVX2__)
constexpr std::size_t kInt4RowCols = int4_step::kRowCols;

// One row of A (as parity_quads lays it out) against 8 int4 columns, straight from the codes into
// the chains: per column the chain of tile_f32 over the expanded rows (k a multiple of 8, so
// every step is a whole word) and write_tile's reduction, so the bits of the buffered path. The
// chains of a column pair are two vectors, ev[q] with the even lanes of column q's chain and of
// column q + 4's, od[q] with the odd lanes of each, put back together at the end. `next`: 8 more columns
// follow at j0 + 8, whose first rows are fetched while this block ends.
template <class CT, class Src>
void int4_row_panel(std::size_t k, const float* a2, const Int4Columns& b, const Src& src, std::size_t j0, float* c,
                    bool accumulate, bool next) {
  static_assert(std::is_same_v<CT, float>, "AVX2 has no bf16 dot");
  constexpr std::size_t kC = int4_step::kRowCols;
  const std::size_t nrows = k / 8, group_rows = b.group_size / 8;  // group_rows: even
  F ev[4], od[4];
#pragma GCC unroll 4
  for (std::size_t q = 0; q < 4; ++q) ev[q] = od[q] = fzero();
  int4_step::ByteTables t;
  // The laid-out codes ask for nothing ahead: the row measured level with and without (its
  // lookups bound it).
  const auto steps = [&](const auto& from) __attribute__((always_inline)) {
    for (std::size_t g = 0, r = 0; r < nrows; ++g) {
      src.form(g, t);
      const std::size_t group_end = nrows - r < group_rows ? nrows : r + group_rows;
      for (; r + 2 <= group_end; r += 2) {
        from.ahead(r);
        int4_step::row_step<true>(from.template at<true>(r, 0), a2 + 16 * r, t, ev, od);
      }
      if (r < group_end) int4_step::row_step<false>(from.template at<false>(r, 0), a2 + 16 * r, t, ev, od);
      r = group_end;
    }
  };
  if (b.row_codes != nullptr)
    steps(int4_step::CodeSteps{b.row_codes + j0 / kC * b.ldr, b.ldr, 1, 0});
  else
    steps(int4_step::WordSteps{b, j0, kC, nrows, next});
  F acc[kC];
  for (std::size_t q = 0; q < 4; ++q) {
    // Lanes 0-3 and 4-7 of columns q (low half) and q + 4 (high half).
    const __m256 lo = _mm256_unpacklo_ps(ev[q].v, od[q].v), hi = _mm256_unpackhi_ps(ev[q].v, od[q].v);
    acc[q] = F{_mm256_permute2f128_ps(lo, hi, 0x20)};
    acc[q + 4] = F{_mm256_permute2f128_ps(lo, hi, 0x31)};
  }
  for (std::size_t q = 0; q < kC / 4; ++q) {
    float out[4];
    reduce_add4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3], out);
    for (std::size_t j = 0; j < 4; ++j) c[4 * q + j] = accumulate ? c[4 * q + j] + out[j] : out[j];
  }
}
#endif

#if defined(__AVX512BW__) || defined(__AVX2__)
// A decode row over the first `full` columns (whole panels of kInt4RowCols), panel j0's tables from
// src_of(j0); the row converted to the compute type once.
template <class CT, class TA, class SrcOf>
void int4_row_panels(std::size_t full, std::size_t k, const TA* a, const Int4Columns& b, SrcOf src_of, float* c,
                     bool accumulate) {
  Scratch<CT> a_buf(std::is_same_v<TA, CT> ? 0 : k);
  const CT* ac;
  if constexpr (std::is_same_v<TA, CT>) {
    ac = a;
  } else {
    convert_row(a, a_buf.get(), k);
    ac = a_buf.get();
  }
#if !defined(__AVX512BW__)
  LocalScratch<float, 4096> split(2 * k);
  int4_step::parity_quads(ac, k, split.get());
  ac = split.get();
#endif
  for (std::size_t j0 = 0; j0 < full; j0 += kInt4RowCols)
    int4_row_panel<CT>(k, ac, b, src_of(j0), j0, c + j0, accumulate, j0 + kInt4RowCols < full);
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
    const std::size_t full = n / kInt4Panel * kInt4Panel;
    const auto tables_of = [&](std::size_t j0) { return int4_step::FromTables{b.tables + j0 * groups * 16, groups}; };
    int4_row_panels<CT>(full, k, a, b, tables_of, c, accumulate);
    if (full == n) return;
    const Int4Columns rest{b.words + full, b.ldw, b.tables + full * groups * 16, b.group_size};
    gemm_blocks<CT>(m, n - full, k, a, lda, Int4Rows<CT>{rest, groups}, c + full, ldc, accumulate);
    return;
  }
#endif
  gemm_blocks<CT>(m, n, k, a, lda, Int4Rows<CT>{b, groups}, c, ldc, accumulate);
}

// Value tables of int4 columns, one vector of codes at a time per column.
void int4_tables(const std::uint16_t* scales, bool scales_f16, const std::uint32_t* zero_words, int zero_bias,
                 std::size_t n, float* tables, std::size_t stride) {
  static_assert(16 % kLanes == 0, "a table is whole vectors");
  for (std::size_t c = 0; c < n; ++c) {
    // The level's f16 converter is exact (subnormals included, whatever MXCSR says).
    const F s = scales_f16 ? f16_to_f32(hsplat(static_cast<std::int16_t>(scales[c])))
                           : floats(isplat(static_cast<std::int32_t>(std::uint32_t{scales[c]} << 16)));
    const float z = zero_words ? static_cast<float>(((zero_words[c / 8] >> (4 * (c % 8))) & 0xFu) + zero_bias) : 8.0f;
    for (std::size_t q = 0; q < 16; q += kLanes) {
      const I u = bits((fload(kInt4Codes + q) - fsplat(z)) * s);
      fstore(tables + c * stride + q, floats(shl<16>(bf16_round_bits(u))));
    }
  }
}

#if defined(__AVX2__) && !defined(__AVX512BW__)
// simd/gemm.hpp int4_row_tables: each block's group tables as the decode row forms them, stored.
void int4_row_tables(const Int4Groups& q, std::size_t n, std::size_t groups, std::uint8_t* out, std::size_t ldt) {
  Int4Groups from = q;
  from.row_tables = nullptr;
  for (std::size_t b = 0; b < n / int4_step::kRowCols; ++b)
    for (std::size_t g = 0; g < groups; ++g) {
      int4_step::ByteTables t;
      int4_step::FromGroups{from, b * int4_step::kRowCols}.form(g, t);
      auto* dst = reinterpret_cast<__m256i*>(out + b * ldt + g * sizeof(t));
      for (std::size_t i = 0; i < 4; ++i) {
        _mm256_storeu_si256(dst + i, t.lo[i]);
        _mm256_storeu_si256(dst + 4 + i, t.hi[i]);
      }
    }
}

// simd/gemm.hpp int4_row_codes: each step's code bytes as StepCodes reads them.
void int4_row_codes(const Int4Columns& b, std::size_t n, std::size_t k, std::uint8_t* out, std::size_t ldr) {
  const std::size_t nrows = k / 8;
  for (std::size_t blk = 0; blk < n / int4_step::kRowCols; ++blk)
    for (std::size_t r = 0; r < nrows; r += 2) {
      const std::uint32_t* w = b.words + r * b.ldw + blk * int4_step::kRowCols;
      const int4_step::StepWords step =
          r + 1 < nrows ? int4_step::step_words<true>(w, b.ldw) : int4_step::step_words<false>(w, b.ldw);
      for (std::size_t h = 0; h < 2; ++h) {
        __m256i c[2];
        step.half(h, c);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + blk * ldr + r / 2 * int4_step::kStepBytes + 32 * h),
                            _mm256_or_si256(c[0], _mm256_slli_epi16(c[1], 4)));
      }
    }
}
#endif

#if defined(__AVX512BW__) || defined(__AVX2__)
// int4_row_bf16 / int4_row_f32 (simd/gemm.hpp): gemm_int4's decode row with each panel's tables
// formed from the groups' scales and zero points; columns past the last full panel (and k = 0)
// take the buffered path over tables int4_tables writes for them alone.
template <class TA>
void gemm_int4_row(std::size_t n, std::size_t k, const TA* a, const Int4Columns& b, const Int4Groups& q, float* c,
                   bool accumulate) {
  constexpr bool kBf16 = kHasBf16Dot && !std::is_same_v<TA, float>;
  using CT = std::conditional_t<kBf16, std::uint16_t, float>;
  const std::size_t groups = (k + b.group_size - 1) / b.group_size;
  const std::size_t full = k > 0 ? n / kInt4RowCols * kInt4RowCols : 0;
  if (full > 0)
    int4_row_panels<CT>(full, k, a, b, [&](std::size_t j0) { return int4_step::FromGroups{q, j0}; }, c, accumulate);
  if (full == n) return;
  const std::size_t rest = n - full;
  Scratch<float> tables(rest * groups * 16);
  for (std::size_t g = 0; g < groups; ++g)
    int4_tables(q.scales + g * q.lds + full, q.scales_f16, q.zero_words ? q.zero_words + g * q.ldz + full / 8 : nullptr,
                q.zero_bias, rest, tables.get() + g * 16, groups * 16);
  const Int4Columns cols{b.words + full, b.ldw, tables.get(), b.group_size};
  gemm_blocks<CT>(1, rest, k, a, k, Int4Rows<CT>{cols, groups}, c + full, rest, accumulate);
}
#endif

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
