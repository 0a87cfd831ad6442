#include "support/bf16_rounding.hpp"

#include <cmath>
#include <cstring>
#include <limits>

namespace mlakit::testing {
namespace {

std::uint16_t bits_of_bf16_value(double exact_bf16_value) {
  const float f = static_cast<float>(exact_bf16_value);
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>(u >> 16);
}

}  // namespace

std::uint16_t round_to_bf16_bits(double x) {
  if (std::isnan(x)) return 0x7FC0;
  const bool neg = std::signbit(x);
  const double m = std::fabs(x);
  // Spacing of bf16 values around m: 8 significant bits, subnormal spacing 2^-133.
  int e = 0;
  std::frexp(m, &e);  // m in [2^(e-1), 2^e)
  const int exp = (m == 0 || e - 1 < -126) ? -126 : e - 1;
  const double step = std::ldexp(1.0, exp - 7);
  const double lo = std::floor(m / step) * step, hi = lo + step;
  double r = (m - lo < hi - m) ? lo : (hi - m < m - lo) ? hi : (std::fmod(lo / step, 2.0) == 0 ? lo : hi);
  if (r >= 0x1p128) r = std::numeric_limits<double>::infinity();
  const std::uint16_t bits = std::isinf(r) ? std::uint16_t{0x7F80} : bits_of_bf16_value(r);
  return static_cast<std::uint16_t>(bits | (neg ? 0x8000 : 0));
}

}  // namespace mlakit::testing
