// cuda back-end of op 3 (fused MLA prefill branch, FP8).
#pragma once

#include "core/common/device_launch.hpp"
#include "core/common/route_switch.hpp"
#include "mlakit/ops/mla_prefill_fp8.hpp"

namespace mlakit::cuda {

// `a`: a validated call with every tensor in device memory. `host`: the same call with the offsets,
// cache_offsets, the lookup table and cache_lengths readable on the host (not needed by the
// launch: buffer_length sizes it). `launch`: the stream (null = default stream) and the device error flag. Asynchronous.
// Steps 1-2 rewrite q and the new cache rows in place before steps 3-7 read them (stream order).
Status mla_prefill_fp8(const MlaPrefillFp8Desc& desc, const MlaPrefillFp8Args& a, const MlaPrefillFp8Args& host,
                       const core::DeviceLaunch& launch);

// The attention's K and V tiles by cp.async, each in flight over other work (the next tile's K over
// this tile's softmax and P·V, its V over the next tile's scores), instead of loaded at the top of
// each tile while the block waits; the same bits. MLAKIT_CUDA_MLA_PREFETCH ("on": every call with
// 16-byte loads; "auto" and "off": none, until a GPU has measured it); tests set it in process.
namespace mla_prefetch {
core::RouteMode mode();
void set_mode(core::RouteMode m);
long runs();  // calls that took it since the process started
}  // namespace mla_prefetch

}  // namespace mlakit::cuda
