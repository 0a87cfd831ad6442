// Engines' own cache buffers as mlakit cache views, read in place (spec 06 §B, docs/engine-layouts.md).
#pragma once

#include <cstdint>

#include "mlakit/paged_kv_cache.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit {

// The FP8 indexer K cache of DeepGEMM's fp8_paged_mqa_logits, SGLang and vLLM (DeepSeek-V3.2): per
// block, first the page_size·head_dim f8e4m3 codes of its tokens (token-major), then the page_size
// f32 scales, one per token. Blocks are block_stride_bytes apart (0: exactly page_size·(head_dim + 4),
// 8448 bytes for 64 x 128), layers layer_stride_bytes apart (0: num_blocks blocks). The views are
// op 1's k_cache.blocks [num_blocks, 1, num_layers, page_size, 1, head_dim] and k_cache.scales
// [..., 1] with quant_granularity = head_dim.
struct IndexerCacheLayout {
  std::int64_t num_blocks = 0;
  std::int64_t page_size = 64;
  std::int64_t head_dim = 128;
  std::int64_t block_stride_bytes = 0;
  std::int64_t num_layers = 1;
  std::int64_t layer_stride_bytes = 0;
};

// Fills out->blocks, out->scales and out->quant_granularity (the page table and lengths stay the
// caller's). Refuses, naming the field, a layout whose blocks would overlap or whose scales would
// not be 4-byte aligned; nothing is written then.
Status indexer_cache_views(void* data, MemorySpace memory, const IndexerCacheLayout& layout, PagedKVCacheView* out);

// FlashMLA's FP8 sparse-attention caches (also SGLang's), op 4's kv_cache with split rows:
//   v32     token records of 656 bytes, token_stride_bytes apart (0: 656) inside a block:
//           [512 f8e4m3 codes][4 f32 scales, one per 128 codes][64 bf16 rope values];
//           blocks block_stride_bytes apart (0: page_size·token_stride; FlashMLA's tests pad to
//           (page_size + 1)·656). qk_depth 576, quant_granularity 128.
//   model1  per block, page_size token records of 576 bytes, [448 f8e4m3 codes][64 bf16 rope],
//           then page_size scale records of 8 bytes, [7 e8m0 scales, one per 64 codes][pad]; the
//           block padded to a multiple of 576 bytes (0: that size). qk_depth 512, quant_granularity 64.
// Layers are layer_stride_bytes apart (0: num_blocks blocks). The views are kv_cache.blocks
// [num_blocks, 1, num_layers, page_size, 1, 512 | 448], kv_cache.scales (f32 | e8m0) and
// kv_cache.tail (bf16, 64 columns), all with the record strides.
enum class FlashMlaCacheFormat : std::uint8_t { v32, model1 };

struct FlashMlaCacheLayout {
  FlashMlaCacheFormat format = FlashMlaCacheFormat::v32;
  std::int64_t num_blocks = 0;
  std::int64_t page_size = 64;
  std::int64_t token_stride_bytes = 0;  // v32 only (model1 records are 576 bytes)
  std::int64_t block_stride_bytes = 0;
  std::int64_t num_layers = 1;
  std::int64_t layer_stride_bytes = 0;
};

// Fills out->blocks, out->scales, out->tail and out->quant_granularity (the page table and lengths
// stay the caller's). Refuses, naming the field, a layout whose records or blocks would overlap or
// whose scales or tail would be misaligned; nothing is written then.
Status flashmla_sparse_cache_views(void* data, MemorySpace memory, const FlashMlaCacheLayout& layout,
                                   PagedKVCacheView* out);

}  // namespace mlakit
