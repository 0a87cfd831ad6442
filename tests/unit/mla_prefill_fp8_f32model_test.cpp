// The comparison's tolerance against a model of an optimized back-end: the whole operator in plain
// f32 arithmetic (RoPE and RMSNorm in f32, f32 GEMM accumulation, f32 softmax), the shared step-4
// quantizer. The faithful model must pass every golden case on several seeds (so the derived bounds
// are not too tight, the re-run of steps 3-7 on the candidate's cache included); each deliberately
// flawed variant must fail somewhere (so they are not too loose).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "goldens/common/driver.hpp"
#include "core/shared/mla_prefill_fp8_quant.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::Tensor;
using std::int64_t;

enum class Flaw {
  none,
  mask_excludes_self,    // a query does not see its own key
  no_amax_cap,           // sa = amax / 448 without the 1200 cap
  rope_reversed,         // rotation by -theta
  weight_scale_row0,     // one weight-scale row for every output column
  epsilon_ignored,       // RMSNorm without epsilon
  gather_before_update,  // attention reads the cache rows as they were before steps 1-2
  kv_scale_group_shift,  // activation group scale of the next group (wrapping)
  topk_ignored,          // topk_indices not applied: every causal key attended
  p_not_rounded,         // deepseek profiles: softmax weights kept in f32 (not rounded to bf16)
  ue8m0_not_pow2,        // deepseek_ue8m0 quantized as deepseek (scale not rounded up to 2^k)
};

const char* flaw_name(Flaw f) {
  switch (f) {
    case Flaw::none: return "none";
    case Flaw::mask_excludes_self: return "mask_excludes_self";
    case Flaw::no_amax_cap: return "no_amax_cap";
    case Flaw::rope_reversed: return "rope_reversed";
    case Flaw::weight_scale_row0: return "weight_scale_row0";
    case Flaw::epsilon_ignored: return "epsilon_ignored";
    case Flaw::gather_before_update: return "gather_before_update";
    case Flaw::kv_scale_group_shift: return "kv_scale_group_shift";
    case Flaw::topk_ignored: return "topk_ignored";
    case Flaw::p_not_rounded: return "p_not_rounded";
    case Flaw::ue8m0_not_pow2: return "ue8m0_not_pow2";
  }
  return "?";
}

float bf(std::uint16_t b) { return bf16_to_f32(b); }

