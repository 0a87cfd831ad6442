// Dot-product tile kernels ("GEMM tiles"): ISA-neutral declarations (no intrinsics).
//
//   C[i*ldc + j] = (accumulate ? C[i*ldc + j] : 0) + sum_{p<k} A[i*lda + p] * B[j*ldb + p]
//   for i < m, j < n
//
// A and B are both row-major along the reduction axis (rows of A: query heads, rows of B: keys,
// k: head_dim), the layout of the indexers' q and paged K rows; no packing or transposition is
// needed by the caller. Strides are in elements; any alignment; m, n, k may be 0 (k = 0 gives
// C = accumulate ? C : 0). Elements of C outside the m x n tile are never touched, and C is not
// read when accumulate is false.
//
// Element types: f32 (float), bf16 (uint16_t bit patterns), f8e4m3 (uint8_t codes, exact decode).
// Accumulation is in f32 (at least): each of the kLanes partial sums runs over k / lanes products,
// then a fixed reduction tree; so |err| <= (k/lanes + log2 lanes + 1) * 2^-24 * sum|a*b| per
// element, inside the spec's c*k*2^-24*sum|a*b| bound. NaN inputs propagate. Results are
// deterministic for a given level (no dependence on threads or alignment).
//
// The kernels convert B once per register tile of `nr` rows (f8 -> f32 or bf16, bf16 -> f32 where
// there is no native bf16 dot) and reuse it for every row of A: the "decode K once per key tile,
// use it for all query heads" pattern. Calls of at most `mr` rows (decode tokens) widen B to f32
// in the tiles' registers instead of into a converted panel: the same values in the same chains. A is converted once per call when its type is not the
// compute type, so callers that reuse one A across many calls (a query against many pages) should
// convert it themselves and call f32_f8 / bf16_f8 (bf16_f8 when `bf16_dot` is true).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlakit::simd {

template <class TA, class TB>
using GemmFn = void (*)(std::size_t m, std::size_t n, std::size_t k, const TA* a, std::size_t lda, const TB* b,
                        std::size_t ldb, float* c, std::size_t ldc, bool accumulate);

// B as columns of 4-bit codes with a value table per (column, group), the GPTQ layout read in
// place: row j of B is W[j][p] = tables[(j * groups + p / group_size) * 16 + q], where q is nibble
// p % 8 (bits 4(p % 8) ..) of words[(p / 8) * ldw + j] and groups = ceil(k / group_size). Every
// table value is a bf16 value held as f32 (the bf16 tiles take its upper half).
struct Int4Columns {
  const std::uint32_t* words;
  std::size_t ldw;  // words between consecutive rows of 8 codes (the number of columns in GPTQ)
  const float* tables;
  std::size_t group_size;  // a multiple of 32: a vector step never spans two groups
  // The same values as the decode row's tables formed ahead (int4_row_tables below, Int4Groups'
  // layout: block b of int4_row_table_cols columns, group g at row_tables + b * ldt + g * bytes),
  // which the expansion of a level that has int4_row_tables reads for whole blocks instead of
  // `tables` (then read only for the columns past the last whole block, and null where there are
  // none); null: `tables` alone. Levels without int4_row_tables read `tables` alone.
  const std::uint8_t* row_tables = nullptr;
  std::size_t ldt = 0;
  // The codes of the whole blocks of int4_row_table_cols columns as int4_row_codes of the same
  // level lays them out (below: block b's step s at row_codes + b * ldr + s * int4_row_code_bytes),
  // which that level's decode row and expansion read instead of `words` for those blocks (`words`
  // still read for the columns past them); null: `words` alone. Levels without int4_row_codes
  // read `words` alone.
  const std::uint8_t* row_codes = nullptr;
  std::size_t ldr = 0;
};
template <class TA>
using Int4GemmFn = void (*)(std::size_t m, std::size_t n, std::size_t k, const TA* a, std::size_t lda,
                            const Int4Columns& b, float* c, std::size_t ldc, bool accumulate);

