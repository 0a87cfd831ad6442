// cuda back-end of op 5 (fused QKV matmul into the paged KV cache).
#pragma once

#include "core/common/device_launch.hpp"
#include "mlakit/ops/fused_qkv_paged.hpp"

namespace mlakit::cuda {

// `a`: a validated call with every tensor in device memory (g_idx included). `host`: the same call
// with input_row_offsets, the lookup table, cache_lengths and g_idx readable on the host (not needed
// by the launch). `launch`: the stream (null = default stream) and the device error flag. Asynchronous.
Status fused_qkv_paged(const FusedQkvPagedDesc& desc, const FusedQkvPagedArgs& a, const FusedQkvPagedArgs& host,
                       const core::DeviceLaunch& launch);

}  // namespace mlakit::cuda