// bump_amax: after steps 1-2, the largest latent value of the first new row's first group grows by
// one bf16 step - within the cache tolerance, and it changes that group's FP8 scale and codes.
void f32_model(Bundle& b, Flaw flaw, bool bump_amax = false) {
  namespace quant = mla_prefill_fp8_quant;
  const auto& p = b.params;
  const int64_t H = p.at("num_heads"), nope = p.at("nope"), rope = p.at("rope"), v = p.at("v"),
                latent = p.at("latent"), bn = p.at("bn"), bk = p.at("bk"), layer = p.at("layer_idx");
  const float scale = static_cast<float>(p.at("scale").get<double>());
  const float eps = flaw == Flaw::epsilon_ignored ? 0.0f : static_cast<float>(p.at("epsilon").get<double>());
  const int64_t qk = nope + rope, hs = latent + rope, N = H * (nope + v), groups = (latent + bk - 1) / bk;
  const std::string numerics = p.value("numerics", std::string("max"));
  const bool deepseek = numerics != "max";
  const bool ue8m0 = numerics == "deepseek_ue8m0" && flaw != Flaw::ue8m0_not_pow2;
  b.remove_outputs();
  Tensor& q = b.copy_to_output("q");
  Tensor& blocks = b.copy_to_output("kv_cache.blocks");
  const Tensor& raw_blocks = b.at("kv_cache.blocks");
  auto u = [&](const char* name, int64_t i) { return static_cast<int64_t>(b.at(name).data<std::uint32_t>()[i]); };
  const Tensor& freqs = b.at("freqs_cis");
  const Tensor& lut = b.at("kv_cache.lookup_table");
  const int64_t layers = blocks.shape()[2], ps = blocks.shape()[3], cols = lut.shape()[1];
  const int64_t B = b.at("input_row_offsets").numel() - 1, T = q.shape()[0];
  auto row_index = [&](int64_t s, int64_t pos) {
    return ((u("kv_cache.lookup_table", s * cols + pos / ps) * layers + layer) * ps + pos % ps) * hs;
  };
  auto freq = [&](int64_t pos, int64_t c) { return static_cast<float>(freqs.value(pos * rope + c)); };
  auto rotate = [&](std::uint16_t* x, int64_t pos) {
    for (int64_t i = 0; i < rope / 2; ++i) {
      const float c = freq(pos, 2 * i), s = (flaw == Flaw::rope_reversed ? -1.0f : 1.0f) * freq(pos, 2 * i + 1);
      const float x0 = bf(x[2 * i]), x1 = bf(x[2 * i + 1]);
      x[2 * i] = f32_to_bf16(x0 * c - x1 * s);
      x[2 * i + 1] = f32_to_bf16(x0 * s + x1 * c);
    }
  };
  for (int64_t s = 0; s < B; ++s)
    for (int64_t t = u("input_row_offsets", s); t < u("input_row_offsets", s + 1); ++t) {
      const int64_t pos = u("kv_cache.cache_lengths", s) + t - u("input_row_offsets", s);
      for (int64_t h = 0; h < H; ++h) rotate(q.data<std::uint16_t>() + (t * H + h) * qk + nope, pos);
      std::uint16_t* r = blocks.data<std::uint16_t>() + row_index(s, pos);
      rotate(r + latent, pos);
      float ss = 0;
      for (int64_t k = 0; k < latent; ++k) ss += bf(r[k]) * bf(r[k]);
      const float inv_rms = 1.0f / std::sqrt(ss / static_cast<float>(latent) + eps);
      for (int64_t k = 0; k < latent; ++k) {
        const float g = static_cast<float>(b.at("kv_norm_gamma").value(k));
        r[k] = deepseek ? f32_to_bf16(g * (bf(r[k]) * inv_rms)) : f32_to_bf16(round_to_bf16(bf(r[k]) * inv_rms) * g);
      }
    }

  for (int64_t s = 0; bump_amax && s < B; ++s) {
    if (u("input_row_offsets", s + 1) == u("input_row_offsets", s)) continue;
    std::uint16_t* r = blocks.data<std::uint16_t>() + row_index(s, u("kv_cache.cache_lengths", s));
    int64_t top = 0;
    for (int64_t k = 1; k < std::min(bk, latent); ++k)
      if (std::fabs(bf(r[k])) > std::fabs(bf(r[top]))) top = k;
    r[top] = static_cast<std::uint16_t>(r[top] + 1);
    break;
  }

  const Tensor& w = b.at("kv_b_proj");
  const Tensor& ws = b.at("kv_b_proj_scale");
  Tensor& out = b.add("out.output", DType::bf16, {T, H, v});
  const Tensor& source = flaw == Flaw::gather_before_update ? raw_blocks : blocks;
  for (int64_t s = 0; s < B; ++s) {
    const int64_t first = u("input_row_offsets", s), sl = u("input_row_offsets", s + 1) - first;
    const int64_t nb = u("buffer_row_offsets", s + 1) - u("buffer_row_offsets", s), off = u("cache_offsets", s);
    const int64_t cl = u("kv_cache.cache_lengths", s);
    const int64_t rows = sl == 0 ? 0 : std::max<int64_t>(0, std::min(nb, cl + sl - off));
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * latent));
    std::vector<float> sa(static_cast<std::size_t>(rows * groups));
    std::vector<float> x(static_cast<std::size_t>(latent));
    for (int64_t j = 0; j < rows; ++j) {
      const std::uint16_t* r = source.data<std::uint16_t>() + row_index(s, off + j);
      for (int64_t k = 0; k < latent; ++k) x[k] = bf(r[k]);
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t k0 = g * bk, n = std::min(bk, latent - k0);
        if (flaw == Flaw::no_amax_cap) {
          const float s_nocap = quant::group_amax(x.data() + k0, n) / 448.0f;
          const float inv = quant::group_inverse(s_nocap);
          for (int64_t k = k0; k < k0 + n; ++k) codes[j * latent + k] = quant::quantize_value(x[k], inv);
          sa[j * groups + g] = s_nocap;
        } else if (deepseek) {
          sa[j * groups + g] = quant::quantize_group_deepseek(x.data() + k0, n, ue8m0, codes.data() + j * latent + k0);
        } else {
          sa[j * groups + g] = quant::quantize_group(x.data() + k0, n, codes.data() + j * latent + k0);
        }
      }
    }
    // KV for the visible rows, f32 accumulation per group then across groups.
    std::vector<float> kv(static_cast<std::size_t>(rows * N));
    for (int64_t j = 0; j < rows; ++j)
      for (int64_t n = 0; n < N; ++n) {
        float acc = 0;
        for (int64_t g = 0; g < groups; ++g) {
          float dot = 0;
          for (int64_t k = g * bk; k < std::min(latent, (g + 1) * bk); ++k)
            dot += f8e4m3_to_f32(codes[j * latent + k]) * f8e4m3_to_f32(w.data<std::uint8_t>()[n * latent + k]);
          const int64_t ws_row = flaw == Flaw::weight_scale_row0 ? 0 : n / bn;
          const int64_t sa_g = flaw == Flaw::kv_scale_group_shift ? (g + 1) % groups : g;
          acc += sa[j * groups + sa_g] * ws.data<float>()[ws_row * groups + g] * dot;
        }
        kv[j * N + n] = round_to_bf16(acc);
      }
    const Tensor* topk = b.has("topk_indices") && flaw != Flaw::topk_ignored ? &b.at("topk_indices") : nullptr;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < sl; ++i) {
        const int64_t pos = cl + i;
        int64_t causal = pos < off ? 0 : std::min(rows, pos - off + 1);
        if (flaw == Flaw::mask_excludes_self && causal > 0 && off + causal - 1 == pos) --causal;
        std::vector<int64_t> keys;
        for (int64_t j = 0; j < causal; ++j) {
          bool chosen = topk == nullptr;
          for (int64_t e = 0; topk && e < topk->shape()[1]; ++e)
            chosen = chosen || topk->data<std::int32_t>()[(first + i) * topk->shape()[1] + e] == off + j;
          if (chosen) keys.push_back(j);
        }
        std::uint16_t* o = out.data<std::uint16_t>() + ((first + i) * H + h) * v;
        if (keys.empty()) {
          for (int64_t e = 0; e < v; ++e) o[e] = 0;
          continue;
        }
        const std::uint16_t* qr = q.data<std::uint16_t>() + ((first + i) * H + h) * qk;
        std::vector<float> sc(keys.size());
        float mx = -INFINITY;
        for (std::size_t n = 0; n < keys.size(); ++n) {
          const int64_t j = keys[n];
          const std::uint16_t* kr = source.data<std::uint16_t>() + row_index(s, off + j) + latent;
          float dot = 0;
          for (int64_t e = 0; e < nope; ++e) dot += bf(qr[e]) * kv[j * N + h * (nope + v) + e];
          for (int64_t e = 0; e < rope; ++e) dot += bf(qr[nope + e]) * bf(kr[e]);
          sc[n] = scale * dot;
          if (sc[n] > mx) mx = sc[n];
        }
        float sum = 0;
        for (auto& e : sc) sum += (e = std::exp(e - mx));
        const bool round_p = deepseek && flaw != Flaw::p_not_rounded;
        if (deepseek)  // weights normalized in f32 first, then (the profile) rounded to bf16
          for (auto& e : sc) e = round_p ? round_to_bf16(e / sum) : e / sum;
        for (int64_t e = 0; e < v; ++e) {
          float acc = 0;
          for (std::size_t n = 0; n < keys.size(); ++n) acc += sc[n] * kv[keys[n] * N + h * (nope + v) + nope + e];
          o[e] = f32_to_bf16(deepseek ? acc : acc / sum);
        }
      }
  }
}