// GPTQ's group parameters of int4 columns, read in place: column j's scale for group g at
// scales[g * lds + j] (f16 bits when scales_f16, else bf16 bits), its zero point nibble j % 8 of
// zero_words[g * ldz + j / 8] plus zero_bias, or 8 when zero_words is null (int4_tables below).
struct Int4Groups {
  const std::uint16_t* scales;
  std::size_t lds;
  bool scales_f16;
  const std::uint32_t* zero_words;
  std::size_t ldz;
  int zero_bias;
  // A decode row's tables formed ahead by int4_row_tables of the same level (below), block b's
  // group g at row_tables + b * ldt + g * int4_row_table_bytes; null: the row forms them from the
  // scales and zero points as it goes. Either way the same bits.
  const std::uint8_t* row_tables = nullptr;
  std::size_t ldt = 0;
};
template <class TA>
using Int4RowFn = void (*)(std::size_t n, std::size_t k, const TA* a, const Int4Columns& b, const Int4Groups& q,
                           float* c, bool accumulate);

// Block scales of gemm_tiles (below): the scale of block q of k for column j is
// s[(j / cols) * lds + q].
struct TileScales {
  const float* s;
  std::size_t lds;
  std::size_t cols;   // columns per scale row, a multiple of tile_cols
  std::size_t block;  // k per scale, a multiple of tile_k, at most 1024
};

struct GemmKernels {
  const char* level;
  unsigned mr, nr;  // register tile: rows of A x rows of B
  bool bf16_dot;    // bf16 x bf16 products run on a native bf16 dot instruction (vdpbf16ps)
  GemmFn<float, float> f32_f32;
  GemmFn<std::uint16_t, std::uint16_t> bf16_bf16;
  GemmFn<std::uint8_t, std::uint8_t> f8_f8;
  GemmFn<float, std::uint8_t> f32_f8;
  GemmFn<std::uint16_t, std::uint8_t> bf16_f8;
  // C (+)= A·Bᵀ with B given as int4 columns (k a multiple of 8): the same register tiles, chains
  // and results, bit for bit, as bf16_bf16 (int4_bf16) or f32_f32 (int4_f32) over B expanded to
  // bf16 rows (widened to f32 for f32_f32). Columns are expanded 16 at a time (one cache line of
  // every word row) once per block of A rows, straight from the strided words; a single row of A
  // (a decode token) takes them into its dot chains without a buffer on AVX-512 levels.
  Int4GemmFn<std::uint16_t> int4_bf16;
  Int4GemmFn<float> int4_f32;
  // The value tables of n int4 columns for one group: tables[c * stride + q] = bf16((q - z[c]) *
  // s[c]) held as f32, for c < n and q < 16, where s[c] is scales[c] (f16 bits when scales_f16,
  // else bf16 bits) and z[c] is nibble c % 8 of zero_words[c / 8] plus zero_bias (1 for GPTQ v1
  // checkpoints, which store z - 1; 0 for v2), or 8 when zero_words is null. (q - z) has at most 5
  // significant bits and s at most 11, so the product is exact before the one rounding to bf16 (to
  // nearest even; NaN stays a quiet NaN).
  void (*int4_tables)(const std::uint16_t* scales, bool scales_f16, const std::uint32_t* zero_words, int zero_bias,
                      std::size_t n, float* tables, std::size_t stride);
  // One row of A (a decode token) against n int4 columns whose tables come from their groups'
  // scales and zero points (b.tables unused): the bits of int4_bf16 / int4_f32 with m = 1 over the
  // tables int4_tables makes of q, each table formed as its group begins, in registers and L1,
  // instead of written for the call and read back. Null on generic.
  Int4RowFn<std::uint16_t> int4_row_bf16;
  Int4RowFn<float> int4_row_f32;

