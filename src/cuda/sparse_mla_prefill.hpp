// cuda back-end of op 4 (sparse MLA prefill), bf16 and fp8 caches.
#pragma once

#include "core/common/device_launch.hpp"
#include "mlakit/ops/sparse_mla_prefill.hpp"

namespace mlakit::cuda {

// `a`: a validated call with every tensor in device memory (topk_lengths, when present, was
// checked against indices_stride on its host mirror; the kernel also clamps it). `host`: the same
// call with topk_lengths readable on the host (not needed by the launch). `launch`: the stream
// (null = default stream). Asynchronous: returns once the kernel is queued.
Status sparse_mla_prefill(const SparseMlaPrefillDesc& desc, const SparseMlaPrefillArgs& a,
                          const SparseMlaPrefillArgs& host, const core::DeviceLaunch& launch);

}  // namespace mlakit::cuda
