// Rounding an f64 value to bf16 from the definition, for oracles: the two bf16 neighbours are
// found from the spacing at the value's binade and compared, sharing no code with the library's
// conversions.
#pragma once

#include <cstdint>

namespace mlakit::testing {

// Nearest bf16 (ties to even; at or beyond 2^128 after rounding, inf), as bits. NaN -> 0x7FC0.
std::uint16_t round_to_bf16_bits(double x);

}  // namespace mlakit::testing
