// Element-type conversions against independent formulations (docs/README.md §2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "mlakit/dtype.hpp"

namespace mlakit {
namespace {

// Independent decode: from the field definitions with ldexp.
double fp8_value(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 7 - 3);
  return s ? -mag : mag;
}

TEST(Fp8, DecodesAll256CodesExactly) {
  int nan_count = 0;
  for (int c = 0; c < 256; ++c) {
    const float f = f8e4m3_to_f32(static_cast<std::uint8_t>(c));
    const double want = fp8_value(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << c;
      ++nan_count;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), want) << "code " << c;
    EXPECT_EQ(std::signbit(f), (c & 0x80) != 0) << "code " << c;  // 0x80 is -0, not +0
  }
  EXPECT_EQ(nan_count, 2);
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal is not flushed
  EXPECT_EQ(f8e4m3_to_f32(0x7E), 448.0f);
}

TEST(Fp8, EncodeRoundTripsEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(f32_to_f8e4m3(f8e4m3_to_f32(static_cast<std::uint8_t>(c))), c) << c;
  }
}

TEST(Fp8, EncodeRoundsToNearestEvenAndSaturates) {
  // Brute force: the nearest finite code, ties to the even mantissa, against a scan of all codes.
  for (float x = -500.0f; x <= 500.0f; x += 0.0137f) {
    for (float v : {x, x * 1e-3f}) {
      const std::uint8_t got = f32_to_f8e4m3(v);
      double best = INFINITY;
      int want = -1;
      for (int c = 0; c < 256; ++c) {
        const double val = fp8_value(c);
        if (std::isnan(val)) continue;
        const double d = std::fabs(val - std::clamp(static_cast<double>(v), -448.0, 448.0));
        if (d < best || (d == best && (c & 1) == 0 && (want & 1) == 1)) {
          if (d == best && std::signbit(val) != std::signbit(v)) continue;
          best = d;
          want = c;
        }
      }
      EXPECT_EQ(f8e4m3_to_f32(got), fp8_value(want)) << v;
    }
  }
  EXPECT_EQ(f32_to_f8e4m3(INFINITY), 0x7E);
  EXPECT_EQ(f32_to_f8e4m3(-1e9f), 0xFE);
  EXPECT_EQ(f32_to_f8e4m3(NAN), 0x7F);
}

TEST(Bf16, RoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  float tie;
  std::uint32_t u = 0x3F808000u;  // exactly halfway between 0x3F80 and 0x3F81: to even
  std::memcpy(&tie, &u, 4);
  EXPECT_EQ(f32_to_bf16(tie), 0x3F80);
  u = 0x3F818000u;  // halfway between 0x3F81 and 0x3F82: to even (0x3F82)
  std::memcpy(&tie, &u, 4);
  EXPECT_EQ(f32_to_bf16(tie), 0x3F82);
  u = 0x3F808001u;
  std::memcpy(&tie, &u, 4);
  EXPECT_EQ(f32_to_bf16(tie), 0x3F81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  u = 0x7F800001u;  // signalling NaN with a low payload must not round to infinity
  std::memcpy(&tie, &u, 4);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(tie))));
  EXPECT_EQ(f32_to_bf16(3.4e38f), 0x7F80);  // rounds past the largest bf16 to infinity
}

TEST(F16, RoundTripsEveryCodeAndRounds) {
  for (int c = 0; c < 65536; ++c) {
    const auto h = static_cast<std::uint16_t>(c);
    const float f = f16_to_f32(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << c;
    // Independent decode.
    const int s = c >> 15, e = (c >> 10) & 31, m = c & 1023;
    if (e == 31) continue;
    const double want = (s ? -1 : 1) * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
    EXPECT_EQ(static_cast<double>(f), want) << c;
  }
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);  // 1.5·2^-25 rounds up to 2^-24
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (zero)
}

}  // namespace
}  // namespace mlakit
