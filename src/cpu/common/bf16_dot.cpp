#include "cpu/common/bf16_dot.hpp"

#include "core/common/cpu_features.hpp"

namespace mlakit::cpu::bf16_dot {
namespace {

RouteSwitch& route() {
  static RouteSwitch r("MLAKIT_BF16_DOT");
  return r;
}

}  // namespace

RouteMode mode() { return route().mode(); }
void set_mode(RouteMode m) { route().set_mode(m); }
bool use(const simd::GemmKernels& g) {
  static const bool fast = core::cpu_info().vendor == "AuthenticAMD";
  if (!g.bf16_dot) return false;
  switch (mode()) {
    case RouteMode::off: return false;
    case RouteMode::on: return true;
    case RouteMode::automatic: return fast;
  }
  return false;
}

}  // namespace mlakit::cpu::bf16_dot
