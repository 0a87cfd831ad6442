// The golden data's random fills: fill_normal on benchmark-sized tensors (drawn in order, converted
// on every core) gives the bytes of the element-by-element loop, for every float dtype.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "goldens/common/random.hpp"
#include "goldens/common/tensor.hpp"

namespace mlakit::goldens {
namespace {

// Past the size where the fill goes parallel (two chunks of 2^20), with a partial last chunk.
constexpr std::int64_t kLarge = (std::int64_t{1} << 21) + 4099;

std::uint64_t expected_bits(DType dtype, double v) {
  const float f = static_cast<float>(v);
  switch (dtype) {
    case DType::f64: { std::uint64_t b; std::memcpy(&b, &v, 8); return b; }
    case DType::f32: { std::uint32_t b; std::memcpy(&b, &f, 4); return b; }
    case DType::bf16: return f32_to_bf16(f);
    case DType::f16: return f32_to_f16(f);
    case DType::f8e4m3: return f32_to_f8e4m3(f);
    default: return 0;
  }
}

std::uint64_t stored_bits(const Tensor& t, std::int64_t i) {
  std::uint64_t b = 0;
  const std::size_t size = dtype_size(t.dtype());
  std::memcpy(&b, t.bytes() + static_cast<std::size_t>(i) * size, size);
  return b;
}

TEST(GoldensRandom, LargeNormalFillsEqualTheSerialDraws) {
  for (const DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16, DType::f8e4m3}) {
    for (const std::uint64_t seed : {1ull, 7ull, 0x5eedull}) {
      Tensor t(dtype, {kLarge});
      Rng rng(seed);
      fill_normal(t, rng, 0.75);
      const double after = rng.uniform();  // the generator is left where the serial loop leaves it
      Rng ref(seed);
      std::int64_t mismatches = 0, first = -1;
      for (std::int64_t i = 0; i < kLarge; ++i) {
        if (stored_bits(t, i) != expected_bits(dtype, 0.75 * ref.normal())) {
          if (first < 0) first = i;
          ++mismatches;
        }
      }
      EXPECT_EQ(mismatches, 0) << dtype_name(dtype) << " seed " << seed << ", first at " << first;
      EXPECT_EQ(after, ref.uniform()) << dtype_name(dtype) << " seed " << seed;
    }
  }
}

}  // namespace
}  // namespace mlakit::goldens
