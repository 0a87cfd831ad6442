// Whether calls take the cuda back-end's wgmma kernels (op 5's bf16 GEMMs, op 3's KV projection, the
// scores and P·V of op 4's ring kernel):
// MLAKIT_CUDA_WGMMA ("auto": not yet, the mma.sync kernels stay the default until a GPU run has
// validated these; "on": every call a wgmma kernel can take; "off"), set in process by tests and
// benchmarks. They exist only in builds with sm_90a code, and run only on an sm_90 GPU.
#pragma once

#include "core/common/route_switch.hpp"

namespace mlakit::cuda::wgmma_route {

core::RouteMode mode();
void set_mode(core::RouteMode m);
// The mode is "on", the build has sm_90a code and the current device is an sm_90 GPU.
bool takes();
// A call that took a wgmma kernel (once per call); the calls since the process started.
void count();
long runs();

}  // namespace mlakit::cuda::wgmma_route
