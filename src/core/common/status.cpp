#include "mlakit/status.hpp"
#include "mlakit/version.hpp"

namespace mlakit {

const char* status_code_name(StatusCode c) {
  switch (c) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::unavailable: return "unavailable";
    case StatusCode::internal: return "internal";
  }
  return "?";
}

const char* version() { return MLAKIT_VERSION; }

}  // namespace mlakit
