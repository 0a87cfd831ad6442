// Block-max score kernels ("query rows in lanes"): ISA-neutral declarations (no intrinsics).
//
// The MSA block indexer scores every query row (token, index head) against every visible key and
// keeps, per key block, the maximum of scale * q.k. These kernels compute that maximum for many
// query rows at once against one block of keys:
//
//   out[r] = max over keys j < min(n, limit[r]) of  scale * dot(q_r, k_j)      r < groups * lanes
//
// Layout. Query rows are packed by `pack_q` in groups of `lanes` rows, transposed so that one
// vector holds element d of every row of a group (f32, exact from bf16; rows past the end are 0):
//   qt[(g * dim + d) * lanes + l] = q[(g * lanes + l) * ldq + d]
// Keys are n rows of `dim` elements, `ldk` elements apart, bf16 bit patterns or f8e4m3 codes
// (decoded exactly, as fp8_decode does). Each key row is converted to f32 once per call, in
// chunks held in `scratch`, and every converted key is used by all the groups of the call: the
// "decode the page once, use it for every query row" pattern. The product runs as a broadcast of
// one key element against a vector of `lanes` query rows, so a group of rows needs no horizontal
// reduction and the block maximum is a vertical one.
//
// Arithmetic. dot accumulates d = 0, 1, ..., dim-1 in that order in f32, one multiply-add per
// element (fused where the level has FMA), then one multiply by `scale`. A row's score therefore
// depends only on the row, the key and the level, never on the lane, the group, the number of
// groups, n, `limit` or the chunking: callers may cut the work into any tiles and get bitwise the
// same maxima (and the same ones on a decode and a prefill path). The error of a score is at most
// (dim + 1) * 2^-24 * |scale| * sum_d |q_d k_d| (sequential summation), inside the spec's bound.
//
// limit (optional, i32 [groups * lanes]): row r sees keys j < limit[r] (values <= 0 see none,
// values >= n see all); nullptr: every row sees all n keys. That is the per-token causal cut of a
// block. Keys no row of a group sees are not multiplied; keys no row of the call sees are not
// even converted (the caller still must pass n rows that exist).
//
// NaN. out[r] is NaN when the score of any key r sees is NaN (a NaN key element, or inf * 0);
// -inf when r sees no key. +0 and -0 may come out either way for a block whose maximum is zero.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlakit::simd {

struct BlockScoreKernels {
  const char* level;
  unsigned lanes;  // query rows per group
  // Packs `rows` bf16 rows of `dim` elements (`ldq` apart) into ceil(rows / lanes) groups at qt.
  void (*pack_q)(const std::uint16_t* q, std::size_t rows, std::size_t dim, std::size_t ldq, float* qt);
  // Bytes of scratch one block call with `groups` groups and `dim` needs (any alignment is fine).
  std::size_t (*scratch_bytes)(std::size_t groups, std::size_t dim);
  // next_k / next_n (optional): the key rows (same ldk) the caller reads next; the kernel
  // prefetches them, spread over its own work. They are not read otherwise.
  void (*block_max_bf16)(std::size_t groups, std::size_t dim, const float* qt, const std::uint16_t* k,
                         std::size_t ldk, std::size_t n, const std::int32_t* limit, float scale, float* out,
                         void* scratch, const std::uint16_t* next_k, std::size_t next_n);
  void (*block_max_f8)(std::size_t groups, std::size_t dim, const float* qt, const std::uint8_t* k,
                       std::size_t ldk, std::size_t n, const std::int32_t* limit, float scale, float* out,
                       void* scratch, const std::uint8_t* next_k, std::size_t next_n);
  unsigned tile_groups, tile_keys;  // register tile of the many-group sweep (for `mlakit info`)
};

}  // namespace mlakit::simd
