// The derived tolerance of op 4 admits what the spec allows an optimized back-end (f32 accumulation,
// exp(s − m) rounded to bf16 before P·V, bf16 output) and rejects coarser arithmetic or a lost slot.
// The "back-end" here is an f32 emulation written for this test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "goldens/common/driver.hpp"
#include "mlakit/dtype.hpp"
#include "support/matrix.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::Tensor;

enum class PRounding { f32, bf16, f8e4m3 };

struct Emulation {
  PRounding p = PRounding::bf16;
  bool drop_last_slot = false;  // a bug: the last valid slot of every row is lost
  bool first_scale_only = false;  // a bug: a row's first scale serves all its columns (single-scale kernels)
};

float round_p(float p, PRounding r) {
  switch (r) {
    case PRounding::f32: return p;
    case PRounding::bf16: return round_to_bf16(p);
    case PRounding::f8e4m3: return f8e4m3_to_f32(f32_to_f8e4m3(p));
  }
  return p;
}

// Sequential f32 arithmetic everywhere: the worst order an optimized kernel may use.
void emulate(Bundle& b, const Emulation& e) {
  const auto& P = b.params;
  const std::int64_t Hq = P.at("num_q_heads").get<std::int64_t>(), qk = P.at("qk_depth").get<std::int64_t>();
  const std::int64_t vd = P.at("v_depth").get<std::int64_t>(), stride = P.at("indices_stride").get<std::int64_t>();
  const std::int64_t layer = P.at("layer_idx").get<std::int64_t>();
  const float scale = P.at("scale").get<float>();
  const Tensor& q = b.at("q");
  const Tensor& blocks = b.at("kv_cache.blocks");
  const Tensor& idx = b.at("indices");
  const std::int64_t T = q.shape()[0], layers = blocks.shape()[2], page = blocks.shape()[3];
  const std::int64_t rows = blocks.shape()[0] * page;
  b.remove_outputs();
  Tensor& out = b.add("out.output", DType::bf16, {T, Hq, vd});
  Tensor& lse = b.add("out.lse", DType::f32, {T, Hq});
  Tensor& max_logits = b.add("out.max_logits", DType::f32, {T, Hq});
  std::vector<float> K, acc(vd);
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int64_t len = b.has("topk_lengths") ? b.at("topk_lengths").data<std::uint32_t>()[t] : stride;
    K.clear();
    std::int64_t n = 0;
    for (std::int64_t p = 0; p < len; ++p) {
      std::int32_t r;
      std::memcpy(&r, idx.bytes() + (t * stride + p) * 4, 4);
      if (r < 0 || r >= rows) continue;
      const std::int64_t row = (r / page * layers + layer) * page + r % page;
      // code · its group's scale (f32 or e8m0), then a split row's bf16 tail (spec 06 §B).
      const std::int64_t wq = blocks.shape()[5];
      for (std::int64_t d = 0; d < qk; ++d) {
        if (d >= wq) {
          K.push_back(static_cast<float>(b.at("kv_cache.tail").value(row * (qk - wq) + d - wq)));
          continue;
        }
        float s = 1.0f;
        if (b.has("kv_cache.scales")) {
          const Tensor& sc = b.at("kv_cache.scales");
          const std::int64_t group = e.first_scale_only ? 0 : d / P.at("quant_granularity").get<std::int64_t>();
          s = static_cast<float>(sc.value(row * sc.shape()[5] + group));
        }
        K.push_back(static_cast<float>(blocks.value(row * wq + d)) * s);
      }
      ++n;
    }
    if (e.drop_last_slot && n > 1) --n;
    for (std::int64_t h = 0; h < Hq; ++h) {
      std::uint16_t* o = out.data<std::uint16_t>() + (t * Hq + h) * vd;
      if (n == 0) {
        for (std::int64_t j = 0; j < vd; ++j) o[j] = 0;
        lse.data<float>()[t * Hq + h] = INFINITY;
        max_logits.data<float>()[t * Hq + h] = -INFINITY;
        continue;
      }
      std::vector<float> s(n), qrow(qk);
      for (std::int64_t d = 0; d < qk; ++d) qrow[d] = static_cast<float>(q.value((t * Hq + h) * qk + d));
      float m = -INFINITY;
      for (std::int64_t i = 0; i < n; ++i) {
        float dot = 0;
        for (std::int64_t d = 0; d < qk; ++d) dot += qrow[d] * K[i * qk + d];
        s[i] = scale * dot;
        if (std::isnan(s[i]) || s[i] > m) m = s[i];
      }
      float l = 0;
      for (float& a : acc) a = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const float p = std::exp(s[i] - m);
        l += p;
        const float pr = round_p(p, e.p);
        for (std::int64_t j = 0; j < vd; ++j) acc[j] += pr * K[i * qk + j];
      }
      const float den = l + (b.has("attn_sink") ? std::exp(b.at("attn_sink").data<float>()[h] - m) : 0.0f);
      for (std::int64_t j = 0; j < vd; ++j) o[j] = f32_to_bf16(acc[j] / den);
      lse.data<float>()[t * Hq + h] = m + std::log(l);
      max_logits.data<float>()[t * Hq + h] = m;
    }
  }
}

const goldens::OpDriver& driver() { return *goldens::find_driver("sparse_mla_prefill"); }