bool passes(const std::vector<goldens::Comparison>& cmp, std::string* why) {
  bool pass = !cmp.empty();
  for (const auto& c : cmp)
    if (!c.pass) {
      pass = false;
      if (why->empty()) *why = describe(c);
    }
  return pass;
}

const goldens::OpDriver& driver() { return *goldens::find_driver("mla_prefill_fp8"); }

TEST(MlaPrefillFp8F32Model, FaithfulModelPassesEveryCase) {
  int rebased = 0, total = 0;
  for (const auto& spec : driver().cases()) {
    for (std::uint64_t seed = 1; seed <= 5; ++seed) {
      Bundle expected = driver().generate(spec.knobs, seed);
      ASSERT_TRUE(driver().run(expected, RunOptions{Backend::reference}).ok());
      Bundle candidate = driver().generate(spec.knobs, seed);
      f32_model(candidate, Flaw::none);
      std::string why;
      EXPECT_TRUE(passes(driver().compare(expected, candidate), &why)) << spec.name << " seed " << seed << ": " << why;
      rebased += !candidate.at("out.kv_cache.blocks").same_bytes(expected.at("out.kv_cache.blocks")) ||
                 !candidate.at("out.q").same_bytes(expected.at("out.q"));
      ++total;
    }
  }
  std::printf("[ f32 model ] steps 1-2 differ from the reference in %d of %d calls\n", rebased, total);
}

