// Op 2 — MSA block indexer (MiniMax `msa_indexer_ragged_paged`), spec 02.
//
// For each index head h and query row t (sequence b, local index i), nk = prefix_lens[b] + i + 1:
//   s[c] = max_{j in block c, j < nk} scale · Σ_d f32(q[t,h,d]) · f32(K[j,d]),  c < ceil(nk / block_size)
// with the first init_blocks forced to 1e30 and the last local_blocks forced to 1e29 (applied
// second); writes the min(topk, nb) best block numbers, best first, ties to the smaller block,
// NaN never selected, -1 in the unused columns. Output is head-major [Hi, R, topk].
//
// Choices where the spec is silent:
//  * The cache's `cache_lengths` is not read: `prefix_lens` is the length that counts (it is
//    still validated as a u32 [B] tensor if present, since golden files carry it).
//  * block_size must equal the cache page size (spec), so a block is exactly one page.
#pragma once

#include <cstdint>

#include "mlakit/backend.hpp"
#include "mlakit/paged_kv_cache.hpp"
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
};

struct MsaBlockIndexerArgs {
  TensorView q;                  // bf16 [R, Hi, Di]
  TensorView input_row_offsets;  // u32 [B+1]
  TensorView prefix_lens;        // u32 [B]
  PagedKVCacheView k_cache;      // bf16 or f8e4m3 (no scales), kv_dim 1, 1 head, head_size Di
  std::uint32_t layer_idx = 0;
  TensorView out_idxs;           // i32 [Hi, R, topk] (written)
};

Status msa_block_indexer(const MsaBlockIndexerDesc& desc, const MsaBlockIndexerArgs& args,
                         const RunOptions& options = {});

}  // namespace mlakit
