// Reading one row of a quantized paged cache: scales of either type, and the bf16 tail of a split
// row (spec 06 §B). Shared by the reference and cpu back-ends so both decode the same values.
#pragma once

#include <cstdint>

#include "mlakit/dtype.hpp"
#include "mlakit/paged_kv_cache.hpp"

namespace mlakit::core {

// The scale at element offset `i` of cache.scales: an f32, or an e8m0 byte (2^(e-127), 0xFF NaN).
inline float cache_scale(const PagedKVCacheView& c, std::int64_t i) {
  if (c.scales.dtype == DType::e8m0) return e8m0_to_f32(static_cast<const std::uint8_t*>(c.scales.data)[i]);
  return static_cast<const float*>(c.scales.data)[i];
}

// Where one row lives: element offsets of its codes, its first scale and its tail.
struct CacheRow {
  std::int64_t codes = 0, scales = 0, tail = 0;
};

inline CacheRow cache_row(const PagedKVCacheView& c, std::int64_t blk, std::int64_t kv, std::int64_t layer,
                          std::int64_t off, std::int64_t head) {
  CacheRow r;
  r.codes = c.row_offset(blk, kv, layer, off, head);
  if (c.scales.data != nullptr) r.scales = c.scale_offset(blk, kv, layer, off, head);
  if (c.tail.data != nullptr) r.tail = c.tail_offset(blk, kv, layer, off, head);
  return r;
}

}  // namespace mlakit::core
