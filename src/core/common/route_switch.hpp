// A process-wide three-way switch for an alternative route of a back-end (the cpu back-end's BLAS
// library GEMM and panel GEMM, the cuda back-end's GPTQ decode): "auto" lets each operator take the
// route from its own row threshold, "off" never, "on" from a single row (tests force a route on
// every case with it).
// The start value comes from an environment variable; tests and benchmarks set it in process.
#pragma once

#include <atomic>
#include <cstddef>

namespace mlakit::core {

enum class RouteMode { automatic, off, on };

class RouteSwitch {
 public:
  // `env`: the variable read once at construction ("auto", "off"/"0", "on"/"1"; else auto).
  explicit RouteSwitch(const char* env);
  RouteMode mode() const { return mode_.load(); }
  void set_mode(RouteMode m) { mode_.store(m); }
  // Whether a call of `rows` output rows takes the route, given the operator's threshold for the
  // automatic mode (never when the route is not available).
  bool use_for(bool available, std::size_t rows, std::size_t auto_min_rows) const;

 private:
  std::atomic<RouteMode> mode_;
};

}  // namespace mlakit::core
