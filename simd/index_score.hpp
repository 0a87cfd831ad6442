// Lightning-indexer score tiles ("index_score"): ISA-neutral declarations (no intrinsics).
//
// For one query of H heads x D dims (fp8 codes q[h*D + d], per-head weights w[h]) against n keys
// (f32 rows k[j*ldk + d], usually decoded fp8 K rows, and f32 key scales ks[j]):
//
//   score[j] = ks[j] * sum_h maximum(sum_d q[h,d] * k[j,d], 0) * w[h]
//
// maximum is IEEE 754 maximum: a NaN dot stays NaN (and so does the score). The ReLU, the weight
// and the head sum are the epilogue of the register tile: the per-head dot products never leave
// registers, one float per key is stored.
//
// Layout: heads run along the vector lanes (the query is packed once, transposed to [D][heads]
// and zero-padded to whole vectors), keys are broadcast from their rows, so K needs no packing or
// transposition: a key tile is decoded once (fp8 -> f32 rows) and reused for every query of a
// query tile and every head. On bf16-dot levels a lane holds a pair of dims and each register
// tile converts its keys to bf16 in L1 (a few byte permutes per 64 codes): there the fp8 rows are
// best scored in place (`decode_pass_rows` = 0). A register tile is `head_vectors` vectors of heads x `keys` keys;
// padded head lanes are masked out of the sum.
//
// Arithmetic (fixed for a level, whatever n, the key's place among the n keys, the alignment or
// the caller's threads): each head's dot is a chain of D multiply-adds in d order (fused on
// levels with FMA) or, on levels with a bf16 pair dot (vdpbf16ps), a chain of ceil(D/2) pair
// steps in pair order over operands rounded to bf16 -- exact for f8e4m3 values, which have 4
// significant bits, and their products are exact in f32; relu(dot) * w[h] is accumulated
// lane-wise in head order, the lanes are summed by a fixed tree, then multiplied by ks[j]. So score[j] depends only on q, w, row j and ks[j]:
// callers may split the keys into tiles of any size and get bitwise-identical scores. Error
// against the exact score: <= (D + H/lanes + log2(lanes) + 2) * 2^-24 * |ks[j]| * sum_h |w[h]| *
// sum_d |q[h,d]*k[j,d]| (inside the spec's c*H*D*2^-24 bound).
//
// The amx level (simd/templates/index_score_amx_impl.hpp) computes the dots as AMX tile products,
// TDPBF16PS on C tiles of 16 keys x 16 heads (f32), A tiles of 16 keys x 32 dims (bf16, the key
// rows converted per block of 32 keys) and B tiles of 16 dim pairs x 16 heads (the query, packed
// once in the pair layout), 32 dims per step in dim order. Each instruction sums, per output
// element, the 16 even products (dims 2k of the step) and the 16 odd ones apart, each from 0 in
// order with one fused multiply-add rounded to nearest even per product, adds the two sums, then
// adds that to the f32 accumulator (the SDM's order, which the hardware follows; the Intrinsics
// Guide words it as each pair added to the accumulator in turn). bf16 inputs are read as f32
// (denormals as zero), the accumulator too, and denormal results are flushed to zero, MXCSR
// ignored. On this family's data DAZ and FTZ change nothing: decoded f8e4m3 values are at least
// 2^-9 in magnitude, so every product and partial sum is 0 or at least 2^-18 (an f32 key below
// 2^-126, which no fp8 code decodes to, would count as 0). The tests run the kernel over tiles
// emulated in that order and compare them bit for bit with real tiles on CPUs with AMX.
// The epilogue is the avx512bf16 level's: each C row is one head vector, folded by maximum(., 0) *
// w[h] into the key's lane-wise sum head tile by head tile in head order, the lanes summed by the
// same tree, times ks[j]; so score[j] again depends only on q, w, row j and ks[j]. Error against
// the exact score: <= (D + D/32 + H/16 + 6) * 2^-24 * |ks[j]| * sum_h |w[h]| * sum_d
// |q[h,d]*k[j,d]| (at most D + D/32 additions along a dot, fewer in the split order,
// H/16 head steps, 4 lane-sum steps, the weight and the key scale; D/32 and H/16 rounded up): at
// most 4*H*D*2^-24 for every H*D >= 3, inside the spec's bound.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlakit::simd {

struct IndexScoreKernels {
  const char* level;
  unsigned head_lanes;    // heads per vector
  unsigned head_vectors;  // head vectors per register tile
  unsigned keys;          // keys per register tile
  bool bf16_dot;          // the dots run as bf16 pair dots (vdpbf16ps, or tdpbf16ps on amx), else f32 multiply-adds
  // Floats of a packed query (H, D >= 1).
  std::size_t (*packed_floats)(std::size_t H, std::size_t D);
  // Packs one query: q fp8 codes [H][D] (exact decode), w f32 [H]. `packed` holds
  // packed_floats(H, D) floats, any alignment (64 bytes is best).
  void (*pack_query)(const std::uint8_t* q, const float* w, std::size_t H, std::size_t D, float* packed);
  // Query rows sharing a key tile from which decoding the tile once to f32 rows for `score` beats
  // `score_f8` on the fp8 rows; 0: `score_f8` always wins.
  unsigned decode_pass_rows;
  // score[j] for j < n (n may be 0); k rows of D floats with stride ldk (values exact in bf16, as
  // decoded f8e4m3 values are: bf16-dot levels round them to bf16); writes out[0..n) only.
  void (*score)(const float* packed, std::size_t H, std::size_t D, const float* k, std::size_t ldk,
                const float* ks, std::size_t n, float* out);
  // The same scores from fp8 K rows (codes, exact decode): rows[j] points at key j's D codes, so the
  // rows can stay where they are (pages of a paged cache). Each code is looked up in a 256-entry
  // f32 table as it is broadcast: no decode pass, which pays off when few queries share the keys
  // (decode); `score` on rows decoded once wins when many do. Bitwise identical to `score` on the
  // decoded rows.
  void (*score_f8)(const float* packed, std::size_t H, std::size_t D, const std::uint8_t* const* rows,
                   const float* ks, std::size_t n, float* out);
  // Where the level converts key rows per call (amx; null elsewhere): score_f8 for several queries
  // against the same key rows, converting each key once for all of them. Query q is packed at
  // packed + q * stride and scores keys j < n[q] (n[q] <= the rows given; 0 allowed) into
  // out[q][0..n[q]); its scores are bitwise what score_f8 gives it alone.
  void (*score_f8_queries)(const float* packed, std::size_t stride, std::size_t queries, std::size_t H,
                           std::size_t D, const std::uint8_t* const* rows, const float* ks, const std::size_t* n,
                           float* const* out);
};

}  // namespace mlakit::simd
