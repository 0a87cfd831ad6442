// The golden-file metadata readers (goldens/common/params.hpp), the checked tensor sizes and the
// knob kinds: each refusal class with its exact message, and what passes.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "goldens/common/driver.hpp"
#include "goldens/common/params.hpp"

namespace mlakit::goldens {
namespace {

constexpr ParamSpec kSpecs[] = {
    size_param("heads"),
    size_param("layer_idx", 0),
    size_param("page_size", 1, false),
    count_param("init_blocks"),
    float_param("scale"),
    {"mask", ParamKind::text, true, 0, 0, "causal|none"},
    {"has_zp", ParamKind::boolean, false},
};

json valid() {
  return json{{"heads", 4}, {"layer_idx", 0}, {"init_blocks", 1}, {"scale", 0.5}, {"mask", "causal"}};
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string read_with(const std::string& key, json value) {
  json p = valid();
  if (value.is_discarded()) p.erase(key); else p[key] = std::move(value);
  return refusal([&] { ParamReader("op", p, kSpecs); });
}

TEST(ParamReader, ReadsValidParams) {
  json p = valid();
  p["has_zp"] = true;
  p["page_size"] = 16;
  const ParamReader r("op", p, kSpecs);
  EXPECT_EQ(r.integer("heads"), 4);
  EXPECT_EQ(r.integer_or("page_size", 1), 16);
  EXPECT_EQ(r.number("scale"), 0.5);
  EXPECT_EQ(r.text("mask"), "causal");
  EXPECT_TRUE(r.boolean_or("has_zp", false));
  EXPECT_EQ(ParamReader("op", valid(), kSpecs).integer_or("page_size", 7), 7);
  p["scale"] = 2;  // an integer is a number
  EXPECT_EQ(ParamReader("op", p, kSpecs).number("scale"), 2.0);
  p["init_blocks"] = INT64_MAX;  // a count the library bounds itself
  EXPECT_EQ(ParamReader("op", p, kSpecs).integer("init_blocks"), INT64_MAX);
}

TEST(ParamReader, RefusesEachClassByName) {
  const std::string ints = "expected an integer in [1, 2147483647]";
  EXPECT_EQ(read_with("heads", json::value_t::discarded), "op: params.heads is missing (" + ints + ")");
  EXPECT_EQ(read_with("heads", nullptr), "op: params.heads=null (" + ints + ")");
  EXPECT_EQ(read_with("heads", "4"), "op: params.heads=\"4\" (" + ints + ")");
  EXPECT_EQ(read_with("heads", true), "op: params.heads=true (" + ints + ")");
  EXPECT_EQ(read_with("heads", 4.0), "op: params.heads=4.0 (" + ints + ")");
  EXPECT_EQ(read_with("heads", json::array({4})), "op: params.heads=[4] (" + ints + ")");
  EXPECT_EQ(read_with("heads", 0), "op: params.heads=0 (" + ints + ")");
  EXPECT_EQ(read_with("heads", -3), "op: params.heads=-3 (" + ints + ")");
  EXPECT_EQ(read_with("heads", std::int64_t{1} << 31), "op: params.heads=2147483648 (" + ints + ")");
  EXPECT_EQ(read_with("init_blocks", std::uint64_t{1} << 63),
            "op: params.init_blocks=9223372036854775808 (expected an integer in [0, 9223372036854775807])");
  EXPECT_EQ(read_with("layer_idx", -1), "op: params.layer_idx=-1 (expected an integer in [0, 2147483647])");
  EXPECT_EQ(read_with("scale", 1e300), "op: params.scale=1e+300 (expected a number in [-3.40282347e+38, 3.40282347e+38])");
  EXPECT_EQ(read_with("scale", "x"), "op: params.scale=\"x\" (expected a number in [-3.40282347e+38, 3.40282347e+38])");
  EXPECT_EQ(read_with("mask", "both"), "op: params.mask=\"both\" (expected \"causal\" or \"none\")");
  EXPECT_EQ(read_with("has_zp", 1), "op: params.has_zp=1 (expected true or false)");
  EXPECT_EQ(read_with("bogus", 1),
            "op: params.bogus=1 (not a parameter of op; expected keys: heads, layer_idx, page_size, init_blocks, "
            "scale, mask, has_zp)");
  EXPECT_EQ(refusal([] { ParamReader("op", json::array(), kSpecs); }),
            "op: params=[] (expected a JSON object of the call's parameters)");
  EXPECT_EQ(read_with("heads", std::string(100, 'x')).substr(0, 57),
            "op: params.heads=\"" + std::string(36, 'x') + "...");
}

TEST(ParamReader, ConditionalAndContradictoryKeys) {
  json p = valid();
  const ParamReader r("op", p, kSpecs);
  EXPECT_EQ(refusal([&] { r.require("page_size", "for a paged call"); }),
            "op: params.page_size is missing (expected an integer in [1, 2147483647]; required for a paged call)");
  EXPECT_EQ(refusal([&] { r.agrees("layer_idx", 2, "blocks.shape[2]"); }),
            "op: params.layer_idx=0 (contradicts blocks.shape[2]=2; expected the same value)");
  EXPECT_EQ(refusal([&] { r.agrees("page_size", 5, "blocks.shape[3]"); }), "(accepted)");  // absent: nothing to agree
  EXPECT_EQ(refusal([&] { r.contradiction("mask", "no mask here"); }), "op: params.mask=\"causal\" (no mask here)");
}

TEST(ToleranceReader, FileEntriesOverrideAndAreChecked) {
  const json fallback = {{"out.y", {{"atol", 0.5}, {"selection", {{"c", 4}}}}}};
  EXPECT_EQ(ToleranceReader("op", json::object(), fallback).number("out.y", "atol", 0, 1), 0.5);
  EXPECT_EQ(ToleranceReader("op", json::object(), fallback).number_or("out.y", "selection.c", 0, 10, 1), 4.0);
  EXPECT_EQ(ToleranceReader("op", json{{"out.y", {{"atol", 0.25}}}}, fallback).number("out.y", "atol", 0, 1), 0.25);
  EXPECT_EQ(refusal([&] { ToleranceReader("op", json{{"out.y", {{"atol", -1}}}}, fallback).number("out.y", "atol", 0, 1); }),
            "op: tolerance.out.y.atol=-1 (expected a number in [0, 1])");
  EXPECT_EQ(refusal([&] { ToleranceReader("op", json{{"out.y", {{"atol", "a"}}}}, fallback).number("out.y", "atol", 0, 1); }),
            "op: tolerance.out.y.atol=\"a\" (expected a number in [0, 1])");
  EXPECT_EQ(refusal([&] { ToleranceReader("op", json{{"out.y", json::object()}}, fallback).number("out.y", "atol", 0, 1); }),
            "op: tolerance.out.y.atol is missing (expected a number in [0, 1])");
  EXPECT_EQ(refusal([&] { ToleranceReader("op", json{{"out.y", 3}}, fallback); }),
            "op: tolerance.out.y=3 (expected a JSON object)");
  EXPECT_EQ(refusal([&] { ToleranceReader("op", json{{"out.z", json::object()}}, fallback); }),
            "op: tolerance.out.z={} (not an output of op here)");
  EXPECT_EQ(refusal([&] { ToleranceReader("op", json{{"out.y", {{"selection", 2}}}}, fallback).number_or("out.y", "selection.c", 0, 1, 0); }),
            "op: tolerance.out.y.selection=2 (expected a JSON object)");
  EXPECT_EQ(refusal([&] { ToleranceReader("op", json{{"out.y", {{"exact", 1}}}}, fallback).flag("out.y", "exact"); }),
            "op: tolerance.out.y.exact=1 (expected true or false)");
}

TEST(CheckTensors, MissingRankAndUnknownTensors) {
  constexpr TensorSpec specs[] = {{"q", 2}, {"lens", 1, false}, {"out.y", 2, false}};
  Bundle b;
  b.add("q", DType::f32, {2, 3});
  EXPECT_EQ(refusal([&] { check_tensors("op", b, specs); }), "(accepted)");
  b.add("lens", DType::u32, {2, 1});
  EXPECT_EQ(refusal([&] { check_tensors("op", b, specs); }), "op: tensor lens has rank 2 (expected rank 1)");
  b.tensors.erase("lens");
  b.add("out.z", DType::f32, {1});
  EXPECT_EQ(refusal([&] { check_tensors("op", b, specs); }),
            "op: tensor \"out.z\" is not one of op's (expected: q, lens, out.y)");
  b.tensors.erase("out.z");
  b.tensors.erase("q");
  EXPECT_EQ(refusal([&] { check_tensors("op", b, specs); }), "op: tensor q is missing (a required input of op)");
}

TEST(CheckedSizes, NegativeOverflowingAndOverTheLimit) {
  EXPECT_EQ(checked_nbytes(DType::f32, {2, 3}, "t"), 24);
  EXPECT_EQ(checked_nbytes(DType::f32, {0, std::int64_t{1} << 62}, "t"), 0);
  EXPECT_EQ(refusal([] { checked_nbytes(DType::bf16, {3, -1}, "op: tensor out.y"); }),
            "op: tensor out.y: shape [3, -1] has a negative dimension");
  const std::string over = refusal([] { checked_nbytes(DType::f32, {std::int64_t{1} << 40, std::int64_t{1} << 40}, "t"); });
  EXPECT_EQ(over.rfind("t: shape [1099511627776, 1099511627776] needs more than ", 0), 0u) << over;
  EXPECT_NE(over.find("MLAKIT_MAX_TENSOR_MB"), std::string::npos);
  EXPECT_NE(refusal([] { checked_nbytes(DType::u8, {max_tensor_bytes() + 1}, "t"); }).find("needs more than"), std::string::npos);
  EXPECT_EQ(refusal([] { Bundle b; b.op = "op"; b.add("out.y", DType::f32, {-2}); }),
            "op: tensor out.y: shape [-2] has a negative dimension");
  EXPECT_THROW(Tensor(DType::f32, {-1}), InputError);
}

TEST(MergeKnobs, OverridesKeepTheDefaultsKinds) {
  const json defaults = {{"n", 3}, {"x", 0.5}, {"s", "a"}, {"lens", {1, 2}}, {"scale", nullptr}, {"on", false}};
  json merged;
  std::string why;
  EXPECT_TRUE(merge_knobs(defaults, json{{"n", 4}, {"x", 1}, {"lens", {3}}, {"scale", 0.1}}, &merged, &why)) << why;
  EXPECT_EQ(merged["n"], 4);
  EXPECT_TRUE(merge_knobs(defaults, json(), &merged, &why));  // null: no overrides
  EXPECT_FALSE(merge_knobs(defaults, json{{"n", "4"}}, &merged, &why));
  EXPECT_EQ(why, "knob n=\"4\" (expected a value like the default, 3)");
  EXPECT_FALSE(merge_knobs(defaults, json{{"n", 4.5}}, &merged, &why));
  EXPECT_FALSE(merge_knobs(defaults, json{{"lens", {1, "a"}}}, &merged, &why));
  EXPECT_FALSE(merge_knobs(defaults, json{{"on", 1}}, &merged, &why));
  EXPECT_FALSE(merge_knobs(defaults, json{{"scale", "auto"}}, &merged, &why));
  EXPECT_FALSE(merge_knobs(defaults, json{{"nope", 1}}, &merged, &why));
  EXPECT_EQ(why, "unknown knob 'nope'");
  EXPECT_FALSE(merge_knobs(defaults, json::array(), &merged, &why));
}

}  // namespace
}  // namespace mlakit::goldens
