// Op 1 — lightning indexer (DeepSeek-V3.2 `mla_indexer_ragged_float8_paged`), spec 01.
//
// For each query row t of a ragged batch, scores every visible key position j of its sequence:
//   dot[h]  = Σ_d f32(q[t,h,d]) · f32(K[j,d])
//   score   = k_scale[j] · Σ_h max(dot[h], 0) · q_s[t,h]
// and writes the top_k positions (logical, within the sequence), highest score first.
//
// Choices where the spec is silent:
//  * Ties (equal scores, +0 == −0) go to the smaller position; NaN scores rank below every
//    number and among themselves by smaller position; unused columns hold -1.
//  * `output_indices` must be exactly [T, top_k]; every element is written.
//  * T = 0 is a valid call that writes nothing.
#pragma once

#include <cstdint>

#include "mlakit/backend.hpp"
#include "mlakit/paged_kv_cache.hpp"
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

// Companion: logical positions -> encoded physical rows (blk·page_size + off) for op 4.
// v >= 0 maps through the page table of its row's sequence; -1 stays -1; any other
// negative value, a position past the table, or a sentinel page is a validation error.
struct RemapIndicesArgs {
  TensorView indices;            // i32 [T, top_k]
  TensorView input_row_offsets;  // u32 [B+1]
  TensorView lookup_table;       // u32 [B, max_pages]
  std::int64_t page_size = 0;
  std::int64_t num_blocks = 0;
  TensorView rows;               // i32 [T, top_k] (written); may not alias `indices`
};

Status remap_indices_to_rows(const RemapIndicesArgs& args, const RunOptions& options = {});

}  // namespace mlakit
