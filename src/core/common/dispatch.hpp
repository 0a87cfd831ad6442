// Which back-end runs a validated call.
#pragma once

#include "mlakit/backend.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit::core {

// Resolves `automatic` from where the tensors live (host -> cpu, device -> cuda) and refuses
// combinations that cannot work (host back-ends on device memory, cuda on host memory, a back-end
// that is not present). `automatic` on the host may fall back to the reference back-end when the
// cpu back-end declines a call (it returns StatusCode::unsupported before writing anything).
struct Route {
  Backend backend = Backend::reference;
  bool fall_back_to_reference = false;
};

Status route(const char* op, const RunOptions& options, MemorySpace space, Route* out);

}  // namespace mlakit::core
