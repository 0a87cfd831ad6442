// Op 5 — fused QKV matmul into the paged KV cache
// (`generic_fused_qkv_matmul_kv_cache_paged_ragged`), spec 05.
//
// Y = X·Wᵀ for the new tokens; columns [0, q_dim) go to `output`, the rest are written into the
// cache at each token's position (K then V heads for an ordinary cache, the single latent head
// for an MLA cache). Weight formats: dense (dtype of X), FP8 block-scaled (128×128 scale blocks),
// GPTQ int4 with optional zero points and act-order g_idx.
#pragma once

#include <cstdint>

#include "mlakit/backend.hpp"
#include "mlakit/paged_kv_cache.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit {

enum class WeightFormat { dense, fp8_block, gptq };

struct FusedQkvPagedDesc {
  std::int64_t q_dim = 4096;
  WeightFormat weight_format = WeightFormat::dense;
  std::int64_t group_size = 128;  // GPTQ only
  bool has_zp = false;            // GPTQ only
};

struct FusedQkvPagedArgs {
  TensorView hidden_state;       // bf16 or f32 [T, K]
  TensorView input_row_offsets;  // u32 [B+1]
  // dense:     weight = dtype [N, K]
  // fp8_block: weight = f8e4m3 [N, K], weight_scale = f32 [ceil(N/128), ceil(K/128)]
  // gptq:      qweight = i32 [K/8, N], scales = f16|bf16 [K/gs, N], qzeros = i32 [K/gs, N/8] (has_zp),
  //            g_idx = i32 [K] (optional)
  TensorView weight;
  TensorView weight_scale;
  TensorView qweight;
  TensorView scales;
  TensorView qzeros;
  TensorView g_idx;
  PagedKVCacheView kv_cache;     // same dtype as hidden_state; kv_dim 2 (ordinary) or 1 (MLA); written
  std::uint32_t layer_idx = 0;
  TensorView output;             // dtype [T, q_dim] (written)
};

Status fused_qkv_paged(const FusedQkvPagedDesc& desc, const FusedQkvPagedArgs& args,
                       const RunOptions& options = {});

}  // namespace mlakit
