// Whether calls take the cuda back-end's wgmma kernels (op 1's scores, op 5's bf16 GEMMs, op 3's KV
// projection and attention, the scores and P·V of op 4's ring kernel):
// MLAKIT_CUDA_WGMMA ("auto": the kernels an H200 measured faster than their mma.sync twins, which
// so far are op 4's ring kernel's products; "on": every call a wgmma kernel can take; "off"), set in
// process by tests and benchmarks. They exist only in builds with sm_90a code, and run only on an
// sm_90 GPU.
#pragma once

#include "core/common/route_switch.hpp"

namespace mlakit::cuda::wgmma_route {

core::RouteMode mode();
void set_mode(core::RouteMode m);
// The mode is "on", or "auto" and `by_default` (the caller's kernel measured faster on wgmma), the
// build has sm_90a code and the current device is an sm_90 GPU.
bool takes(bool by_default);
// A call that took a wgmma kernel (once per call); the calls since the process started.
void count();
long runs();

}  // namespace mlakit::cuda::wgmma_route
