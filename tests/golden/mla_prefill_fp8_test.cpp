// mla_prefill_fp8: the golden matrix (every back-end against the reference), the reference against
// the oracle, and targeted checks of the reference on hand-built data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "goldens/common/driver.hpp"
#include "goldens/common/random.hpp"
#include "mlakit/ops/mla_prefill_fp8.hpp"
#include "oracle/mla_prefill_fp8.hpp"
#include "support/matrix.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::CaseSpec;
using goldens::json;
using goldens::Tensor;
using std::int64_t;

MLAKIT_GOLDEN_MATRIX(mla_prefill_fp8);

const goldens::OpDriver& driver() {
  const auto* d = goldens::find_driver("mla_prefill_fp8");
  if (d == nullptr) throw std::runtime_error("mla_prefill_fp8 driver not registered");
  return *d;
}

const CaseSpec& case_named(const std::string& name) {
  static const std::vector<CaseSpec> all = driver().cases();
  for (const auto& c : all)
    if (c.name == name) return c;
  throw std::runtime_error("no case " + name);
}

Bundle run_reference(const json& knobs, std::uint64_t seed) {
  Bundle b = driver().generate(knobs, seed);
  const Status s = driver().run(b, RunOptions{Backend::reference});
  EXPECT_TRUE(s.ok()) << s.message;
  return b;
}

std::uint16_t bits(const Tensor& t, int64_t i) { return t.data<std::uint16_t>()[i]; }
std::uint32_t u32(const Tensor& t, int64_t i) { return t.data<std::uint32_t>()[i]; }

// ---- reference vs oracle --------------------------------------------------------------------

struct OracleParam {
  CaseSpec spec;
  std::uint64_t seed;
};

std::vector<OracleParam> oracle_params() {
  std::vector<OracleParam> v;
  for (const auto& c : driver().cases())
    for (std::uint64_t s : testing::kSeeds) v.push_back({c, s});
  return v;
}

void PrintTo(const OracleParam& p, std::ostream* os) { *os << p.spec.name << " seed " << p.seed; }

class MlaPrefillFp8Oracle : public ::testing::TestWithParam<OracleParam> {};

TEST_P(MlaPrefillFp8Oracle, ReferenceMatchesOracle) {
  const auto& p = GetParam();
  testing::run_reference_against_oracle(driver(), p.spec, p.seed, oracle::mla_prefill_fp8);

  // Both formulations work in f64 and round once, so they agree bit for bit: steps 1-2 exactly,
  // and the output too (a difference needs an f64 result within ~2^-45 of a bf16 rounding tie).
  const Bundle ref = run_reference(p.spec.knobs, p.seed);
  Bundle alt = driver().generate(p.spec.knobs, p.seed);
  oracle::mla_prefill_fp8(alt);
  EXPECT_TRUE(ref.at("out.q").same_bytes(alt.at("out.q")));
  EXPECT_TRUE(ref.at("out.kv_cache.blocks").same_bytes(alt.at("out.kv_cache.blocks")));
  const Tensor& a = ref.at("out.output");
  const Tensor& b = alt.at("out.output");
  int64_t differ = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const bool both_nan = std::isnan(a.value(i)) && std::isnan(b.value(i));
    if (!both_nan && bits(a, i) != bits(b, i)) ++differ;
  }
  // With scale 0 every weight is 1/n: the exact output Σ V / n can sit on a bf16 tie (Σ V / 3 with
  // Σ V a multiple of 3), where the two f64 orders round to different sides. The tolerance check
  // above still holds those cases.
  if (ref.params["scale"].get<double>() != 0.0) {
    EXPECT_EQ(differ, 0) << "of " << a.numel() << " output elements";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, MlaPrefillFp8Oracle, ::testing::ValuesIn(oracle_params()),
                         [](const ::testing::TestParamInfo<OracleParam>& info) {
                           return info.param.spec.name + "_seed" + std::to_string(info.param.seed);
                         });

