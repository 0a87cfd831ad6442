// Op 2 — MSA block indexer (MiniMax `msa_indexer_ragged_paged`), docs/msa_block_indexer.md.
//
// For each index head h and query row t (sequence b, local index i), nk = prefix_lens[b] + i + 1:
//   s[c] = max_{j in block c, j < nk} scale · Σ_d f32(q[t,h,d]) · f32(K[j,h/(Hi/Hk),d]),  c < nb = ceil(nk / block_size)
// (with reduce_heads, s[c] = IEEE max over h of those, and one selection per row t)
// with the first init_blocks forced to 1e30 and the last local_blocks forced to 1e29 (applied
// second, so a block that is both gets 1e29); writes the min(topk, nb) best block numbers, best
// first, ties to the smaller block, NaN never selected (a row whose remaining candidates are all
// NaN stops early), -1 in the unused columns. Output is head-major [Hi, R, topk]; the values are
// logical block numbers c of the sequence, not physical pages.
//
// Choices where the spec is silent:
//  * `prefix_lens` is the length that counts. The cache's `cache_lengths` is never read; it is
//    optional, and when present it must be a host u32 [B] tensor (golden files carry it).
//  * The forced scores are the f32 constants 1e30f and 1e29f. A computed score at or above them
//    (only possible with extreme inputs, e.g. +inf) competes with them by the same rule.
//  * Forced blocks therefore come first: init-only blocks ascending, then local blocks ascending.
//    Blocks that are both init and local are the largest init and the smallest local blocks, so
//    either priority yields the same order; the 1e29 rule is kept as the spec states it.
//  * A key whose score is NaN makes its block's max NaN (it does not merely lose); a forced block
//    still takes its forced value. +0 and -0 tie.
//  * Only the pages a call reads are checked: positions 0 .. prefix_lens[b]+seq_len[b]-1 of every
//    sequence with seq_len[b] > 0. An empty sequence reads nothing, so its page-table row and its
//    prefix length are not checked beyond the u32 [B] shape.
//  * input_row_offsets, prefix_lens, the lookup table and cache_lengths are read on the host;
//    q, the cache blocks and out_idxs must share one memory space (host for cpu/reference).
//  * out_idxs must be exactly [Hi, R, topk] and may not overlap any input; with R > 0 every one of
//    its elements is written; R = 0 is a valid call that writes nothing.
//  * block_size must equal the cache page size (spec), so a block is exactly one page.
//  * scale must be finite; 0 and negative values are valid (negative reverses the ranking).
//  * cpu back-end: each score is an f32 sum over d in ascending order (one multiply-add per
//    element, fused where the CPU has FMA) times scale, so its output depends only on the inputs
//    and the ISA level: bitwise the same for any thread count, workspace budget, concurrent
//    callers, and for a row whether it comes in a decode call or a prefill call.
#pragma once

#include <cstdint>

#include "mlakit/backend.hpp"
#include "mlakit/paged_kv_cache.hpp"
#include "mlakit/plan.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit {

struct MsaBlockIndexerDesc {
  std::int64_t num_index_heads = 8;  // Hi
  std::int64_t idx_head_dim = 128;   // Di
  std::int64_t block_size = 128;
  std::int64_t topk = 16;
  std::int64_t init_blocks = 1;
  std::int64_t local_blocks = 2;
  float scale = 1.0f;
  // Heads of the index-K cache, Hk (MiniMax-M3): index head h reads K head h / (Hi / Hk);
  // Hk must divide Hi. 1 is the single shared index-K head.
  std::int64_t num_k_heads = 1;
  // One selection per query row, shared by all index heads (MiniMax-M3): block scores are the
  // IEEE maximum over heads (a NaN head score makes the block NaN); out_idxs is [1, R, topk].
  bool reduce_heads = false;
};

struct MsaBlockIndexerArgs {
  TensorView q;                  // bf16 [R, Hi, Di]
  TensorView input_row_offsets;  // u32 [B+1]
  TensorView prefix_lens;        // u32 [B]
  PagedKVCacheView k_cache;      // bf16 or f8e4m3 (no scales), kv_dim 1, Hk heads, head_size Di
  std::uint32_t layer_idx = 0;
  TensorView out_idxs;           // i32 [Hi, R, topk], [1, R, topk] with reduce_heads (written)
};

Status msa_block_indexer(const MsaBlockIndexerDesc& desc, const MsaBlockIndexerArgs& args,
                         const RunOptions& options = {});

// Plan once per step, run per layer (mlakit/plan.hpp): `step` is a call of the step (any layer);
// its metadata is checked once, here.
using MsaBlockIndexerPlan = Plan<MsaBlockIndexerDesc, MsaBlockIndexerArgs>;
Status plan(const MsaBlockIndexerDesc& desc, const MsaBlockIndexerArgs& step, const PlanOptions& options, MsaBlockIndexerPlan* out);
Status run(const MsaBlockIndexerPlan& plan, const MsaBlockIndexerArgs& args, const RunContext& context = {});

}  // namespace mlakit