  // The rest of an attention over gathered rows (sparse MLA), beside the score tiles above:
  //
  // f32_nn: C (+)= A·B with B row-major along n (the P·V product: rows of B are value rows):
  //   C[i*ldc + j] = (accumulate ? C[i*ldc + j] : 0) + sum_{p<k} A[i*lda + p] * B[p*ldb + j],
  //   one f32 chain per output, p in order (|err| <= 2 (k + 1) 2^-24 (|C| + sum|a*b|)).
  //   Same contract as the tiles otherwise: any alignment and strides, m, n, k may be 0, nothing
  //   outside the m x n tile touched, C not read when accumulate is false.
  GemmFn<float, float> f32_nn;
  // f32_bf16_nn: f32_nn with B in bf16 (value rows kept in bf16), widened exactly as it is read:
  //   the same chains and bits as f32_nn over B widened to f32.
  GemmFn<float, std::uint16_t> f32_bf16_nn;
  // dst[i] = bf16(x[i]) for i < n, as mlakit::f32_to_bf16 (to nearest even, subnormals kept, NaN
  // quieted).
  void (*round_bf16)(const float* x, std::uint16_t* dst, std::size_t n);
  // x split into three bf16 parts for products that must keep f32 precision on a bf16 unit:
  //   hi[i] = bf16(x[i]), mid[i] = bf16(x[i] - hi[i]), lo[i] = bf16(x[i] - hi[i] - mid[i]) for
  //   i < n (each difference exact in f32, each rounding as round_bf16), so that for finite x
  //   |x - hi - mid - lo| <= 2^-25 |x| where the parts stay normal; NaN gives NaN parts.
  void (*split_bf16x3)(const float* x, std::size_t n, std::uint16_t* hi, std::uint16_t* mid, std::uint16_t* lo);
  // The pieces of a block-scaled projection whose output feeds later NN products:
  // f32_nn_scaled is f32_nn with a scale per row of A and per column of B on each tile's sum:
  //   C[i*ldc + j] = (accumulate ? C[i*ldc + j] : 0) + (rs[i] * cs[j]) * sum_p A[i*lda + p] * B[p*ldb + j],
  //   the sum one chain from zero as f32_nn's, the scale product rounded to f32, then one fused
  //   multiply-add (on generic, which has none, a product and a sum). (bf16_nn_scaled below is
  //   the same on the pair dot.)
  // transpose_bf16 rounds f32 rows into columns: dst[j*ldd + i] = bf16(x[i*ldx + j]) for i < rows,
  //   j < n, rounded as round_bf16; nothing else of dst is written. (Sixteen rows are read as the
  //   lanes of a gather: 16·ldx must stay below 2^31.)
  void (*f32_nn_scaled)(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* b,
                        std::size_t ldb, const float* rs, const float* cs, float* c, std::size_t ldc, bool accumulate);
  void (*transpose_bf16)(const float* x, std::size_t ldx, std::size_t rows, std::size_t n, std::uint16_t* dst,
                         std::size_t ldd);
  // transpose_f32 copies f32 rows into columns: dst[j*ldd + i] = x[i*ldx + j] for i < rows, j < n
  //   (the same bits); nothing else of dst is written.
  void (*transpose_f32)(const float* x, std::size_t ldx, std::size_t rows, std::size_t n, float* dst,
                        std::size_t ldd);
  // widen_bf16: dst[i] = f32(x[i]) for i < n (exact).
  void (*widen_bf16)(const std::uint16_t* x, float* dst, std::size_t n);
  // x[i] = (x[i] * f[i]) * c for i < n (without the f[i] factor when f is null); returns the
  // largest result, NaN if any result is NaN, -inf when n is 0.
  float (*scale_max)(float* x, const float* f, float c, std::size_t n);
  // x[i] = exp(x[i] - m) for i < n, where x[i] - m <= 0 or NaN (m the maximum of the x): within
  // 2 ulp, results below 2^-124 (x[i] - m < -86.5) flushed to 0, NaN kept. Returns the f32 sum of
  // the results (kLanes partial sums in order, then a fixed tree).
  float (*exp_sum)(float* x, float m, std::size_t n);
  // x[j] kept where bit j of bits (32 a word, low bit first) is set, else `fill`, for j < n.
  void (*mask_select)(float* x, const std::uint32_t* bits, std::size_t n, float fill);
  // x[i] = f32(bf16(x[i] * f)) for i < n: one f32 multiply, then rounded to bf16 (nearest even,
  // NaN quieted) and kept as f32.
  void (*scale_round_bf16)(float* x, std::size_t n, float f);
  // Where bf16_dot is true (null elsewhere), P·V on the bf16 pair dot: bf16_nn is f32_nn with A and
  // B in bf16 and B as zipped row pairs, Bz[q*ldb + 2j + e] = B[2q + e][j] (zip_rows_bf16 writes
  // them; a missing last row as 0), one f32 chain of pair dots per output; to_bf16_scaled rounds
  // the f32 weights into A: dst[i] = bf16(x[i] * f[i]) (to nearest even; no factor when f is null;
  // f32 subnormals become 0, as vcvtne2ps2bf16 reads them).
  GemmFn<std::uint16_t, std::uint16_t> bf16_nn;
  void (*zip_rows_bf16)(const std::uint16_t* r0, const std::uint16_t* r1, std::size_t n, std::uint16_t* dst);
  void (*to_bf16_scaled)(const float* x, const float* f, std::uint16_t* dst, std::size_t n);
  // Where bf16_dot is true (null elsewhere), the same pieces on the pair dot:
  // bf16_nn_scaled is bf16_nn with a scale per row of A and per column of B on each tile's sum:
  //   C[i*ldc + j] = (accumulate ? C[i*ldc + j] : 0) + (rs[i] * cs[j]) * sum_q pair dots,
  //   the scale product rounded to f32, then one fused multiply-add.
  // pack_pairs_bf16 rounds f32 rows into pair-major words, the rows along each pair row:
  //   dst[2 (p*ldd + i) + e] = bf16(x[i*ldx + 2p + e]) for i < rows, 2p + e < n (a missing last
  //   element 0), rounded as mlakit::f32_to_bf16 (to nearest even, subnormals kept, NaN quieted).
  //   Nothing else of dst is written; 16·ldx below 2^31 as for transpose_bf16.
  void (*bf16_nn_scaled)(std::size_t m, std::size_t n, std::size_t k, const std::uint16_t* a, std::size_t lda,
                         const std::uint16_t* b, std::size_t ldb, const float* rs, const float* cs, float* c,
                         std::size_t ldc, bool accumulate);
  void (*pack_pairs_bf16)(const float* x, std::size_t ldx, std::size_t rows, std::size_t n, std::uint16_t* dst,
                          std::size_t ldd);

