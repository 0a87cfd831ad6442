// The output comparisons every golden test and `mlakit check` rely on: each rule must reject what
// it is meant to reject (a comparison that always passes would make the whole matrix unable to
// fail), accept what sits exactly at its limit, and name the first failing element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "goldens/common/compare.hpp"

namespace mlakit::goldens {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor f32(const std::vector<float>& v, std::vector<std::int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<std::int64_t>(v.size())};
  Tensor t(DType::f32, shape);
  std::memcpy(t.data<float>(), v.data(), v.size() * sizeof(float));
  return t;
}

TEST(HarnessCompare, CloseAcceptsTheLimitAndRejectsPastIt) {
  const Tensor e = f32({1.0f, -2.0f, 4.0f, 0.0f});
  // atol 0.25, rtol 0.5: allowances 0.75, 1.25, 2.25, 0.25 (binary fractions, so no rounding).
  EXPECT_TRUE(compare_close("t", e, f32({1.75f, -3.25f, 1.75f, -0.25f}), 0.25, 0.5).pass);
  const Comparison c = compare_close("t", e, f32({1.75f, -3.25f, 6.5f, 0.0f}), 0.25, 0.5);
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_EQ(c.worst_index, 2);
  EXPECT_DOUBLE_EQ(c.max_abs_err, 2.5);
  EXPECT_NE(c.detail.find("t[2]"), std::string::npos) << c.detail;
}

TEST(HarnessCompare, NaNAndInfinitiesMustMatchExactly) {
  EXPECT_TRUE(compare_close("t", f32({kNaN, kInf, -kInf}), f32({kNaN, kInf, -kInf}), 1e9, 1e9).pass);
  for (const auto& [want, got] : {std::pair{kNaN, 1.0f}, std::pair{1.0f, kNaN}, std::pair{kInf, -kInf},
                                  std::pair{kInf, 3e38f}, std::pair{1.0f, kInf}}) {
    const Tensor e = f32({0.0f, want}), a = f32({0.0f, got});
    // However loose the tolerance: a NaN or an infinity is never "close" to anything else.
    const Comparison c = compare_close("t", e, a, 1e300, 1e300);
    EXPECT_FALSE(c.pass) << want << " vs " << got;
    EXPECT_EQ(c.mismatches, 1);
    const Comparison b = compare_bound("t", e, a, {1e300, 1e300});
    EXPECT_FALSE(b.pass) << want << " vs " << got;
  }
}

TEST(HarnessCompare, CosineRejectsARowPointingElsewhere) {
  // Each element within the loose elementwise tolerance, the second row reversed in sign.
  const Tensor e = f32({1, 2, 3, 1, 2, 3}, {2, 3}), a = f32({1, 2, 3, -1, -2, -3}, {2, 3});
  EXPECT_TRUE(compare_close("t", e, a, 10.0, 0.0).pass);
  const Comparison c = compare_close("t", e, a, 10.0, 0.0, 3, 0.99);
  EXPECT_FALSE(c.pass);
  EXPECT_DOUBLE_EQ(c.min_cosine, -1.0);
  EXPECT_NE(c.detail.find("row 1"), std::string::npos) << c.detail;
  // A zero row matches only a zero row.
  EXPECT_TRUE(compare_close("t", f32({0, 0, 0}), f32({0, 0, 0}), 1.0, 0.0, 3, 0.99).pass);
  EXPECT_FALSE(compare_close("t", f32({0, 0, 0}), f32({0.5f, 0, 0}), 1.0, 0.0, 3, 0.99).pass);
}

TEST(HarnessCompare, BoundIsPerElement) {
  const Tensor e = f32({1.0f, 1.0f, 1.0f});
  EXPECT_TRUE(compare_bound("t", e, f32({1.5f, 1.0f, 0.0f}), {0.5, 0.0, 1.0}).pass);
  const Comparison c = compare_bound("t", e, f32({1.5f, 1.0f, 0.0f}), {0.5, 0.0, 0.5});
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_EQ(c.worst_index, 2);
  EXPECT_NE(c.detail.find("derived bound"), std::string::npos) << c.detail;
  EXPECT_FALSE(compare_bound("t", e, f32({1.0f, std::nextafter(1.0f, 2.0f), 1.0f}), {1.0, 0.0, 1.0}).pass);
  // One bound per element, no fewer (nothing read past the list) and no more.
  const Comparison short_list = compare_bound("t", e, e, {1.0, 1.0});
  EXPECT_FALSE(short_list.pass);
  EXPECT_NE(short_list.detail.find("2 bounds for 3 elements"), std::string::npos) << short_list.detail;
  EXPECT_FALSE(compare_bound("t", e, e, {1.0, 1.0, 1.0, 1.0}).pass);
}

TEST(HarnessCompare, ExactComparesBits) {
  const Tensor e = f32({1.0f, -0.0f, kNaN});
  EXPECT_TRUE(compare_exact("t", e, f32({1.0f, -0.0f, kNaN})).pass);
  EXPECT_FALSE(compare_exact("t", e, f32({std::nextafter(1.0f, 2.0f), -0.0f, kNaN})).pass);
  EXPECT_FALSE(compare_exact("t", e, f32({1.0f, 0.0f, kNaN})).pass);  // the sign of zero counts
  Tensor other_nan = f32({1.0f, -0.0f, kNaN});
  other_nan.data<std::uint32_t>()[2] ^= 1u;  // another payload
  EXPECT_FALSE(compare_exact("t", e, other_nan).pass);
}

TEST(HarnessCompare, ShapeOrTypeMismatchFails) {
  EXPECT_FALSE(compare_close("t", f32({1, 2}), f32({1, 2, 3}), 1.0, 1.0).pass);
  EXPECT_FALSE(compare_exact("t", f32({1, 2, 3, 4}, {2, 2}), f32({1, 2, 3, 4}, {4})).pass);
  Tensor i32(DType::i32, {2});
  EXPECT_FALSE(compare_bound("t", f32({0, 0}), i32, {1.0, 1.0}).pass);
}

}  // namespace
}  // namespace mlakit::goldens
