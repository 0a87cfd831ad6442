#include "core/common/device_kernels.hpp"
#include "core/common/dispatch.hpp"
#include "mlakit/backend.hpp"

namespace mlakit {

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::automatic: return "automatic";
    case Backend::reference: return "reference";
    case Backend::cpu: return "cpu";
    case Backend::cuda: return "cuda";
  }
  return "?";
}

bool parse_backend(const std::string& text, Backend* out) {
  for (Backend b : {Backend::automatic, Backend::reference, Backend::cpu, Backend::cuda}) {
    if (text == backend_name(b)) {
      *out = b;
      return true;
    }
  }
  if (text == "auto") {
    *out = Backend::automatic;
    return true;
  }
  return false;
}

}  // namespace mlakit

namespace mlakit::core {

Status route(const char* op, const RunOptions& options, MemorySpace space, Route* out) {
  Backend b = options.backend;
  if (b == Backend::automatic) b = space == MemorySpace::device ? Backend::cuda : Backend::cpu;
  if (b == Backend::cuda && space != MemorySpace::device)
    return Status::error(StatusCode::invalid_argument, op, "backend",
                         std::string(op) + ": backend=cuda but the tensors are in host memory (expected device memory)");
  if (b != Backend::cuda && space == MemorySpace::device)
    return Status::error(StatusCode::invalid_argument, op, "backend",
                         std::string(op) + ": backend=" + backend_name(b) +
                             " but the tensors are in device memory (expected host memory)");
  std::string why;
  if (!backend_available(b, &why))
    return Status::error(StatusCode::unavailable, op, "backend",
                         std::string(op) + ": backend=" + backend_name(b) + " is unavailable: " + why);
  out->backend = b;
  return Status::success();
}

}  // namespace mlakit::core