  // Where bf16_dot is true (null elsewhere), weights scaled per block of k (fp8 block-scaled
  // weights with bf16 activations):
  //   C[i*ldc + j] = (accumulate ? C[i*ldc + j] : 0) + sum_q scales[q] * sum_{p in block q} A[i*lda + p] * B[j*ldb + p]
  // with blocks [q·block, (q+1)·block) of k (block > 0; the last may be partial; a multiple of 32
  // keeps every vector step inside one block). Products are exact (bf16 x fp8 in f32); per output
  // the lanes of a block's pair dots are multiplied by its scale and added to the running lanes
  // (one FMA per block), which are reduced once (the same tree as bf16_bf16). So the scale never
  // touches an operand and the bf16 dot stays usable. |err| <= (2k/lanes + k/block + log2 lanes +
  // 1)·2^-24·sum|s·a·b|. Same contract as the tiles otherwise; m = 1 gives each row the bits it
  // gets among many rows.
  void (*bf16_f8_block_scaled)(std::size_t m, std::size_t n, std::size_t k, const std::uint16_t* a, std::size_t lda,
                               const std::uint8_t* b, std::size_t ldb, const float* scales, std::size_t block,
                               float* c, std::size_t ldc, bool accumulate);

  // Panel GEMM: the large projections' f32 kernel (outer-product register tiles over a packed
  // panel of B, as BLAS sgemm kernels are blocked). B comes as a panel of panel_cols columns
  // along p: panel[p*panel_cols + j] for p < k, written by pack_panel_f32 / pack_panel_bf16 from
  // rows along k (panel[p*panel_cols + j] = f32(B[j*ldb + p]) for j < cols, columns cols.. zero).
  // gemm_panel: C[i*ldc + j] = (accumulate ? C[i*ldc + j] : 0) + sum_{p<k} A[i*lda + p] * panel[p*panel_cols + j]
  //   for i < m, j < n (n <= panel_cols), one FMA chain per output over p in order, started from
  //   C when accumulating (on generic, which has no FMA, a product and a sum per step): so
  //   |err| <= (k + 1)·2^-24·(|C| + sum|a·b|), the bits independent of m, of the row's place
  //   among the m and of any split of the rows. Blocks of k continued through accumulate give
  //   the bits of one call over all of k. Nothing outside the m x n tile touched; C not read when
  //   accumulate is false. Callers keep the panel in L1 (k up to a few hundred) and A rows in L2.
  unsigned panel_rows;  // rows of A per register tile
  unsigned panel_cols;  // columns of B per panel: two vectors
  void (*pack_panel_f32)(const float* b, std::size_t ldb, std::size_t cols, std::size_t k, float* panel);
  void (*pack_panel_bf16)(const std::uint16_t* b, std::size_t ldb, std::size_t cols, std::size_t k, float* panel);
  // pack_panel_f8_scaled: the panel of fp8 (e4m3) weight rows with one scale per `block` of k
  //   shared by the panel's columns (a block-scaled weight's 128 x 128 blocks, the panel inside one
  //   block of columns): panel[p*panel_cols + j] = f32(decode(B[j*ldb + p]) * scales[p / block]),
  //   the code decoded exactly (NaN codes NaN) and one rounding, the reference's code·scale.
  //   Eight elements at a time under one scale where block is a multiple of 8, else one by one.
  void (*pack_panel_f8_scaled)(const std::uint8_t* b, std::size_t ldb, std::size_t cols, std::size_t k,
                               const float* scales, std::size_t block, float* panel);
  void (*gemm_panel)(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* panel,
                     float* c, std::size_t ldc, bool accumulate);
  // gemm_panel_scaled: gemm_panel with a scale per row of A and per column of B on the call's sum,
  //   C[i*ldc + j] = (accumulate ? C[i*ldc + j] : 0) + (rs[i] * cs[j]) * sum_{p<k} A[i*lda + p] * panel[p*panel_cols + j],
  //   the sum one chain from zero as gemm_panel's, the scale product rounded to f32, then one fused
  //   multiply-add: the bits of f32_nn_scaled over the same B (one block-scaled group per call).
  void (*gemm_panel_scaled)(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda,
                            const float* panel, const float* rs, const float* cs, float* c, std::size_t ldc,
                            bool accumulate);
  // gemm_panel_packed: gemm_panel (the same chains, the same bits) over A packed by pack_rows_*:
  //   m rows along k (stride lda) widened to f32 in groups of panel_rows rows, group g at
  //   ap + g * panel_rows * k, row r's element p at p * panel_rows + r, a last group's missing rows
  //   zero (ap holds round_up(m, panel_rows) * k floats). A register tile's broadcasts at one p
  //   then come from one run of floats instead of panel_rows rows: for callers that read the same
  //   rows against many panels.
  void (*pack_rows_f32)(const float* a, std::size_t lda, std::size_t m, std::size_t k, float* ap);
  void (*pack_rows_bf16)(const std::uint16_t* a, std::size_t lda, std::size_t m, std::size_t k, float* ap);
  void (*gemm_panel_packed)(std::size_t m, std::size_t n, std::size_t k, const float* ap, const float* panel, float* c,
                            std::size_t ldc, bool accumulate);
  // The first n int4 columns of b (k a multiple of 8) expanded to f32 rows for pack_panel_f32:
  // rows[j*ldr + p] = B[j][p] as Int4Columns defines it (the table value, exact in f32).
  void (*int4_rows_f32)(const Int4Columns& b, std::size_t n, std::size_t k, float* rows, std::size_t ldr);
  // The panel of the first cols (<= panel_cols) int4 columns of b (k a multiple of 8), formed
  // straight from the codes and tables: panel[p*panel_cols + j] = B[j][p], the values
  // int4_rows_f32 gives, so pack_panel_f32 over those rows gives the same panel.
  void (*pack_panel_int4)(const Int4Columns& b, std::size_t cols, std::size_t k, float* panel);
  // int4 word rows regrouped into another order of k (act-order GPTQ taken in group order): out
  // row r's column j holds in nibble i the code of channel order[8r + i] of column j of `words`
  // (channel k's code in nibble k % 8 of word row k / 8; rows ldw words apart), for r < rows and
  // j < n; out rows ldo words apart, nothing else written.
  void (*int4_regroup)(const std::uint32_t* words, std::size_t ldw, const std::uint32_t* order, std::size_t rows,
                       std::size_t n, std::uint32_t* out, std::size_t ldo);
  // The decode row's tables (int4_row_bf16 / int4_row_f32) formed ahead, for callers that keep
  // them beside the codes (a layer's pack): int4_row_table_bytes per block of int4_row_table_cols
  // columns and group, exactly as the row forms them as its groups begin. Block b < n / cols
  // and group g < groups of q at out + b * ldt + g * bytes. Zero and null where a level forms its
  // tables in registers alone (generic, AVX-512).
  unsigned int4_row_table_cols, int4_row_table_bytes;
  void (*int4_row_tables)(const Int4Groups& q, std::size_t n, std::size_t groups, std::uint8_t* out, std::size_t ldt);
  // The codes of the first n / int4_row_table_cols whole blocks of b's columns (k a multiple of 8)
  // laid out for this level's decode row and expansion (Int4Columns::row_codes), for callers that
  // keep them beside the codes: a step of a block (word rows 2s and 2s + 1, a missing last row as
  // zero codes) in int4_row_code_bytes, block b's step s at out + b * ldr + s * bytes, ldr at
  // least ceil(k / 16) * bytes; nothing else written. Zero and null where a level reads words alone.
  unsigned int4_row_code_bytes;
  void (*int4_row_codes)(const Int4Columns& b, std::size_t n, std::size_t k, std::uint8_t* out, std::size_t ldr);

