#include "cpu/common/panel_gemm.hpp"

namespace mlakit::cpu::panel_gemm {
namespace {

RouteSwitch& route() {
  static RouteSwitch r("MLAKIT_PANEL_GEMM");
  return r;
}

}  // namespace

RouteMode mode() { return route().mode(); }
void set_mode(RouteMode m) { route().set_mode(m); }
bool use_for(std::size_t rows, std::size_t auto_min_rows) { return route().use_for(true, rows, auto_min_rows); }

}  // namespace mlakit::cpu::panel_gemm