// The DeepSeek-shaped default case: more rows, latent 512.
TEST(MlaPrefillFp8F32Model, FaithfulModelPassesTheDefaultCase) {
  const auto spec = driver().default_case();
  for (std::uint64_t seed = 1; seed <= 2; ++seed) {
    Bundle expected = driver().generate(spec.knobs, seed);
    ASSERT_TRUE(driver().run(expected, RunOptions{Backend::reference}).ok());
    Bundle candidate = driver().generate(spec.knobs, seed);
    f32_model(candidate, Flaw::none);
    std::string why;
    EXPECT_TRUE(passes(driver().compare(expected, candidate), &why)) << "seed " << seed << ": " << why;
  }
}

// A candidate whose normalized cache differs by one bf16 step in a group maximum: its FP8 codes
// differ from the reference's, so its output is compared with steps 3-7 re-run on its own cache.
// Against the reference's own output it would be off by far more than rounding.
TEST(MlaPrefillFp8F32Model, OneStepInTheCacheIsJudgedOnTheCandidatesOwnCache) {
  int far_off = 0;
  for (const char* name : {"single_chunk", "chunked", "deepseek_dims", "ragged_empty"}) {
    goldens::CaseSpec spec;
    for (const auto& c : driver().cases())
      if (c.name == name) spec = c;
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      Bundle expected = driver().generate(spec.knobs, seed);
      ASSERT_TRUE(driver().run(expected, RunOptions{Backend::reference}).ok());
      Bundle candidate = driver().generate(spec.knobs, seed);
      f32_model(candidate, Flaw::none, /*bump_amax=*/true);
      ASSERT_FALSE(candidate.at("out.kv_cache.blocks").same_bytes(expected.at("out.kv_cache.blocks")));
      std::string why;
      EXPECT_TRUE(passes(driver().compare(expected, candidate), &why)) << name << " seed " << seed << ": " << why;
      const Tensor& e = expected.at("out.output");
      const Tensor& a = candidate.at("out.output");
      for (int64_t i = 0; i < e.numel(); ++i) {
        const double ev = e.value(i), av = a.value(i);
        if (std::isfinite(ev) && std::isfinite(av) && std::fabs(ev - av) > 4 * std::ldexp(std::fabs(ev), -7) + 1e-30) {
          ++far_off;
          break;
        }
      }
    }
  }
  EXPECT_GT(far_off, 0) << "the bumped scale never moved the output past 4 bf16 steps";
}

class MlaPrefillFp8FlawedModel : public ::testing::TestWithParam<Flaw> {};

TEST_P(MlaPrefillFp8FlawedModel, IsCaught) {
  int caught = 0, tried = 0;
  std::string first;
  for (const auto& spec : driver().cases()) {
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      Bundle expected = driver().generate(spec.knobs, seed);
      ASSERT_TRUE(driver().run(expected, RunOptions{Backend::reference}).ok());
      Bundle candidate = driver().generate(spec.knobs, seed);
      f32_model(candidate, GetParam());
      std::string why;
      ++tried;
      if (!passes(driver().compare(expected, candidate), &why)) {
        if (first.empty()) first = spec.name + ": " + why;
        ++caught;
      }
    }
  }
  EXPECT_GT(caught, 0) << flaw_name(GetParam()) << " passed all " << tried << " comparisons";
  std::printf("[ flaw %-22s ] caught in %d of %d comparisons; first: %s\n", flaw_name(GetParam()), caught, tried,
              first.substr(0, 160).c_str());
}

INSTANTIATE_TEST_SUITE_P(Flaws, MlaPrefillFp8FlawedModel,
                         ::testing::Values(Flaw::mask_excludes_self, Flaw::no_amax_cap, Flaw::rope_reversed,
                                           Flaw::weight_scale_row0, Flaw::epsilon_ignored, Flaw::gather_before_update,
                                           Flaw::kv_scale_group_shift, Flaw::topk_ignored, Flaw::p_not_rounded,
                                           Flaw::ue8m0_not_pow2),
                         [](const ::testing::TestParamInfo<Flaw>& info) { return std::string(flaw_name(info.param)); });

}  // namespace
}  // namespace mlakit
