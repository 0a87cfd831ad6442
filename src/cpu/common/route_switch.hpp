// The cpu back-end's route switches are core's (core/common/route_switch.hpp), under its names.
#pragma once

#include "core/common/route_switch.hpp"

namespace mlakit::cpu {

using core::RouteMode;
using core::RouteSwitch;

}  // namespace mlakit::cpu
