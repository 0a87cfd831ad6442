// cuda back-end of op 5 (fused QKV matmul into the paged KV cache).
#pragma once

#include "core/common/device_launch.hpp"
#include "core/common/route_switch.hpp"
#include "mlakit/ops/fused_qkv_paged.hpp"

namespace mlakit::cuda {

// `a`: a validated call with every tensor in device memory (g_idx included). `host`: the same call
// with input_row_offsets, the lookup table, cache_lengths and g_idx readable on the host (not needed
// by the launch). `launch`: the stream (null = default stream) and the device error flag. Asynchronous.
Status fused_qkv_paged(const FusedQkvPagedDesc& desc, const FusedQkvPagedArgs& a, const FusedQkvPagedArgs& host,
                       const core::DeviceLaunch& launch);

// The GPTQ decode-once route (bf16 activations): the whole weight decoded into a bf16 workspace by
// one kernel, then the dense tensor-core GEMM on it, instead of every row tile decoding its weight
// tiles again. MLAKIT_CUDA_GPTQ_DECODE_ONCE ("auto": from two row tiles; "off"; "on": every call
// whose shapes allow it) sets the start; tests set it in process.
namespace gptq_decode_once {
core::RouteMode mode();
void set_mode(core::RouteMode m);
}  // namespace gptq_decode_once

}  // namespace mlakit::cuda
