// Engine cache layouts as strided views (include/mlakit/engine_layouts.hpp).
#include "mlakit/engine_layouts.hpp"

#include <string>

namespace mlakit {
namespace {

constexpr const char* kOp = "indexer_cache_views";

Status refuse(const char* field, std::int64_t value, const std::string& expected) {
  return Status::error(StatusCode::invalid_argument, kOp, field,
                       std::string(kOp) + ": " + field + "=" + std::to_string(value) + " (" + expected + ")");
}

}  // namespace

Status indexer_cache_views(void* data, MemorySpace memory, const IndexerCacheLayout& l, PagedKVCacheView* out) {
  constexpr std::int64_t kMaxDim = std::int64_t{1} << 31;
  if (out == nullptr) return Status::error(StatusCode::invalid_argument, kOp, "out", std::string(kOp) + ": out is null");
  if (data == nullptr) return Status::error(StatusCode::invalid_argument, kOp, "data", std::string(kOp) + ": data is null");
  const std::pair<const char*, std::int64_t> sizes[] = {{"num_blocks", l.num_blocks}, {"page_size", l.page_size},
                                                        {"head_dim", l.head_dim}, {"num_layers", l.num_layers}};
  for (const auto& [name, v] : sizes)
    if (v < 1 || v > kMaxDim) return refuse(name, v, "expected 1 .. 2^31");
  const std::int64_t codes = l.page_size * l.head_dim, packed = codes + 4 * l.page_size;
  const std::int64_t block = l.block_stride_bytes == 0 ? packed : l.block_stride_bytes;
  if (block < packed)
    return refuse("block_stride_bytes", l.block_stride_bytes,
                  "expected 0 or at least page_size·(head_dim + 4) = " + std::to_string(packed));
  if (block % 4 != 0) return refuse("block_stride_bytes", block, "expected a multiple of 4: the f32 scales of every block");
  if (codes % 4 != 0)
    return refuse("head_dim", l.head_dim, "page_size·head_dim must be a multiple of 4 for the f32 scales after the codes");
  const std::int64_t layer = l.layer_stride_bytes == 0 ? l.num_blocks * block : l.layer_stride_bytes;
  if (l.num_layers > 1 && layer < l.num_blocks * block)
    return refuse("layer_stride_bytes", l.layer_stride_bytes,
                  "expected 0 or at least num_blocks·block_stride = " + std::to_string(l.num_blocks * block));
  if (layer % 4 != 0) return refuse("layer_stride_bytes", layer, "expected a multiple of 4");
  if (reinterpret_cast<std::uintptr_t>(data) % 4 != 0)
    return refuse("data", static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(data) % 4),
                  "expected a 4-byte aligned buffer (the address modulo 4 is shown)");

  PagedKVCacheView v = *out;
  v.blocks = TensorView::contiguous(data, DType::f8e4m3, {l.num_blocks, 1, l.num_layers, l.page_size, 1, l.head_dim}, memory);
  v.blocks.strides = {block, codes, layer, l.head_dim, l.head_dim, 1};
  v.scales = TensorView::contiguous(static_cast<unsigned char*>(data) + codes, DType::f32,
                                    {l.num_blocks, 1, l.num_layers, l.page_size, 1, 1}, memory);
  v.scales.strides = {block / 4, 1, layer / 4, 1, 1, 1};
  v.quant_granularity = l.head_dim;
  *out = v;
  return Status::success();
}

}  // namespace mlakit