TEST(MlaPrefillFp8Oracle, OwnPiecesAgreeWithTheLibraryConversions) {
  for (int c = 0; c < 256; ++c) {
    const double want = oracle::fp8_code_value(c);
    const float got = f8e4m3_to_f32(static_cast<std::uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << c;
    }
  }
  // f64 -> bf16: the oracle's neighbour comparison against a double rounding through f32 that is
  // safe for values with at most 24 significant bits.
  goldens::Rng rng(5);
  for (int i = 0; i < 100000; ++i) {
    const float f = static_cast<float>(rng.normal() * std::ldexp(1.0, static_cast<int>(rng.integer(-140, 130))));
    EXPECT_EQ(oracle::round_to_bf16_bits(f), f32_to_bf16(f)) << f;
  }
}

// ---- hand-built call with exact expected values --------------------------------------------
//
// H=1, nope=2, rope=2, v=2, latent=4, bn=bk=4; one sequence, no prefix, 2 new tokens, page 4.
// Raw latent rows ±1 normalize to y = ±1 (r = 1/sqrt(1 + 2^-20) rounds to 1 in bf16), so the cache
// receives ±gamma = ±{1.75, 0.875, 0.875, 0.875}; amax 1.75 gives sa = 2^-8 and codes ±448, ±224
// exactly. kv_b_proj's K rows are zero, so only the rope parts score; they are built to score 0.
Bundle hand_built() {
  Bundle b;
  b.op = "mla_prefill_fp8";
  b.params = json{{"num_heads", 1}, {"nope", 2},      {"rope", 2},          {"v", 2},
                  {"latent", 4},    {"bn", 4},        {"bk", 4},            {"scale", 0.5},
                  {"epsilon", 0x1p-20}, {"buffer_length", 4}, {"layer_idx", 0}, {"page_size", 4}};
  auto bf = [](Tensor& t, std::initializer_list<float> v) {
    int64_t i = 0;
    for (float x : v) t.data<std::uint16_t>()[i++] = f32_to_bf16(x);
  };
  Tensor& q = b.add("q", DType::bf16, {2, 1, 4});
  bf(q, {7, -1, 3, 5, /*token 1*/ 7, -1, 1, 0});
  Tensor& iro = b.add("input_row_offsets", DType::u32, {2});
  iro.data<std::uint32_t>()[1] = 2;
  Tensor& freqs = b.add("freqs_cis", DType::bf16, {2, 2});
  bf(freqs, {1, 0, /*pos 1: a quarter turn*/ 0, 1});
  bf(b.add("kv_norm_gamma", DType::bf16, {4}), {1.75f, 0.875f, 0.875f, 0.875f});
  // Blocks: [2 blocks, kv 1, layer 1, page 4, head 1, 6]; the sequence uses block 1.
  Tensor& blocks = b.add("kv_cache.blocks", DType::bf16, {2, 1, 1, 4, 1, 6});
  for (int64_t i = 0; i < blocks.numel(); ++i) blocks.data<std::uint16_t>()[i] = f32_to_bf16(9.0f);  // untouched marker
  std::uint16_t* rows = blocks.data<std::uint16_t>() + 4 * 6;
  const float raw[2][6] = {{1, 1, 1, 1, 0, 0}, {-1, 1, -1, 1, 0, 1}};
  for (int r = 0; r < 2; ++r)
    for (int e = 0; e < 6; ++e) rows[r * 6 + e] = f32_to_bf16(raw[r][e]);
  Tensor& lut = b.add("kv_cache.lookup_table", DType::u32, {1, 2});
  lut.data<std::uint32_t>()[0] = 1;
  lut.data<std::uint32_t>()[1] = 2;  // sentinel
  b.add("kv_cache.cache_lengths", DType::u32, {1});
  Tensor& bro = b.add("buffer_row_offsets", DType::u32, {2});
  bro.data<std::uint32_t>()[1] = 4;
  b.add("cache_offsets", DType::u32, {1});
  Tensor& w = b.add("kv_b_proj", DType::f8e4m3, {4, 4});
  const std::uint8_t one = 0x38;  // 1.0
  const std::uint8_t codes[16] = {0, 0, 0, 0, /*K*/ 0, 0, 0, 0, /*V0*/ one, 0, 0, 0, /*V1*/ 0, one, one, 0};
  std::memcpy(w.data<std::uint8_t>(), codes, 16);
  b.add("kv_b_proj_scale", DType::f32, {1, 1}).data<float>()[0] = 0.25f;
  return b;
}

