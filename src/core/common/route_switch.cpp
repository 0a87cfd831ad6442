#include "core/common/route_switch.hpp"

#include <cstdlib>
#include <cstring>

namespace mlakit::core {
namespace {

RouteMode mode_from_env(const char* env) {
  const char* v = std::getenv(env);
  if (v == nullptr || std::strcmp(v, "auto") == 0) return RouteMode::automatic;
  if (std::strcmp(v, "off") == 0 || std::strcmp(v, "0") == 0) return RouteMode::off;
  if (std::strcmp(v, "on") == 0 || std::strcmp(v, "1") == 0) return RouteMode::on;
  return RouteMode::automatic;
}

}  // namespace

RouteSwitch::RouteSwitch(const char* env) : mode_(mode_from_env(env)) {}

bool RouteSwitch::use_for(bool available, std::size_t rows, std::size_t auto_min_rows) const {
  if (!available || rows == 0) return false;
  switch (mode()) {
    case RouteMode::off: return false;
    case RouteMode::on: return true;
    case RouteMode::automatic: return rows >= auto_min_rows;
  }
  return false;
}

}  // namespace mlakit::core
