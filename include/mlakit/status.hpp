// Every public entry point returns a Status; no exception crosses the API.
#pragma once

#include <string>
#include <utility>

namespace mlakit {

enum class StatusCode {
  ok = 0,
  invalid_argument,  // the call is malformed: shapes, dtypes, offsets, page tables, aliasing
  unsupported,       // valid, but this back-end does not implement it (the message says why)
  unavailable,       // the back-end is not present (no GPU, not built)
  internal,          // a failure inside a back-end (a CUDA error, an allocation failure)
};

struct Status {
  StatusCode code = StatusCode::ok;
  std::string op;       // operator name, e.g. "lightning_indexer"
  std::string field;    // argument or field, e.g. "input_row_offsets[3]"
  std::string message;  // the whole sentence: "op: field=value ... (expected ...)"

  bool ok() const { return code == StatusCode::ok; }
  explicit operator bool() const { return ok(); }

  static Status success() { return {}; }
  static Status error(StatusCode c, std::string op, std::string field, std::string message) {
    return Status{c, std::move(op), std::move(field), std::move(message)};
  }
};

const char* status_code_name(StatusCode c);

}  // namespace mlakit