TEST(MlaPrefillFp8Reference, HandBuiltCallGivesExactValues) {
  Bundle b = hand_built();
  const Status s = driver().run(b, RunOptions{Backend::reference});
  ASSERT_TRUE(s.ok()) << s.message;
  auto val = [](const Tensor& t, int64_t i) { return t.value(i); };
  // q: nope untouched; rope (3, 5) at pos 0 unchanged, (1, 0) at pos 1 turned to (0, 1).
  const Tensor& q = b.at("out.q");
  const double q_want[8] = {7, -1, 3, 5, 7, -1, 0, 1};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(val(q, i), q_want[i]) << "q[" << i << "]";
  // Cache rows of block 1: normalized latent = ±gamma; rope (0,0) and (0,1) -> (0,0), (-1,0).
  const Tensor& blocks = b.at("out.kv_cache.blocks");
  const double row_want[2][6] = {{1.75, 0.875, 0.875, 0.875, 0, 0}, {-1.75, 0.875, -0.875, 0.875, -1, 0}};
  for (int r = 0; r < 2; ++r)
    for (int e = 0; e < 6; ++e) EXPECT_EQ(val(blocks, 24 + r * 6 + e), row_want[r][e]) << "row " << r << " elem " << e;
  for (int64_t i = 0; i < blocks.numel(); ++i)
    if (i < 24 || i >= 36) {
      EXPECT_EQ(val(blocks, i), 9.0) << "untouched element " << i;
    }
  // V = 2^-8 · 0.25 · (codes · W): token 0 -> (0.4375, 0.4375), token 1 -> (-0.4375, 0).
  // Token 0 sees itself; token 1 sees both keys with equal scores: the mean.
  const Tensor& out = b.at("out.output");
  EXPECT_EQ(val(out, 0), 0.4375);
  EXPECT_EQ(val(out, 1), 0.4375);
  EXPECT_EQ(val(out, 2), 0.0);
  EXPECT_EQ(val(out, 3), 0.21875);
}

TEST(MlaPrefillFp8Reference, HandBuiltCallMatchesOracle) {
  Bundle ref = hand_built();
  ASSERT_TRUE(driver().run(ref, RunOptions{Backend::reference}).ok());
  Bundle alt = hand_built();
  oracle::mla_prefill_fp8(alt);
  for (const auto& name : ref.output_names()) EXPECT_TRUE(ref.at(name).same_bytes(alt.at(name))) << name;
}

// ---- behaviour on generated data ---------------------------------------------------------------

// Which (token, head) rows have no visible key: position < cache_offsets[b] or an empty window.
std::vector<bool> rows_without_keys(const Bundle& b) {
  const Tensor& iro = b.at("input_row_offsets");
  const Tensor& bro = b.at("buffer_row_offsets");
  const Tensor& co = b.at("cache_offsets");
  const Tensor& lens = b.at("kv_cache.cache_lengths");
  std::vector<bool> none;
  for (int64_t s = 0; s + 1 < iro.numel(); ++s)
    for (int64_t i = 0; i < static_cast<int64_t>(u32(iro, s + 1) - u32(iro, s)); ++i)
      none.push_back(static_cast<int64_t>(u32(lens, s)) + i < static_cast<int64_t>(u32(co, s)) ||
                     u32(bro, s + 1) == u32(bro, s));
  return none;
}

TEST(MlaPrefillFp8Reference, QueriesWithoutVisibleKeysGiveZeroRows) {
  for (std::uint64_t seed : testing::kSeeds) {
    const Bundle b = run_reference(case_named("late_window").knobs, seed);
    const Tensor& out = b.at("out.output");
    const int64_t H = b.params["num_heads"], v = b.params["v"];
    const auto none = rows_without_keys(b);
    int64_t zero_rows = 0, other_rows = 0;
    for (std::size_t t = 0; t < none.size(); ++t)
      for (int64_t h = 0; h < H; ++h) {
        bool all_zero = true;
        for (int64_t e = 0; e < v; ++e) all_zero &= bits(out, (static_cast<int64_t>(t) * H + h) * v + e) == 0;
        if (none[t]) {
          EXPECT_TRUE(all_zero) << "token " << t << " head " << h;
          ++zero_rows;
        } else {
          EXPECT_FALSE(all_zero) << "token " << t << " head " << h;
          ++other_rows;
        }
      }
    EXPECT_GT(zero_rows, 0);
    EXPECT_GT(other_rows, 0);
  }
}

