// Which back-end runs a validated call.
#pragma once

#include "mlakit/backend.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit::core {

// Resolves `automatic` from where the tensors live (host -> cpu, device -> cuda) and refuses
// combinations that cannot work (host back-ends on device memory, cuda on host memory, a back-end
// that is not present). The cpu back-end runs every valid call, so nothing falls back to the
// reference: `automatic` never computes there.
struct Route {
  Backend backend = Backend::reference;
};

Status route(const char* op, const RunOptions& options, MemorySpace space, Route* out);

}  // namespace mlakit::core
