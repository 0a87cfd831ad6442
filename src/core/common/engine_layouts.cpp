// Engine cache layouts as strided views (include/mlakit/engine_layouts.hpp).
#include "mlakit/engine_layouts.hpp"

#include <limits>
#include <string>
#include <utility>

namespace mlakit {
namespace {

constexpr const char* kOp = "indexer_cache_views";
constexpr const char* kFlashOp = "flashmla_sparse_cache_views";

Status refuse_in(const char* op, const char* field, std::int64_t value, const std::string& expected) {
  return Status::error(StatusCode::invalid_argument, op, field,
                       std::string(op) + ": " + field + "=" + std::to_string(value) + " (" + expected + ")");
}

Status refuse(const char* field, std::int64_t value, const std::string& expected) {
  return refuse_in(kOp, field, value, expected);
}

TensorView strided(void* data, std::int64_t offset_bytes, DType t, std::int64_t nb, std::int64_t layers,
                   std::int64_t ps, std::int64_t width, std::int64_t block, std::int64_t layer, std::int64_t token,
                   MemorySpace memory) {
  const std::int64_t e = static_cast<std::int64_t>(dtype_size(t));
  TensorView v = TensorView::contiguous(static_cast<unsigned char*>(data) + offset_bytes, t,
                                        {nb, 1, layers, ps, 1, width}, memory);
  v.strides = {block / e, token / e, layer / e, token / e, token / e, 1};
  return v;
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

Status flashmla_sparse_cache_views(void* data, MemorySpace memory, const FlashMlaCacheLayout& l,
                                   PagedKVCacheView* out) {
  constexpr std::int64_t kMaxDim = std::int64_t{1} << 31;
  const char* op = kFlashOp;
  if (out == nullptr) return Status::error(StatusCode::invalid_argument, op, "out", std::string(op) + ": out is null");
  if (data == nullptr) return Status::error(StatusCode::invalid_argument, op, "data", std::string(op) + ": data is null");
  if (l.format != FlashMlaCacheFormat::v32 && l.format != FlashMlaCacheFormat::model1)
    return refuse_in(op, "format", static_cast<std::int64_t>(l.format), "expected v32 or model1");
  const std::pair<const char*, std::int64_t> sizes[] = {
      {"num_blocks", l.num_blocks}, {"page_size", l.page_size}, {"num_layers", l.num_layers}};
  for (const auto& [name, v] : sizes)
    if (v < 1 || v > kMaxDim) return refuse_in(op, name, v, "expected 1 .. 2^31");
  const bool v32 = l.format == FlashMlaCacheFormat::v32;
  // Record sizes of FlashMLA's tests/quant.py.
  const std::int64_t codes = v32 ? 512 : 448, record = v32 ? 656 : 576;
  std::int64_t token = record;
  if (v32 && l.token_stride_bytes != 0) {
    if (l.token_stride_bytes < record || l.token_stride_bytes % 4 != 0)
      return refuse_in(op, "token_stride_bytes", l.token_stride_bytes, "expected 0, or a multiple of 4 of at least 656");
    token = l.token_stride_bytes;
  } else if (!v32 && l.token_stride_bytes != 0 && l.token_stride_bytes != record) {
    return refuse_in(op, "token_stride_bytes", l.token_stride_bytes, "expected 0 or 576: model1 records are packed");
  }
  if (l.page_size > kMaxDim / token) return refuse_in(op, "page_size", l.page_size, "the block's bytes overflow");
  const std::int64_t tokens = l.page_size * token;
  const std::int64_t packed = v32 ? tokens : (tokens + 8 * l.page_size + record - 1) / record * record;
  const std::int64_t block = l.block_stride_bytes == 0 ? packed : l.block_stride_bytes;
  if (block < (v32 ? tokens : tokens + 8 * l.page_size))
    return refuse_in(op, "block_stride_bytes", l.block_stride_bytes,
                     "expected 0 or at least the block's records, " +
                         std::to_string(v32 ? tokens : tokens + 8 * l.page_size) + " bytes");
  if (block % 4 != 0)
    return refuse_in(op, "block_stride_bytes", block, "expected a multiple of 4: the scales and tails stay aligned");
  if (l.num_blocks > (std::numeric_limits<std::int64_t>::max() / 2) / block)
    return refuse_in(op, "num_blocks", l.num_blocks, "the cache's bytes overflow");
  const std::int64_t layer = l.layer_stride_bytes == 0 ? l.num_blocks * block : l.layer_stride_bytes;
  if (l.num_layers > 1 && layer < l.num_blocks * block)
    return refuse_in(op, "layer_stride_bytes", l.layer_stride_bytes,
                     "expected 0 or at least num_blocks·block_stride = " + std::to_string(l.num_blocks * block));
  if (layer % 4 != 0) return refuse_in(op, "layer_stride_bytes", layer, "expected a multiple of 4");
  if (reinterpret_cast<std::uintptr_t>(data) % 4 != 0)
    return refuse_in(op, "data", static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(data) % 4),
                     "expected a 4-byte aligned buffer (the address modulo 4 is shown)");

  PagedKVCacheView v = *out;
  const std::int64_t nb = l.num_blocks, L = l.num_layers, ps = l.page_size;
  v.blocks = strided(data, 0, DType::f8e4m3, nb, L, ps, codes, block, layer, token, memory);
  if (v32) {
    v.scales = strided(data, codes, DType::f32, nb, L, ps, 4, block, layer, token, memory);
    v.tail = strided(data, codes + 16, DType::bf16, nb, L, ps, 64, block, layer, token, memory);
    v.quant_granularity = 128;
  } else {
    v.scales = strided(data, tokens, DType::e8m0, nb, L, ps, 7, block, layer, 8, memory);
    v.tail = strided(data, codes, DType::bf16, nb, L, ps, 64, block, layer, token, memory);
    v.quant_granularity = 64;
  }
  *out = v;
  return Status::success();
}

}  // namespace mlakit