// The deepseek profiles' RMSNorm rounds once: every new latent element of the reference is
// bf16(gamma · (x · r)) (r from f64 sums, rounded by neighbour comparison here), and on these
// inputs some element differs from the max profile's two roundings; the cpu back-end gives the
// same bits as the reference at its level (it shares the f64 arithmetic).
TEST(MlaPrefillFp8Reference, DeepseekNormRoundsOnceAndCpuAgreesBitForBit) {
  for (const char* name : {"numerics_deepseek", "numerics_ue8m0_f32_gamma"}) {
    const Bundle in = goldens::find_driver("mla_prefill_fp8")->generate(case_named(name).knobs, 3);
    const Bundle ref = run_reference(case_named(name).knobs, 3);
    const Tensor& raw = in.at("kv_cache.blocks");
    const Tensor& got = ref.at("out.kv_cache.blocks");
    const Tensor& gamma = in.at("kv_norm_gamma");
    const int64_t latent = ref.params["latent"], hs = latent + int64_t{ref.params["rope"]};
    int64_t rows = 0, two_differs = 0;
    for (int64_t r = 0; r < raw.numel() / hs; ++r) {
      if (std::memcmp(raw.bytes() + r * hs * 2, got.bytes() + r * hs * 2, static_cast<std::size_t>(latent * 2)) == 0) continue;
      ++rows;  // a new token's row: normalized
      double ss = 0;
      for (int64_t k = 0; k < latent; ++k) ss += raw.value(r * hs + k) * raw.value(r * hs + k);
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(latent) + double{ref.params["epsilon"]});
      for (int64_t k = 0; k < latent; ++k) {
        const double x = raw.value(r * hs + k), g = gamma.value(k);
        const std::uint16_t once = oracle::round_to_bf16_bits(g * (x * inv));
        const double y = bf16_to_f32(oracle::round_to_bf16_bits(x * inv));
        ASSERT_EQ(bits(got, r * hs + k), once) << name << " row " << r << " element " << k;
        two_differs += oracle::round_to_bf16_bits(y * g) != once;
      }
    }
    EXPECT_GT(rows, 0) << name;
    EXPECT_GT(two_differs, 0) << name << ": the inputs never tell one rounding from two";
    for (Isa level : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx}) {
      if (static_cast<int>(level) > static_cast<int>(cpu_supported_isa())) continue;
      testing::IsaCap cap(level);
      Bundle cpu = in;
      ASSERT_TRUE(goldens::find_driver("mla_prefill_fp8")->run(cpu, RunOptions{Backend::cpu}).ok());
      EXPECT_TRUE(cpu.at("out.kv_cache.blocks").same_bytes(got)) << name << " at " << isa_name(level);
      EXPECT_TRUE(cpu.at("out.q").same_bytes(ref.at("out.q"))) << name << " at " << isa_name(level);
    }
  }
}

// NaN codes in kv_b_proj propagate to exactly the outputs they feed.
TEST(MlaPrefillFp8Reference, NanWeightCodesPropagateOnlyWhereTheyFeed) {
  for (const char* mode : {"v_last_head", "k_last_head"}) {
    for (std::uint64_t seed : testing::kSeeds) {
      const Bundle b = run_reference(json{{"nan_codes", mode}}, seed);
      const Tensor& out = b.at("out.output");
      const Tensor& w = b.at("kv_b_proj");
      const int64_t H = b.params["num_heads"], v = b.params["v"], nope = b.params["nope"], latent = b.params["latent"];
      std::set<int64_t> nan_v_cols;  // (head, d) fed by a NaN V weight row
      std::set<int64_t> nan_heads;   // heads with a NaN K weight row
      for (int64_t n = 0; n < w.numel() / latent; ++n)
        for (int64_t k = 0; k < latent; ++k)
          if ((w.data<std::uint8_t>()[n * latent + k] & 0x7F) == 0x7F) {
            const int64_t h = n / (nope + v), d = n % (nope + v);
            if (d < nope) nan_heads.insert(h);
            else nan_v_cols.insert(h * v + d - nope);
          }
      EXPECT_EQ(nan_heads.size() + nan_v_cols.size() > 0, true);
      const auto none = rows_without_keys(b);
      for (std::size_t t = 0; t < none.size(); ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t e = 0; e < v; ++e) {
            const bool want_nan = !none[t] && (nan_heads.count(h) || nan_v_cols.count(h * v + e));
            EXPECT_EQ(std::isnan(out.value((static_cast<int64_t>(t) * H + h) * v + e)), want_nan)
                << mode << " seed " << seed << " token " << t << " head " << h << " d " << e;
          }
    }
  }
}

