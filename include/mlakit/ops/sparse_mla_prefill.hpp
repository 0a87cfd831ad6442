// Op 4 — sparse MLA prefill (DeepSeek-V3.2 `mla_sm100_prefill_sparse`), spec 04.
//
// Each query row attends to the cache rows listed in its `indices` row (encoded physical rows
// blk·page_size + off of layer `layer_idx`); K is the whole row, V its first v_depth columns.
// Invalid slots (p >= topk_lengths[t], index < 0 or >= num_rows) are skipped; duplicates count.
// A row with no valid slot gives output 0 and lse +inf. The optional sink adds exp(sink[h] - m)
// to the denominator only.
#pragma once

#include <cstdint>

#include "mlakit/backend.hpp"
#include "mlakit/paged_kv_cache.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit {

struct SparseMlaPrefillDesc {
  std::int64_t num_q_heads = 128;    // Hq
  std::int64_t qk_depth = 576;
  std::int64_t v_depth = 512;        // <= qk_depth
  std::int64_t indices_stride = 2048;
  float scale = 1.0f;
};

struct SparseMlaPrefillArgs {
  TensorView q;               // bf16 [T, Hq, qk_depth]
  PagedKVCacheView kv_cache;  // bf16 MLA cache, or f8e4m3 with one f32 scale per row (quant_granularity >= qk_depth)
  std::uint32_t layer_idx = 0;
  TensorView indices;         // i32 or u32 [T, indices_stride]
  TensorView topk_lengths;    // u32 [T], optional (absent: indices_stride)
  TensorView attn_sink;       // f32 [Hq], optional
  TensorView output;          // bf16 [T, Hq, v_depth] (written)
  TensorView lse;             // f32 [T, Hq], optional (written)
};

Status sparse_mla_prefill(const SparseMlaPrefillDesc& desc, const SparseMlaPrefillArgs& args,
                          const RunOptions& options = {});

}  // namespace mlakit
