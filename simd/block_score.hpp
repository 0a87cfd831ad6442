// Block-max score kernels ("query rows in lanes"): ISA-neutral declarations (no intrinsics).
//
// The MSA block indexer scores every query row (token, index head) against every visible key and
// keeps, per key block, the maximum of scale * q.k. These kernels compute that maximum for many
// query rows at once against one block of keys:
//
//   out[r] = max over keys j < min(n, limit[r]) of  scale * dot(q_r, k_j)      r < rows
//
// Layout. Query rows are packed by `pack_q` into `packed_q_bytes(rows, dim)` bytes, in groups of
// `lanes` rows, transposed so that one vector holds one step of every row of a group (rows past
// the end are 0). A step is 4 bytes per lane: one element as f32 (exact from bf16) on levels that
// multiply in f32, one pair of elements (2s, 2s+1) as bf16 on levels with a bf16 pair dot
// (vdpbf16ps; dim odd: the last pair's second element is 0). On the vector levels (avx2,
// avx512, avx512bf16) a call of at most `pair_rows` = lanes / 2 rows (a decode token of Hi <= 8
// index heads; Hi <= 4 on avx2) packs each row twice (lanes 2h and 2h+1 hold row h) and scores
// two keys per vector; block_max must get the `rows` pack_q got.
// The amx level packs every call as the pair-dot levels pack their many-row calls, each group
// padded with zero steps to a whole number of 16 (its tiles read 16 steps at a time); it has no
// two-keys-per-vector path (pair_rows 0): a decode token's rows run on the tiles too.
// Keys are n rows of `dim` elements, `ldk` elements apart, bf16 bit patterns or f8e4m3 codes
// (decoded exactly, as fp8_decode does). Key rows are converted to the step type once per call,
// in chunks held in `scratch` (bf16 rows of even dim are read in place on the pair-dot levels),
// and every key row is used by all the groups of the call: the "decode the page once, use it for
// every query row" pattern. The product runs as a broadcast of one key step against a vector of
// `lanes` query rows, so a group of rows needs no horizontal reduction and the block maximum is a
// vertical one.
//
// Arithmetic. dot accumulates the steps s = 0, 1, ... in that order into one f32 chain per
// (row, key): f32 levels do one multiply-add per element (fused where the level has FMA); pair-dot
// levels do one vdpbf16ps per pair, which adds the (exact) product of the pair's second elements,
// then that of the first, each addition rounded to nearest even (as the instruction is specified;
// the kernel tests hold it bitwise to a scalar model of that). Then one multiply by `scale`. A row's
// score therefore depends only on the row, the key and the level, never on the lane, the group,
// the number of rows, the two-keys layout, n, `limit` or the chunking: callers may cut the work
// into any tiles and get bitwise the same maxima (and the same ones on a decode and a prefill
// path). The error of a score is at most (dim + 1) * 2^-24 * |scale| * sum_d |q_d k_d|
// (sequential summation, at most dim roundings), inside the spec's bound.
//
// The amx level computes the dots as TDPBF16PS tile products, 16 keys x 16 rows x 32 dims each,
// into one f32 accumulator per (row, key) that is carried from one 32-dim chunk to the next in dim
// order. Within one instruction the hardware sums the 16 even products (dims 2k of the chunk) and
// the 16 odd ones (dims 2k+1) apart, each from 0 in dim order with one rounding to nearest even
// per fused multiply-add, adds the two sums, then adds that to the accumulator, as the SDM orders
// it (the Intrinsics Guide's wording, each pair added to the accumulator in turn, is not what the
// hardware does: the kernel tests hold a real AMX CPU to the SDM order bit for bit). bf16
// subnormal inputs and the accumulator read as zero and subnormal results are flushed (DAZ/FTZ,
// MXCSR ignored), as on vdpbf16ps below. So an amx score and an avx512bf16 score of the same row
// and key may differ in the last bits, but within the amx level a score depends only on the row
// and the key, not on the number of rows (decode or prefill), the groups, n, limit or the tiling.
// The bound above holds: no product passes through more than dim roundings (at most 16 + 2 per
// chunk, and one per later chunk).
// Key rows are the tiles' first operand as they lie in the page (bf16 of a dim that is a multiple
// of 32, 16 keys at a time) or converted into `scratch` (fp8, other dims, a last partial tile).
//
// Subnormals on the pair-dot levels: vdpbf16ps reads bf16 subnormal inputs as zero and flushes
// subnormal results to zero, whatever MXCSR says. A query or key element below 2^-126 in magnitude
// contributes 0 (and the f8e4m3 codes are never bf16 subnormals, so this concerns bf16 queries and
// bf16 keys only), and a partial sum below 2^-126 becomes 0: each adds at most
// |scale| * 2^-126 * (|other factor| resp. 1) of absolute error beyond the bound above. A user with
// subnormal queries who needs them counted should cap the level at avx512 (MLAKIT_MAX_ISA).
//
// limit (optional, i32 [groups * lanes], groups = ceil(rows / lanes)): row r sees keys
// j < limit[r] (values <= 0 see none, values >= n see all); nullptr: every row sees all n keys.
// That is the per-token causal cut of a block. Keys no row of a group sees are not multiplied;
// keys no row of the call sees are not even converted (the caller still must pass n rows that
// exist).
//
// NaN. out[r] is NaN when the score of any key r sees is NaN (a NaN key element, or inf * 0);
// -inf when r sees no key. +0 and -0 may come out either way for a block whose maximum is zero.
// out holds groups * lanes values; those of rows >= rows are unspecified.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlakit::simd {

struct BlockScoreKernels {
  const char* level;
  unsigned lanes;  // query rows per group
  std::size_t (*packed_q_bytes)(std::size_t rows, std::size_t dim);
  // Packs `rows` bf16 rows of `dim` elements (`ldq` apart) at qt (any alignment).
  void (*pack_q)(const std::uint16_t* q, std::size_t rows, std::size_t dim, std::size_t ldq, void* qt);
  // Bytes of scratch one block call with `rows` rows and `dim` needs (any alignment is fine).
  std::size_t (*scratch_bytes)(std::size_t rows, std::size_t dim);
  // next_k / next_n (optional): the key rows (same ldk) the caller reads next; the kernel
  // prefetches them, spread over its own work. They are not read otherwise.
  void (*block_max_bf16)(std::size_t rows, std::size_t dim, const void* qt, const std::uint16_t* k, std::size_t ldk,
                         std::size_t n, const std::int32_t* limit, float scale, float* out, void* scratch,
                         const std::uint16_t* next_k, std::size_t next_n);
  void (*block_max_f8)(std::size_t rows, std::size_t dim, const void* qt, const std::uint8_t* k, std::size_t ldk,
                       std::size_t n, const std::int32_t* limit, float scale, float* out, void* scratch,
                       const std::uint8_t* next_k, std::size_t next_n);
  unsigned tile_groups, tile_keys;  // register tile of the many-group sweep (for `mlakit info`)
  unsigned pair_rows;  // calls of at most this many rows score two keys per vector (0: never)
  bool bf16_dot;       // steps are bf16 pairs multiplied by a bf16 dot (else f32 elements, FMA)
};

}  // namespace mlakit::simd