TEST(MlaPrefillFp8Reference, GarbageInPaddingRowsNeverReachesTheOutput) {
  for (std::uint64_t seed : testing::kSeeds) {
    json knobs = case_named("padding_garbage").knobs;
    const Bundle dirty = run_reference(knobs, seed);
    knobs["padding_garbage"] = false;
    const Bundle clean = run_reference(knobs, seed);
    EXPECT_FALSE(dirty.at("kv_cache.blocks").same_bytes(clean.at("kv_cache.blocks")));  // the garbage is there
    EXPECT_TRUE(dirty.at("out.output").same_bytes(clean.at("out.output")));
    EXPECT_TRUE(dirty.at("out.q").same_bytes(clean.at("out.q")));
  }
}

// Only the new tokens' rows of layer_idx and q's rope part change; everything else keeps its bits.
TEST(MlaPrefillFp8Reference, WritesOnlyTheNewRowsAndTheRopePartOfQ) {
  for (const char* name : {"multi_layer", "ragged_empty", "page_size_5", "no_new_tokens"}) {
    const Bundle b = run_reference(case_named(name).knobs, 2);
    const int64_t H = b.params["num_heads"], nope = b.params["nope"], rope = b.params["rope"];
    const int64_t latent = b.params["latent"], layer = b.params["layer_idx"], ps = b.params["page_size"];
    const Tensor& q0 = b.at("q");
    const Tensor& q1 = b.at("out.q");
    int64_t q_changed = 0;
    for (int64_t i = 0; i < q0.numel(); ++i) {
      const bool rope_part = (i % (nope + rope)) >= nope;
      if (!rope_part) {
        EXPECT_EQ(bits(q0, i), bits(q1, i)) << name << " q[" << i << "]";
      }
      q_changed += bits(q0, i) != bits(q1, i);
    }
    EXPECT_EQ(q_changed > 0, q0.numel() > 0) << name;
    const Tensor& c0 = b.at("kv_cache.blocks");
    const Tensor& c1 = b.at("out.kv_cache.blocks");
    const Tensor& iro = b.at("input_row_offsets");
    const Tensor& lut = b.at("kv_cache.lookup_table");
    const Tensor& lens = b.at("kv_cache.cache_lengths");
    const int64_t layers = c0.shape()[2], hs = latent + rope, cols = lut.shape()[1];
    std::vector<bool> written(static_cast<std::size_t>(c0.numel()), false);
    for (int64_t s = 0; s + 1 < iro.numel(); ++s)
      for (int64_t pos = u32(lens, s); pos < static_cast<int64_t>(u32(lens, s) + u32(iro, s + 1) - u32(iro, s)); ++pos) {
        const int64_t row = ((static_cast<int64_t>(u32(lut, s * cols + pos / ps)) * layers + layer) * ps + pos % ps) * hs;
        for (int64_t e = 0; e < hs; ++e) written[static_cast<std::size_t>(row + e)] = true;
      }
    (void)H;
    for (int64_t i = 0; i < c0.numel(); ++i)
      if (!written[static_cast<std::size_t>(i)]) {
        ASSERT_EQ(bits(c0, i), bits(c1, i)) << name << " cache element " << i;
      }
  }
}

// ---- the comparison itself: what it accepts and what it rejects ---------------------------------

