// What both of op 4's cuda kernels (sparse_mla_prefill.cu, sparse_mla_ring.cu) take from a call:
// its tensors as device pointers, its sizes, and each query row's slot count.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/common.cuh"
#include "cuda/mma.cuh"
#include "mlakit/ops/sparse_mla_prefill.hpp"

namespace mlakit::cuda {

// How a call's cache stores a row: bf16, or fp8 codes (wq of them) with one scale per row, or
// "grouped": several scales (a group of gran columns each) and/or a bf16 tail of wt columns
// (FlashMLA's V32 and MODEL1 rows). groups: the scales of a row (1 for one scale per row, 0 for bf16).
struct CacheRows {
  bool fp8, grouped;
  int wq, wt, gran, groups;
  static CacheRows of(const PagedKVCacheView& kc) {
    CacheRows r;
    r.fp8 = kc.blocks.dtype == DType::f8e4m3;
    r.grouped = r.fp8 && (kc.tail_size() > 0 || kc.quant_granularity < kc.quantized_size());
    r.wq = static_cast<int>(kc.quantized_size());
    r.wt = static_cast<int>(kc.tail_size());
    r.gran = r.grouped ? static_cast<int>(kc.quant_granularity) : r.wq;
    r.groups = r.grouped ? static_cast<int>(ceil_div(kc.quantized_size(), kc.quant_granularity)) : r.fp8 ? 1 : 0;
    return r;
  }
};

struct SparseMlaCall {
  const std::uint16_t* q;
  DevPagedCache cache;
  int layer;
  const std::int32_t* indices;        // a u32 tensor is read as the same bits
  const std::uint32_t* topk_lengths;  // null: indices_stride
  std::uint32_t* error_flag;          // null: not checked (validated on the host)
  const float* sink;                  // null: no sink
  std::uint16_t* out;
  float* lse;                         // null: not written
  float* max_logits;                  // null: not written
  int Hq, head_groups, qk, Dp, vd, stride;  // head_groups: blocks per query row; Dp: qk_depth padded to 16
  float scale;
  std::int64_t num_rows;

  // The call for blocks of `heads` heads; StatusCode::unsupported where its T x head groups
  // blocks exceed one launch.
  Status set(const char* op, const SparseMlaPrefillDesc& d, const SparseMlaPrefillArgs& a, const core::DeviceLaunch& launch,
             int heads) {
    q = static_cast<const std::uint16_t*>(a.q.data);
    cache = DevPagedCache::from(a.kv_cache);
    layer = static_cast<int>(a.layer_idx);
    indices = static_cast<const std::int32_t*>(a.indices.data);
    topk_lengths = static_cast<const std::uint32_t*>(a.topk_lengths.data);
    error_flag = launch.error_flag;
    sink = static_cast<const float*>(a.attn_sink.data);
    out = static_cast<std::uint16_t*>(a.output.data);
    lse = static_cast<float*>(a.lse.data);
    max_logits = static_cast<float*>(a.max_logits.data);
    Hq = static_cast<int>(d.num_q_heads);
    qk = static_cast<int>(d.qk_depth);
    Dp = static_cast<int>(round_up(d.qk_depth, 16));
    vd = static_cast<int>(d.v_depth);
    stride = static_cast<int>(d.indices_stride);
    scale = d.scale;
    num_rows = a.kv_cache.num_blocks() * a.kv_cache.page_size();
    head_groups = static_cast<int>(ceil_div(d.num_q_heads, heads));
    const std::int64_t T = a.q.shape[0];
    if (T * head_groups > 0x7fffffff)
      return exceeds_one_launch(op, "q", "T=" + std::to_string(T) + " with num_q_heads=" + std::to_string(d.num_q_heads));
    return Status::success();
  }

  // Row t's slots: indices_stride, or topk_lengths[t] where given, clamped to the stride (a longer
  // one, which the host's validation of a device tensor cannot see, raises the device flag).
  __device__ std::int64_t slots_of_row(std::int64_t t) const {
    std::int64_t len = stride;
    if (topk_lengths != nullptr) {
      const std::int64_t given = topk_lengths[t];
      if (given > len && error_flag != nullptr && threadIdx.x == 0) atomicOr(error_flag, core::kDeviceErrorTopkLengths);
      len = min(len, given);
    }
    return len;
  }
};

// Grouped rows (several scales, or a bf16 tail): P's A fragment for rows ra and ra + 8 of a head
// tile and slots [16·kk, +16) in load_a_rowmajor's layout, bf16(weight · the scale of group grp),
// with the weights f32 in shared memory (row stride ldw) and the slots' scales at
// scales[slot · groups + grp] (grp == groups: the tail, scale 1). Rounded once per group, as the
// single-scale P is.
__device__ __forceinline__ void grouped_p_fragment(std::uint32_t a[4], const float* weights, int ldw, const float* scales,
                                                   int groups, int grp, int ra, int kk) {
  const int k = 16 * kk + 2 * static_cast<int>(threadIdx.x & 3), rb = ra + 8;
  auto w = [&](int row, int slot) {
    const float sc = grp < groups ? scales[slot * groups + grp] : 1.0f;
    return f32_to_bf16(weights[row * ldw + slot] * sc);
  };
  a[0] = pack_bf16x2(w(ra, k), w(ra, k + 1));
  a[1] = pack_bf16x2(w(rb, k), w(rb, k + 1));
  a[2] = pack_bf16x2(w(ra, k + 8), w(ra, k + 9));
  a[3] = pack_bf16x2(w(rb, k + 8), w(rb, k + 9));
}

}  // namespace mlakit::cuda
