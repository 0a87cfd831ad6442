// Op 1 — lightning indexer (DeepSeek-V3.2 `mla_indexer_ragged_float8_paged`), docs/lightning_indexer.md.
//
// For each query row t of a ragged batch, scores every visible key position j of its sequence:
//   dot[h]  = Σ_d f32(q[t,h,d]) · f32(K[j,d])
//   score   = k_scale[j] · Σ_h max(dot[h], 0) · q_s[t,h]
// and writes the top_k positions (logical, within the sequence), highest score first.
// Visible positions: j < cache_lengths[b] + i + 1 (causal) or j < cache_lengths[b] + seq_len[b] (none),
// where i is the row's index inside its sequence.
//
// Choices where the spec is silent:
//  * Ties (equal scores, +0 == −0) go to the smaller position; NaN scores rank below every
//    number and among themselves by smaller position; unused columns hold -1.
//  * max(dot, 0) is IEEE `maximum`: a NaN dot stays NaN (so does the score); max(−0, +0) = +0.
//  * `output_indices` must be exactly [T, top_k]; every element is written.
//  * T = 0 is a valid call that writes nothing. A sequence with no rows reads nothing, so its
//    lookup-table row is not checked (it may be all sentinels).
//  * Every position a row reads, 0 … cache_lengths[b] + seq_len[b] − 1 for each sequence with rows,
//    must map to a real page; cache_lengths[b] + seq_len[b] must fit in i32 (the output type).
//  * K scales: the cache's f32 scale of a row is used for the whole row, so quant_granularity must be
//    >= head_dim (one scale per key token); any larger value is accepted and means the same.
//  * output_indices may not overlap any input; all tensors live in one memory space, and the
//    offsets, lookup table and cache lengths must be host-readable (validation reads them).
//  * The reference back-end computes each head's dot product exactly (f64 holds every sum of fp8
//    products for head_dim <= 2^17), the score in f64, and selects on the f64 score. Optimized
//    back-ends accumulate in f32; where two scores are closer than their rounding error the order
//    may differ from the reference (docs/lightning_indexer.md §6 bounds how far).
//  * The cpu back-end's output does not depend on the thread count, on the workspace budget
//    (score rows are processed in chunks that fit it) or on other calls running at the same time:
//    the same inputs give the same bits.
#pragma once

#include <cstdint>

#include "mlakit/backend.hpp"
#include "mlakit/paged_kv_cache.hpp"
#include "mlakit/plan.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit {

enum class IndexerMask { causal, none };

struct LightningIndexerDesc {
  std::int64_t num_heads = 64;  // H
  std::int64_t head_dim = 128;  // D
  std::int64_t top_k = 2048;
  IndexerMask mask = IndexerMask::causal;
};

struct LightningIndexerArgs {
  TensorView q;                  // f8e4m3 [T, H, D]
  TensorView q_s;                // f32 [T, H]
  TensorView input_row_offsets;  // u32 [B+1]
  PagedKVCacheView k_cache;      // f8e4m3, kv_dim 1, 1 head, head_size D, f32 scales, quant_granularity >= D
  std::uint32_t layer_idx = 0;
  TensorView output_indices;     // i32 [T, top_k] (written)
};

Status lightning_indexer(const LightningIndexerDesc& desc, const LightningIndexerArgs& args,
                         const RunOptions& options = {});

// Plan once per step, run per layer (mlakit/plan.hpp): `step` is a call of the step (any layer);
// its metadata is checked once, here.
using LightningIndexerPlan = Plan<LightningIndexerDesc, LightningIndexerArgs>;
Status plan(const LightningIndexerDesc& desc, const LightningIndexerArgs& step, const PlanOptions& options, LightningIndexerPlan* out);
Status run(const LightningIndexerPlan& plan, const LightningIndexerArgs& args, const RunContext& context = {});

// Companion: logical positions -> encoded physical rows (blk·page_size + off) for op 4.
// v >= 0 maps through the page table of its row's sequence; -1 stays -1; any other
// negative value, a position past the table, or a sentinel (or out-of-range) page is a validation
// error. `indices`, `input_row_offsets` and `lookup_table` must be host-readable (every value is
// checked before anything is written); num_blocks·page_size must fit in i32. `rows` may not overlap
// any input. The cpu and reference back-ends share one scalar gather.
struct RemapIndicesArgs {
  TensorView indices;            // i32 [T, top_k]
  TensorView input_row_offsets;  // u32 [B+1]
  TensorView lookup_table;       // u32 [B, max_pages]
  std::int64_t page_size = 0;
  std::int64_t num_blocks = 0;
  TensorView rows;               // i32 [T, top_k] (written); may not alias `indices`
};

Status remap_indices_to_rows(const RemapIndicesArgs& args, const RunOptions& options = {});

using RemapIndicesPlan = Plan<NoDesc, RemapIndicesArgs>;
Status plan(const RemapIndicesArgs& step, const PlanOptions& options, RemapIndicesPlan* out);
Status run(const RemapIndicesPlan& plan, const RemapIndicesArgs& args, const RunContext& context = {});

}  // namespace mlakit