// Runs the reference and the emulation on one case; true when the driver's comparison passes.
bool emulation_passes(const goldens::CaseSpec& spec, std::uint64_t seed, const Emulation& e, std::string* why) {
  Bundle ref = driver().generate(spec.knobs, seed);
  EXPECT_TRUE(driver().run(ref, RunOptions{Backend::reference}).ok());
  Bundle cand = ref;
  emulate(cand, e);
  if (!ref.has("out.lse")) cand.tensors.erase("out.lse");
  if (!ref.has("out.max_logits")) cand.tensors.erase("out.max_logits");
  bool pass = true;
  for (const auto& c : driver().compare(ref, cand)) {
    if (std::getenv("MLAKIT_SHOW_MARGINS"))  // how close each comparison came to its bound
      std::printf("%s seed %llu: %s\n", spec.name.c_str(), static_cast<unsigned long long>(seed),
                  goldens::describe(c).c_str());
    if (!c.pass) {
      pass = false;
      if (why) *why += goldens::describe(c) + "\n";
    }
  }
  return pass;
}

TEST(SparseMlaPrefillTolerance, AdmitsF32ArithmeticWithBf16WeightsOnEveryCase) {
  for (const auto& spec : driver().cases())
    for (std::uint64_t seed : testing::kSeeds) {
      std::string why;
      EXPECT_TRUE(emulation_passes(spec, seed, Emulation{PRounding::bf16, false}, &why))
          << spec.name << " seed " << seed << ":\n" << why;
      why.clear();
      EXPECT_TRUE(emulation_passes(spec, seed, Emulation{PRounding::f32, false}, &why))
          << spec.name << " seed " << seed << " (unrounded weights):\n" << why;
    }
}

TEST(SparseMlaPrefillTolerance, AdmitsTheDeepSeekDefaultCase) {
  std::string why;
  EXPECT_TRUE(emulation_passes(driver().default_case(), 1, Emulation{PRounding::bf16, false}, &why)) << why;
}

TEST(SparseMlaPrefillTolerance, RejectsWeightsRoundedCoarserThanBf16) {
  for (const char* name : {"deepseek_bf16", "general_bf16"}) {
    goldens::CaseSpec spec;
    for (const auto& c : driver().cases())
      if (c.name == name) spec = c;
    for (std::uint64_t seed : testing::kSeeds)
      EXPECT_FALSE(emulation_passes(spec, seed, Emulation{PRounding::f8e4m3, false}, nullptr)) << name << " seed " << seed;
  }
  EXPECT_FALSE(emulation_passes(driver().default_case(), 1, Emulation{PRounding::f8e4m3, false}, nullptr));
}

TEST(SparseMlaPrefillTolerance, RejectsALostSlot) {
  for (const auto& spec : driver().cases()) {
    // Nothing to lose where no row reads a slot; with scale 1 at qk 576 the softmax is one-hot, so
    // the last slot's weight is ~0 there.
    if (spec.name == "t_zero" || spec.name == "large_scale" || spec.name.find("all_") == 0 ||
        spec.name.find("all_zero") != std::string::npos)
      continue;
    EXPECT_FALSE(emulation_passes(spec, 1, Emulation{PRounding::bf16, true}, nullptr)) << spec.name;
  }
}

// A kernel that reads only a row's first scale (as a single-scale kernel would) fails every case
// whose rows have several.
TEST(SparseMlaPrefillTolerance, RejectsOneScalePerRowOnGroupedRows) {
  int cases = 0;
  for (const auto& spec : driver().cases()) {
    if (spec.name != "flashmla_v32" && spec.name != "flashmla_model1" && spec.name != "split_rows_general" &&
        spec.name != "grouped_scales_whole_rows")
      continue;
    ++cases;
    for (std::uint64_t seed : testing::kSeeds) {
      Emulation flawed;
      flawed.first_scale_only = true;
      EXPECT_FALSE(emulation_passes(spec, seed, flawed, nullptr)) << spec.name << " seed " << seed;
    }
  }
  EXPECT_EQ(cases, 4);
}

// max_logits: a value moved by twice its bound, a NaN turned finite and a -inf turned finite each
// fail the comparison; the unchanged copy passes.
TEST(SparseMlaPrefillTolerance, MaxLogitsComparisonCatchesEachKindOfError) {
  goldens::CaseSpec spec;
  for (const auto& c : driver().cases())
    if (c.name == "max_logits") spec = c;
  ASSERT_EQ(spec.name, "max_logits");
  Bundle ref = driver().generate(spec.knobs, 1);
  ASSERT_TRUE(driver().run(ref, RunOptions{Backend::reference}).ok());
  const double atol = driver().tolerance(ref).at("out.max_logits").at("atol").get<double>();
  const auto passes = [&](const Bundle& cand) {
    for (const auto& c : driver().compare(ref, cand))
      if (c.name == "out.max_logits") return c.pass;
    ADD_FAILURE() << "no out.max_logits comparison";
    return false;
  };
  EXPECT_TRUE(passes(ref));
  const Tensor& m = ref.at("out.max_logits");
  std::int64_t finite = -1, minus_inf = -1;
  for (std::int64_t i = 0; i < m.numel(); ++i) {
    const float v = m.data<float>()[i];
    if (std::isfinite(v) && finite < 0) finite = i;
    if (v == -INFINITY && minus_inf < 0) minus_inf = i;
  }
  ASSERT_GE(finite, 0);
  ASSERT_GE(minus_inf, 0) << "the case has rows without a valid slot";
  Bundle moved = ref;
  moved.at("out.max_logits").data<float>()[finite] += static_cast<float>(2 * atol + 1e-6);
  EXPECT_FALSE(passes(moved));
  Bundle filled = ref;
  filled.at("out.max_logits").data<float>()[minus_inf] = 0.0f;
  EXPECT_FALSE(passes(filled));
  Bundle nan = ref;
  nan.at("out.max_logits").data<float>()[finite] = NAN;
  EXPECT_FALSE(passes(nan));
}

}  // namespace
}  // namespace mlakit
