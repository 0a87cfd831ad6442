#include "cpu/common/tile_gemm.hpp"

namespace mlakit::cpu::tile_gemm {
namespace {

RouteSwitch& route() {
  static RouteSwitch r("MLAKIT_TILE_GEMM");
  return r;
}

}  // namespace

RouteMode mode() { return route().mode(); }
void set_mode(RouteMode m) { route().set_mode(m); }
bool use_for(bool available, std::size_t rows, std::size_t auto_min_rows) {
  return route().use_for(available, rows, auto_min_rows);
}

}  // namespace mlakit::cpu::tile_gemm
