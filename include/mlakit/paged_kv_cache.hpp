// The paged KV cache (docs/README.md §4): one object for all layers of a model.
#pragma once

#include <cstdint>

#include "mlakit/tensor_view.hpp"

namespace mlakit {

// Caches as engines keep them: `blocks` and `scales` may have any non-negative strides on the block,
// kv, layer, offset and head dimensions (a per-layer tensor viewed with num_layers = 1, a padded
// block stride, K and V interleaved per layer), as long as each head's row is contiguous (stride 1
// on the last dimension). A cache the call writes must not map two rows onto the same memory.
struct PagedKVCacheView {
  // [num_blocks, kv_dim, num_layers, page_size, num_kv_heads, head_size]; strides in elements.
  TensorView blocks;
  // Quantized caches only: f32 (or e8m0 where the operator accepts it) [num_blocks, kv_dim,
  // num_layers, page_size, num_kv_heads, ceil(blocks.shape[5] / quant_granularity)]; the scale of
  // column d is scales[..., d / quant_granularity]. Absent (data == nullptr) for bf16/f32 caches.
  TensorView scales;
  std::int64_t quant_granularity = 0;
  // Split rows (FlashMLA's FP8 sparse caches): an unquantized bf16 tail after the quantized part,
  // [num_blocks, kv_dim, num_layers, page_size, num_kv_heads, tail width]; a row is then
  // blocks.shape[5] quantized columns followed by the tail's. Absent for whole rows.
  TensorView tail;
  // u32 [B, max_pages]; an entry equal to num_blocks means "no page".
  TensorView lookup_table;
  // u32 [B]: tokens in the cache before this step.
  TensorView cache_lengths;

  std::int64_t num_blocks() const { return blocks.shape[0]; }
  std::int64_t kv_dim() const { return blocks.shape[1]; }
  std::int64_t num_layers() const { return blocks.shape[2]; }
  std::int64_t page_size() const { return blocks.shape[3]; }
  std::int64_t num_kv_heads() const { return blocks.shape[4]; }
  // Columns of a row: the quantized (or plain) part, then the tail of a split row.
  std::int64_t head_size() const { return blocks.shape[5] + tail_size(); }
  std::int64_t quantized_size() const { return blocks.shape[5]; }
  std::int64_t tail_size() const { return tail.data != nullptr ? tail.shape[5] : 0; }
  std::int64_t scales_per_row() const { return scales.shape[5]; }

  // Element offset of (blk, kv, layer, off, head, 0) in `blocks`, `tail` and `scales`.
  std::int64_t row_offset(std::int64_t blk, std::int64_t kv, std::int64_t layer, std::int64_t off,
                          std::int64_t head) const {
    return blk * blocks.strides[0] + kv * blocks.strides[1] + layer * blocks.strides[2] + off * blocks.strides[3] +
           head * blocks.strides[4];
  }
  std::int64_t tail_offset(std::int64_t blk, std::int64_t kv, std::int64_t layer, std::int64_t off,
                           std::int64_t head) const {
    return blk * tail.strides[0] + kv * tail.strides[1] + layer * tail.strides[2] + off * tail.strides[3] +
           head * tail.strides[4];
  }
  std::int64_t scale_offset(std::int64_t blk, std::int64_t kv, std::int64_t layer, std::int64_t off,
                            std::int64_t head) const {
    return blk * scales.strides[0] + kv * scales.strides[1] + layer * scales.strides[2] + off * scales.strides[3] +
           head * scales.strides[4];
  }
};

}  // namespace mlakit
