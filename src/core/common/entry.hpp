// The part every operator's entry point shares once its host mirrors are prepared: validate, route,
// run on the chosen back-end. An entry point names its validator and its three back-end calls;
// the order of the steps (and so what a failing call may touch: nothing) lives here once.
#pragma once

#include <utility>

#include "core/common/device_kernels.hpp"
#include "core/common/device_mirror.hpp"
#include "core/common/dispatch.hpp"
#include "mlakit/backend.hpp"
#include "mlakit/status.hpp"

namespace mlakit::core {

// validate(MemorySpace*) -> Status runs on the mirrored arguments and reports where the call's
// tensors live; then the mirrors are finished and the call routed. on_cuda() -> Status runs once
// every tensor is known to be device memory; on_cpu() -> Status runs host calls routed to cpu
// (`automatic` included), on_reference() those that name the reference.
template <class Validate, class OnCuda, class OnCpu, class OnReference>
Status run_validated(const char* op, const RunOptions& options, DeviceMirror& mirror, Validate&& validate,
                     OnCuda&& on_cuda, OnCpu&& on_cpu, OnReference&& on_reference) {
  MemorySpace space = MemorySpace::host;
  Status s = validate(&space);
  if (!s.ok()) return s;
  s = mirror.finish(&space);
  if (!s.ok()) return s;
  Route r;
  s = route(op, options, space, &r);
  if (!s.ok()) return s;
  if (r.backend == Backend::cuda) {
    s = mirror.require_device();
    return s.ok() ? on_cuda() : s;
  }
  if (r.backend == Backend::cpu) return on_cpu();
  on_reference();
  return Status::success();
}

// Calls the registered device launcher `member` with `args`, or reports that there is none.
template <class Fn, class... Args>
Status launch_device(const char* op, Fn DeviceKernels::*member, Args&&... args) {
  Fn launch = nullptr;
  const Status s = device_launcher(op, member, &launch);
  return s.ok() ? launch(std::forward<Args>(args)...) : s;
}

}  // namespace mlakit::core