  // Tile GEMM, where the level has AMX tiles (zero and null elsewhere): bf16 activation rows
  // against weights packed once into the pair layout of the tile unit's B operand.
  // pack_tiles_bf16 / pack_tiles_f8 write columns [0, cols) of B (rows along k, stride ldb; fp8
  //   codes decoded exactly to bf16) as strips of 16 columns: strip s at packed + s * ldp (ldp >=
  //   16 * tile_pack_k(k)), pair row p (k = 2p, 2p + 1) at 32p within it, column j's pair at 2j,
  //   k = 2p in the low half; columns past cols (to the strip's end) and k past k (to
  //   tile_pack_k(k)) are zero. A chunk of k starting at a multiple of tile_k continues a strip
  //   at + 16·k0.
  // gemm_tiles: C[i*ldc + j] = (accumulate ? C[i*ldc + j] : 0) + sum_p A[i*lda + p] * B[j][p] for
  //   i < m, j < n, with B in the pair layout: B[j][2q + e] at b[(j / 16) * ldp + q * ldq +
  //   2 (j % 16) + e], for q up to tile_pack_k(k) / 2 (pairs past k must hold finite values; A is
  //   read as zero there): ldq = 32 for packed strips, or B zipped by pairs of rows along n
  //   (zip_rows_bf16: ldp = 32, ldq = twice the zipped row length), read in place. Each output is
  //   a chain of TDPBF16PS steps of 32 k: per step the even and the odd products summed apart
  //   from 0 (one fused multiply-add rounded to nearest even each), their sum added to the running
  //   sum; bf16 subnormal inputs read as 0 and every result flushed to zero where subnormal, as
  //   the tile unit does (so |err| <= (k/2 + k/32 + 1)·2^-24·(|C| + sum|a·b|) for normal
  //   operands). With scales: each block of scales->block k (a multiple of tile_k up to 1024,
  //   counted from the call's first k) is such a chain from zero, and S += s·chain by one f32 FMA
  //   per block, S starting at C (accumulating) or 0; s = scales->s[(j / scales->cols) *
  //   scales->lds + q] for the block q of column j (scales->cols a multiple of tile_cols). The
  //   bits depend only on the operands, never on m, n, the row's or column's place, or the
  //   thread. Nothing outside the m x n tile touched.
  unsigned tile_rows, tile_cols, tile_k;  // the block of C one pass of tiles computes; k per step
  void (*pack_tiles_bf16)(const std::uint16_t* b, std::size_t ldb, std::size_t cols, std::size_t k,
                          std::uint16_t* packed, std::size_t ldp);
  void (*pack_tiles_f8)(const std::uint8_t* b, std::size_t ldb, std::size_t cols, std::size_t k,
                        std::uint16_t* packed, std::size_t ldp);
  void (*gemm_tiles)(std::size_t m, std::size_t n, std::size_t k, const std::uint16_t* a, std::size_t lda,
                     const std::uint16_t* b, std::size_t ldp, std::size_t ldq, const TileScales* scales, float* c,
                     std::size_t ldc, bool accumulate);
};

// k rounded up to whole tile steps (the packed strips' k).
constexpr std::size_t tile_pack_k(std::size_t k) { return (k + 31) / 32 * 32; }

}  // namespace mlakit::simd