TEST(MlaPrefillFp8Compare, AcceptsTheReferenceAndRejectsSmallCorruptions) {
  const Bundle expected = run_reference(case_named("chunked").knobs, 1);
  auto all_pass = [](const std::vector<goldens::Comparison>& cmp) {
    bool pass = !cmp.empty();
    for (const auto& c : cmp) pass &= c.pass;
    return pass;
  };
  EXPECT_TRUE(all_pass(driver().compare(expected, expected)));

  // An element nobody should write (in a spare block no sequence owns), one bf16 step off.
  {
    Bundle bad = expected;
    const Tensor& lut = expected.at("kv_cache.lookup_table");
    Tensor& blocks = bad.at("out.kv_cache.blocks");
    std::set<std::uint32_t> used;
    for (int64_t i = 0; i < lut.numel(); ++i) used.insert(u32(lut, i));
    std::int64_t spare = 0;
    while (used.count(static_cast<std::uint32_t>(spare))) ++spare;
    ASSERT_LT(spare, blocks.shape()[0]);
    blocks.data<std::uint16_t>()[spare * (blocks.numel() / blocks.shape()[0]) + 3] ^= 1;
    EXPECT_FALSE(all_pass(driver().compare(expected, bad)));
  }
  {
    Bundle bad = expected;
    bad.at("out.q").data<std::uint16_t>()[0] ^= 1;  // q[0, 0, 0] is in the nope part
    EXPECT_FALSE(all_pass(driver().compare(expected, bad)));
  }
  // A rotated q element 4 steps off (1 step + the cancellation term is allowed).
  {
    Bundle bad = expected;
    const int64_t nope = expected.params["nope"];
    bad.at("out.q").data<std::uint16_t>()[nope] += 4;
    EXPECT_FALSE(all_pass(driver().compare(expected, bad)));
  }
  // Output elements a few bf16 steps off, and a NaN where the reference is finite.
  {
    Bundle bad = expected;
    Tensor& o = bad.at("out.output");
    for (int64_t i = 0; i < o.numel(); i += 7) o.data<std::uint16_t>()[i] += 3;
    EXPECT_FALSE(all_pass(driver().compare(expected, bad)));
  }
  {
    Bundle bad = expected;
    bad.at("out.output").data<std::uint16_t>()[5] = 0x7FC0;
    EXPECT_FALSE(all_pass(driver().compare(expected, bad)));
  }
  // One output row swapped with another head's row: caught.
  {
    Bundle bad = expected;
    Tensor& o = bad.at("out.output");
    const int64_t v = expected.params["v"];
    for (int64_t e = 0; e < v; ++e) std::swap(o.data<std::uint16_t>()[e], o.data<std::uint16_t>()[v + e]);
    EXPECT_FALSE(all_pass(driver().compare(expected, bad)));
  }
}

TEST(MlaPrefillFp8Driver, DefaultCaseRunsAndParamsUseGoldenNames) {
  const CaseSpec spec = driver().default_case();
  const Bundle b = run_reference(spec.knobs, 1);
  const std::set<std::string> want = {"num_heads", "nope", "rope", "v", "latent", "bn", "bk", "scale",
                                      "epsilon", "buffer_length", "layer_idx", "page_size"};
  std::set<std::string> got;
  for (auto it = b.params.begin(); it != b.params.end(); ++it) got.insert(it.key());
  EXPECT_EQ(got, want);
  const std::set<std::string> tensors = {"q", "input_row_offsets", "freqs_cis", "kv_norm_gamma", "kv_cache.blocks",
                                         "kv_cache.lookup_table", "kv_cache.cache_lengths", "buffer_row_offsets",
                                         "cache_offsets", "kv_b_proj", "kv_b_proj_scale", "out.output", "out.q",
                                         "out.kv_cache.blocks"};
  std::set<std::string> names;
  for (const auto& [name, t] : b.tensors) names.insert(name);
  EXPECT_EQ(names, tensors);
  // Every FP8 code is present in the weight.
  std::set<int> codes;
  const Tensor& w = b.at("kv_b_proj");
  for (int64_t i = 0; i < w.numel(); ++i) codes.insert(w.data<std::uint8_t>()[i]);
  EXPECT_EQ(codes.size(), 256u);
  const auto work = driver().work(b);
  EXPECT_GT(work.flops, 0);
  EXPECT_GT(work.bytes, 0);
  EXPECT_EQ(driver().bench_cases().size(), 13u);
  EXPECT_EQ(driver().bench_cases()[12].name, "h16_b1_s4096_c4096_ue8m0_topk2048");
}

}  // namespace
}  // namespace mlakit
