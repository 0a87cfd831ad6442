// Golden matrix, oracle check and hand-built cases of op 4 (sparse MLA prefill).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "goldens/common/random.hpp"
#include "goldens/common/safetensors.hpp"
#include "mlakit/ops/sparse_mla_prefill.hpp"
#include "oracle/sparse_mla_prefill.hpp"
#include "reference/sparse_mla_prefill.hpp"
#include "support/matrix.hpp"

MLAKIT_GOLDEN_MATRIX(sparse_mla_prefill);

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::CaseSpec;
using goldens::Tensor;
using goldens::json;

const goldens::OpDriver& driver() { return *goldens::find_driver("sparse_mla_prefill"); }

bool wants_lse(const CaseSpec& spec) {
  json k;
  std::string why;
  goldens::merge_knobs(driver().default_knobs(), spec.knobs, &k, &why);
  return k.at("lse").get<bool>();
}

bool wants_max_logits(const CaseSpec& spec) {
  json k;
  std::string why;
  goldens::merge_knobs(driver().default_knobs(), spec.knobs, &k, &why);
  return k.at("max_logits").get<bool>();
}

// ---- the reference against the dense oracle, every case and seed ----------------------------

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

class SparseMlaPrefillOracle : public ::testing::TestWithParam<OracleParam> {};

TEST_P(SparseMlaPrefillOracle, ReferenceMatchesDenseFormulation) {
  const auto& p = GetParam();
  const bool lse = wants_lse(p.spec), ml = wants_max_logits(p.spec);
  testing::run_reference_against_oracle(driver(), p.spec, p.seed,
                                        [lse, ml](Bundle& b) { oracle::sparse_mla_prefill(b, lse, ml); });
}

// Both formulations compute in f64 and round once, so they agree to the last bit except where an
// f64 result sits within ~1e-16 of a bf16 rounding boundary: at most one bf16 ulp (2^-7 relative)
// per output element, one f32 ulp for lse, rows practically parallel.
TEST_P(SparseMlaPrefillOracle, ReferenceAgreesWithOracleToTheLastUlp) {
  const auto& p = GetParam();
  const bool lse = wants_lse(p.spec), ml = wants_max_logits(p.spec);
  Bundle ref = driver().generate(p.spec.knobs, p.seed);
  ASSERT_TRUE(driver().run(ref, RunOptions{Backend::reference}).ok());
  Bundle alt = driver().generate(p.spec.knobs, p.seed);
  alt.remove_outputs();
  oracle::sparse_mla_prefill(alt, lse, ml);
  const std::int64_t vd = ref.params.at("v_depth").get<std::int64_t>();
  const auto c = goldens::compare_close("out.output", alt.at("out.output"), ref.at("out.output"), 0.0, 0x1.0p-7, vd,
                                        1.0 - 0x1.0p-24);
  EXPECT_TRUE(c.pass) << goldens::describe(c);
  ASSERT_EQ(ref.has("out.lse"), lse);
  if (lse) {
    const auto l = goldens::compare_close("out.lse", alt.at("out.lse"), ref.at("out.lse"), 0.0, 0x1.0p-23);
    EXPECT_TRUE(l.pass) << goldens::describe(l);
  }
  ASSERT_EQ(ref.has("out.max_logits"), ml);
  if (ml) {  // both the f64 maximum rounded once to f32: the same bits
    const auto m = goldens::compare_close("out.max_logits", alt.at("out.max_logits"), ref.at("out.max_logits"), 0.0, 0.0);
    EXPECT_TRUE(m.pass) << goldens::describe(m);
  }
  // Sanity of the data itself: a row of zeros must be exactly a query row without a valid slot
  // (counted here from the inputs), and outputs that are mostly NaN would make the check hollow.
  const Tensor& out = ref.at("out.output");
  const Tensor& idx = ref.at("indices");
  const std::int64_t T = idx.shape()[0], stride = idx.shape()[1];
  const std::int64_t Hq = ref.params.at("num_q_heads").get<std::int64_t>();
  const std::int64_t num_rows = ref.at("kv_cache.blocks").shape()[0] * ref.at("kv_cache.blocks").shape()[3];
  std::int64_t empty_tokens = 0;
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int64_t n = ref.has("topk_lengths") ? ref.at("topk_lengths").data<std::uint32_t>()[t] : stride;
    bool any = false;
    for (std::int64_t p = 0; p < n; ++p) {
      std::int32_t v;
      std::memcpy(&v, idx.bytes() + (t * stride + p) * 4, 4);
      any |= v >= 0 && v < num_rows;
    }
    empty_tokens += !any;
  }
  std::int64_t zero_rows = 0, nan_rows = 0;
  for (std::int64_t r = 0; r < T * Hq; ++r) {
    bool zero = true, nan = false;
    for (std::int64_t j = 0; j < vd; ++j) {
      zero &= out.value(r * vd + j) == 0;
      nan |= std::isnan(out.value(r * vd + j));
    }
    zero_rows += zero;
    nan_rows += nan;
  }
  EXPECT_EQ(zero_rows, empty_tokens * Hq);
  EXPECT_LE(nan_rows * 2, T * Hq) << "most rows are NaN";
  json k;
  std::string why;
  goldens::merge_knobs(driver().default_knobs(), p.spec.knobs, &k, &why);
  const bool all_empty = k.at("empty_row_fraction").get<double>() >= 1.0 || k.at("topk_lengths") == "all_zero";
  if (all_empty) {
    EXPECT_EQ(empty_tokens, T);
  } else if (T > 0) {
    EXPECT_LT(empty_tokens, T) << "no query row reads anything";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SparseMlaPrefillOracle, ::testing::ValuesIn(oracle_params()),
                         [](const ::testing::TestParamInfo<OracleParam>& i) {
                           return i.param.spec.name + "_seed" + std::to_string(i.param.seed);
                         });

TEST(SparseMlaPrefillDriver, DefaultAndBenchCasesAreWellFormed) {
  // The default case generates and runs on the reference (it is what `mlakit` runs by default).
  Bundle b = driver().generate(driver().default_case().knobs, 1);
  ASSERT_TRUE(driver().run(b, RunOptions{Backend::reference}).ok());
  EXPECT_EQ(b.at("out.output").shape(), (std::vector<std::int64_t>{4, 128, 512}));
  EXPECT_TRUE(b.has("out.lse"));
  const auto w = driver().work(b);
  EXPECT_GT(w.flops, 0);
  EXPECT_GT(w.bytes, 0);
  for (const auto& c : driver().bench_cases()) {
    json k;
    std::string why;
    EXPECT_TRUE(goldens::merge_knobs(driver().default_knobs(), c.knobs, &k, &why)) << c.name << ": " << why;
  }
}

// Seconds and hundreds of MB each: run with --gtest_also_run_disabled_tests.
TEST(SparseMlaPrefillDriver, DISABLED_BenchCasesGenerate) {
  for (const auto& c : driver().bench_cases()) {
    const Bundle b = driver().generate(c.knobs, 1);
    const auto w = driver().work(b);
    const auto tol = driver().tolerance(b);
    std::printf("%s: %.3g GFLOP, %.3g MB, atol %.3g\n", c.name.c_str(), w.flops * 1e-9, w.bytes * 1e-6,
                tol.at("out.output").at("atol").get<double>());
    EXPECT_GT(w.flops, 0) << c.name;
  }
}

TEST(SparseMlaPrefillDriver, GoldenFilesRoundTripAndRerunToTheSameBytes) {
  // What `mlakit golden` writes and `mlakit check` reads back: every case, with and without lse.
  for (const auto& spec : driver().cases()) {
    Bundle b = driver().generate(spec.knobs, 2);
    ASSERT_TRUE(driver().run(b, RunOptions{Backend::reference}).ok()) << spec.name;
    b.tolerance = driver().tolerance(b);
    b.metadata["case"] = spec.name;
    b.metadata["seed"] = "2";
    std::vector<std::uint8_t> bytes;
    ASSERT_TRUE(goldens::serialize_safetensors(b, &bytes).ok()) << spec.name;
    Bundle file;
    const Status s = goldens::parse_safetensors(bytes.data(), bytes.size(), spec.name, &file);
    ASSERT_TRUE(s.ok()) << s.message;
    std::string why;
    EXPECT_TRUE(goldens::same_bundle(b, file, &why)) << spec.name << ": " << why;
    EXPECT_EQ(file.has("out.lse"), wants_lse(spec)) << spec.name;
    EXPECT_EQ(file.tolerance.contains("out.lse"), wants_lse(spec)) << spec.name;
    EXPECT_EQ(file.has("out.max_logits"), wants_max_logits(spec)) << spec.name;
    EXPECT_EQ(file.tolerance.contains("out.max_logits"), wants_max_logits(spec)) << spec.name;
    Bundle again = file;
    again.remove_outputs();
    ASSERT_TRUE(driver().run(again, RunOptions{Backend::reference}).ok()) << spec.name;
    for (const auto& name : file.output_names())
      EXPECT_TRUE(again.has(name) && again.at(name).same_bytes(file.at(name))) << spec.name << " " << name;
    EXPECT_EQ(again.output_names(), file.output_names()) << spec.name;
    for (const auto& c : driver().compare(file, again)) EXPECT_TRUE(c.pass) << spec.name << ": " << goldens::describe(c);
  }
}

TEST(SparseMlaPrefillDriver, GoldenParamsKeysAreTheFormatNames) {
  for (const char* c : {"deepseek_bf16", "deepseek_fp8"}) {
    CaseSpec spec;
    for (const auto& s : driver().cases())
      if (s.name == c) spec = s;
    const Bundle b = driver().generate(spec.knobs, 1);
    std::vector<std::string> keys;
    for (auto it = b.params.begin(); it != b.params.end(); ++it) keys.push_back(it.key());
    std::vector<std::string> want = {"indices_stride", "layer_idx", "num_q_heads", "page_size", "qk_depth", "scale",
                                     "v_depth"};
    if (std::string(c) == "deepseek_fp8") want.insert(want.begin() + 3, "quant_granularity");
    std::sort(keys.begin(), keys.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(keys, want) << c;
    for (const char* t : {"q", "kv_cache.blocks", "kv_cache.lookup_table", "kv_cache.cache_lengths", "indices"})
      EXPECT_TRUE(b.has(t)) << c << " lacks " << t;
  }
}

TEST(SparseMlaPrefillDriver, Fp8CachesHoldAll256CodesAndNanRowsStayRare) {
  for (const auto& spec : driver().cases()) {
    json k;
    std::string why;
    ASSERT_TRUE(goldens::merge_knobs(driver().default_knobs(), spec.knobs, &k, &why)) << why;
    if (k.at("cache_dtype") != "f8e4m3") continue;
    for (std::uint64_t seed : testing::kSeeds) {
      Bundle b = driver().generate(spec.knobs, seed);
      const Tensor& blocks = b.at("kv_cache.blocks");
      std::vector<bool> seen(256, false);
      for (std::int64_t i = 0; i < blocks.numel(); ++i) seen[blocks.data<std::uint8_t>()[i]] = true;
      for (int c = 0; c < 256; ++c) EXPECT_TRUE(seen[c]) << spec.name << " lacks code " << c;
      // The NaN codes sit in rows few query rows read; with nan_row, query row 0 reads one.
      ASSERT_TRUE(driver().run(b, RunOptions{Backend::reference}).ok());
      const Tensor& out = b.at("out.output");
      const std::int64_t T = b.at("q").shape()[0], Hq = b.params.at("num_q_heads").get<std::int64_t>();
      const std::int64_t vd = b.params.at("v_depth").get<std::int64_t>();
      std::vector<bool> nan_token(T, false);
      for (std::int64_t i = 0; i < out.numel(); ++i)
        if (std::isnan(out.value(i))) nan_token[i / (Hq * vd)] = true;
      const auto nan_count = std::count(nan_token.begin(), nan_token.end(), true);
      if (k.at("nan_row").get<bool>() || k.at("nan_scale").get<bool>()) {
        ASSERT_GT(T, 0);
        EXPECT_TRUE(nan_token[0]) << spec.name << " seed " << seed;
        for (std::int64_t i = 0; i < Hq * vd; ++i) EXPECT_TRUE(std::isnan(out.value(i))) << "every head of row 0";
        EXPECT_EQ(nan_count, 1) << spec.name << " seed " << seed;
      } else {
        EXPECT_EQ(nan_count, 0) << spec.name << " seed " << seed;
      }
    }
  }
}

// e8m0 caches carry every edge byte: 0 (2^-127), 254 (2^127) and 0xFF (NaN); with nan_scale query
// row 0 reads a NaN scale (checked above), the others sit in rows nothing reads.
TEST(SparseMlaPrefillDriver, E8m0ScalesHoldTheEdgeValues) {
  int cases = 0;
  for (const auto& spec : driver().cases()) {
    json k;
    std::string why;
    ASSERT_TRUE(goldens::merge_knobs(driver().default_knobs(), spec.knobs, &k, &why)) << why;
    if (k.at("scale_dtype") != "e8m0") continue;
    ++cases;
    for (std::uint64_t seed : testing::kSeeds) {
      const Bundle b = driver().generate(spec.knobs, seed);
      const Tensor& scales = b.at("kv_cache.scales");
      ASSERT_EQ(scales.dtype(), DType::e8m0);
      bool seen[256] = {};
      for (std::int64_t i = 0; i < scales.numel(); ++i) seen[scales.data<std::uint8_t>()[i]] = true;
      for (int e : {0x00, 0xFE, 0xFF}) EXPECT_TRUE(seen[e]) << spec.name << " seed " << seed << " lacks scale byte " << e;
      EXPECT_TRUE(b.has("kv_cache.tail")) << spec.name;
    }
  }
  EXPECT_GE(cases, 2);
}

TEST(SparseMlaPrefillDriver, ValidIndicesReachPagesNoSequenceOwns) {
  CaseSpec spec;
  for (const auto& s : driver().cases())
    if (s.name == "unowned_rows") spec = s;
  const Bundle b = driver().generate(spec.knobs, 1);
  const Tensor& lut = b.at("kv_cache.lookup_table");
  const std::int64_t nb = b.at("kv_cache.blocks").shape()[0], ps = b.at("kv_cache.blocks").shape()[3];
  EXPECT_EQ(nb, 17);  // the num_blocks knob
  std::vector<bool> owned(nb, false);
  for (std::int64_t i = 0; i < lut.numel(); ++i)
    if (lut.data<std::uint32_t>()[i] < nb) owned[lut.data<std::uint32_t>()[i]] = true;
  const Tensor& idx = b.at("indices");
  const Tensor& len = b.at("topk_lengths");
  const std::int64_t stride = idx.shape()[1];
  int unowned_reads = 0;
  for (std::int64_t t = 0; t < idx.shape()[0]; ++t)
    for (std::int64_t p = 0; p < len.data<std::uint32_t>()[t]; ++p) {
      const std::int32_t r = idx.data<std::int32_t>()[t * stride + p];
      if (r >= 0 && r < nb * ps && !owned[r / ps]) ++unowned_reads;
    }
  EXPECT_GT(unowned_reads, 0);
}

// ---- hand-built calls with exact expected values ---------------------------------------------

// A tiny bf16 / f8e4m3 MLA cache and call, filled by the tests.
struct Tiny {
  SparseMlaPrefillDesc d;
  std::int64_t T, page, blocks_n, layers;
  bool fp8;
  Tensor q, blocks, scales, indices, lengths, sink, out, lse;

  Tiny(std::int64_t T_, std::int64_t Hq, std::int64_t qk, std::int64_t vd, std::int64_t stride, std::int64_t page_,
       std::int64_t nblocks, std::int64_t layers_ = 1, bool fp8_ = false, DType index_dtype = DType::i32)
      : T(T_), page(page_), blocks_n(nblocks), layers(layers_), fp8(fp8_) {
    d.num_q_heads = Hq;
    d.qk_depth = qk;
    d.v_depth = vd;
    d.indices_stride = stride;
    d.scale = 1.0f;
    q = Tensor(DType::bf16, {T, Hq, qk});
    blocks = Tensor(fp8 ? DType::f8e4m3 : DType::bf16, {nblocks, 1, layers, page, 1, qk});
    if (fp8) {
      scales = Tensor(DType::f32, {nblocks, 1, layers, page, 1, 1});
      for (std::int64_t i = 0; i < scales.numel(); ++i) scales.data<float>()[i] = 1.0f;
    }
    indices = Tensor(index_dtype, {T, stride});
    for (std::int64_t i = 0; i < indices.numel(); ++i) indices.data<std::int32_t>()[i] = -1;
    out = Tensor(DType::bf16, {T, Hq, vd});
    lse = Tensor(DType::f32, {T, Hq});
    out.poison();
    lse.poison();
  }
  void set_q(std::int64_t t, std::int64_t h, std::vector<float> v) {
    for (std::size_t k = 0; k < v.size(); ++k) q.data<std::uint16_t>()[(t * d.num_q_heads + h) * d.qk_depth + k] = f32_to_bf16(v[k]);
  }
  std::int64_t base(std::int64_t r, std::int64_t layer) const {
    return ((r / page * layers + layer) * page + r % page) * d.qk_depth;
  }
  void set_row(std::int64_t r, std::vector<float> v, std::int64_t layer = 0) {
    for (std::size_t k = 0; k < v.size(); ++k) blocks.data<std::uint16_t>()[base(r, layer) + k] = f32_to_bf16(v[k]);
  }
  void set_codes(std::int64_t r, std::vector<std::uint8_t> c, float s, std::int64_t layer = 0) {
    for (std::size_t k = 0; k < c.size(); ++k) blocks.data<std::uint8_t>()[base(r, layer) + k] = c[k];
    scales.data<float>()[(r / page * layers + layer) * page + r % page] = s;
  }
  void set_indices(std::int64_t t, std::vector<std::int64_t> v) {
    for (std::size_t p = 0; p < v.size(); ++p)
      indices.data<std::int32_t>()[t * d.indices_stride + static_cast<std::int64_t>(p)] = static_cast<std::int32_t>(v[p]);
  }
  void set_lengths(std::vector<std::uint32_t> v) {
    lengths = Tensor(DType::u32, {T});
    for (std::size_t t = 0; t < v.size(); ++t) lengths.data<std::uint32_t>()[t] = v[t];
  }
  void set_sink(std::vector<float> v) {
    sink = Tensor(DType::f32, {static_cast<std::int64_t>(v.size())});
    for (std::size_t h = 0; h < v.size(); ++h) sink.data<float>()[h] = v[h];
  }
  SparseMlaPrefillArgs args(std::uint32_t layer = 0) const {
    SparseMlaPrefillArgs a;
    a.q = q.view();
    a.kv_cache.blocks = blocks.view();
    if (fp8) {
      a.kv_cache.scales = scales.view();
      a.kv_cache.quant_granularity = d.qk_depth;
    }
    a.layer_idx = layer;
    a.indices = indices.view();
    if (lengths.shape().size() == 1) a.topk_lengths = lengths.view();
    if (sink.shape().size() == 1) a.attn_sink = sink.view();
    a.output = out.view();
    a.lse = lse.view();
    return a;
  }
  Status run(std::uint32_t layer = 0, Backend be = Backend::reference) {
    return sparse_mla_prefill(d, args(layer), RunOptions{be});
  }
  float o(std::int64_t t, std::int64_t h, std::int64_t j) const {
    return bf16_to_f32(out.data<std::uint16_t>()[(t * d.num_q_heads + h) * d.v_depth + j]);
  }
  float l(std::int64_t t, std::int64_t h) const { return lse.data<float>()[t * d.num_q_heads + h]; }
};

// q = [0, 1]: rows A = [1, 2] and B = [4, 2] score the same (2·scale); V is column 0.
Tiny two_rows(std::int64_t T = 1, std::int64_t stride = 8) {
  Tiny c(T, 1, 2, 1, stride, 2, 3);  // 6 physical rows
  c.d.scale = 0.5f;                  // scores 1.0
  for (std::int64_t t = 0; t < T; ++t) c.set_q(t, 0, {0, 1});
  for (std::int64_t r = 0; r < 6; ++r) c.set_row(r, {100, 9});  // unread rows: large V, high score
  c.set_row(1, {1, 2});  // A
  c.set_row(4, {4, 2});  // B (block 2)
  return c;
}

TEST(SparseMlaPrefillExact, DuplicatesCountAsOftenAsTheyAppear) {
  Tiny c = two_rows();
  c.set_indices(0, {1, 4, 4});
  c.set_lengths({3});
  ASSERT_TRUE(c.run().ok());
  EXPECT_EQ(c.o(0, 0, 0), 3.0f);  // (1 + 4 + 4) / 3
  EXPECT_EQ(c.l(0, 0), static_cast<float>(1.0 + std::log(3.0)));
}

TEST(SparseMlaPrefillExact, SinkEntersTheDenominatorOnlyAndNotTheLse) {
  Tiny c = two_rows();
  c.set_indices(0, {1, 4, 4});
  c.set_lengths({3});
  c.set_sink({1.0f});  // exp(sink - m) = 1
  ASSERT_TRUE(c.run().ok());
  EXPECT_EQ(c.o(0, 0, 0), 2.25f);  // 9 / (3 + 1)
  EXPECT_EQ(c.l(0, 0), static_cast<float>(1.0 + std::log(3.0)));
}

TEST(SparseMlaPrefillExact, InvalidSlotsAndSlotsPastTheLengthAreSkipped) {
  Tiny c = two_rows(1, 10);
  const std::int64_t num_rows = 6;
  c.set_indices(0, {1, -1, num_rows, std::numeric_limits<std::int32_t>::min(), 4, -7, 4,
                    std::numeric_limits<std::int32_t>::max(), /* past the length: */ 0, 2});
  c.set_lengths({8});
  ASSERT_TRUE(c.run().ok());
  EXPECT_EQ(c.o(0, 0, 0), 3.0f);
  EXPECT_EQ(c.l(0, 0), static_cast<float>(1.0 + std::log(3.0)));
}

TEST(SparseMlaPrefillExact, AbsentLengthsReadTheWholeStride) {
  Tiny c = two_rows(1, 4);
  c.set_indices(0, {1, 4, -1, 4});
  ASSERT_TRUE(c.run().ok());
  EXPECT_EQ(c.o(0, 0, 0), 3.0f);
}

TEST(SparseMlaPrefillExact, RowsWithoutValidSlotGiveZeroAndInfiniteLse) {
  Tiny c = two_rows(3, 4);
  c.set_indices(0, {-1, 6, 7, -100});  // all invalid
  c.set_indices(1, {1, 4, 4, 1});      // length 0
  c.set_indices(2, {1, 4, 4, -1});
  c.set_lengths({4, 0, 3});
  c.set_sink({3.0f});
  ASSERT_TRUE(c.run().ok());
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(c.out.data<std::uint16_t>()[t], 0u) << t;  // +0, not -0 and not poison
    EXPECT_EQ(c.l(t, 0), std::numeric_limits<float>::infinity()) << t;
  }
  EXPECT_NEAR(c.o(2, 0, 0), 9.0 / (3.0 + std::exp(2.0)), 0x1.0p-8 * 9.0 / (3.0 + std::exp(2.0)));
}

TEST(SparseMlaPrefillExact, SoftmaxWeightsFollowTheScores) {
  // Hq 2 with different queries, qk 3, v 2: compared with the closed form computed here.
  Tiny c(1, 2, 3, 2, 4, 4, 1);
  c.d.scale = 0.25f;
  c.set_q(0, 0, {1, -2, 0.5f});
  c.set_q(0, 1, {-1, 0.75f, 2});
  const std::vector<std::vector<float>> rows = {{0.5f, 1.5f, -1}, {2, -0.25f, 3}, {-1.5f, 0.125f, 0.5f}};
  for (int r = 0; r < 3; ++r) c.set_row(r, rows[r]);
  c.set_indices(0, {2, 0, 1, 0});
  ASSERT_TRUE(c.run().ok());
  const std::vector<std::vector<float>> qs = {{1, -2, 0.5f}, {-1, 0.75f, 2}};
  for (int h = 0; h < 2; ++h) {
    std::vector<double> s;
    for (int r : {2, 0, 1, 0}) {
      double dot = 0;
      for (int k = 0; k < 3; ++k) dot += double(qs[h][k]) * rows[r][k];
      s.push_back(0.25 * dot);
    }
    double m = *std::max_element(s.begin(), s.end()), l = 0, o0 = 0, o1 = 0;
    const int order[] = {2, 0, 1, 0};
    for (int i = 0; i < 4; ++i) {
      const double e = std::exp(s[i] - m);
      l += e;
      o0 += e * rows[order[i]][0];
      o1 += e * rows[order[i]][1];
    }
    EXPECT_EQ(c.o(0, h, 0), round_to_bf16(static_cast<float>(o0 / l))) << h;
    EXPECT_EQ(c.o(0, h, 1), round_to_bf16(static_cast<float>(o1 / l))) << h;
    EXPECT_EQ(c.l(0, h), static_cast<float>(m + std::log(l))) << h;
  }
}

TEST(SparseMlaPrefillExact, Fp8RowsAreCodeTimesRowScaleForBothProducts) {
  Tiny c(1, 1, 2, 1, 2, 2, 1, 1, /*fp8=*/true);
  c.d.scale = 1.0f;
  c.set_q(0, 0, {0, 1});
  c.set_codes(0, {0x38, 0x40}, 0.5f);   // [1, 2] · 0.5 = [0.5, 1]   -> s = 1
  c.set_codes(1, {0x48, 0x38}, 1.0f);   // [4, 1] · 1  = [4, 1]      -> s = 1
  c.set_indices(0, {0, 1});
  ASSERT_TRUE(c.run().ok());
  EXPECT_EQ(c.o(0, 0, 0), 2.25f);  // (0.5 + 4) / 2
  EXPECT_EQ(c.l(0, 0), static_cast<float>(1.0 + std::log(2.0)));
  // Subnormal codes are not flushed: code 0x01 = 2^-9.
  c.set_codes(0, {0x01, 0x00}, 1.0f);
  c.set_codes(1, {0x01, 0x00}, 4.0f);
  c.out.poison();
  ASSERT_TRUE(c.run().ok());
  EXPECT_EQ(c.o(0, 0, 0), static_cast<float>((std::ldexp(1.0, -9) + std::ldexp(4.0, -9)) / 2));
}

TEST(SparseMlaPrefillExact, NanInTheKeyPartPoisonsEveryHeadOfThatRowOnly) {
  Tiny c(2, 2, 2, 1, 2, 2, 1, 1, /*fp8=*/true);
  c.set_q(0, 0, {1, 1});
  c.set_q(0, 1, {-1, 0.5f});
  c.set_q(1, 0, {1, 1});
  c.set_q(1, 1, {1, -1});
  c.set_codes(0, {0x38, 0x7F}, 1.0f);  // NaN only in the K-only column
  c.set_codes(1, {0x40, 0x38}, 1.0f);
  c.set_indices(0, {0, 1});
  c.set_indices(1, {1, -1});
  ASSERT_TRUE(c.run().ok());
  for (int h = 0; h < 2; ++h) {
    EXPECT_TRUE(std::isnan(c.o(0, h, 0))) << h;
    EXPECT_TRUE(std::isnan(c.l(0, h))) << h;
    EXPECT_EQ(c.o(1, h, 0), 2.0f) << h;
  }
}

TEST(SparseMlaPrefillExact, U32IndicesAreTheI32BitPattern) {
  Tiny c(1, 1, 2, 1, 5, 2, 3, 1, false, DType::u32);
  c.d.scale = 0.5f;
  c.set_q(0, 0, {0, 1});
  for (std::int64_t r = 0; r < 6; ++r) c.set_row(r, {100, 9});
  c.set_row(1, {1, 2});
  c.set_row(4, {4, 2});
  const std::uint32_t v[] = {1, 0xFFFFFFFFu, 4, 0x80000000u, 4};
  for (int p = 0; p < 5; ++p) c.indices.data<std::uint32_t>()[p] = v[p];
  ASSERT_TRUE(c.run().ok());
  EXPECT_EQ(c.o(0, 0, 0), 3.0f);
}

TEST(SparseMlaPrefillExact, ReadsTheRowsOfLayerIdx) {
  Tiny c(1, 1, 2, 1, 2, 2, 2, /*layers=*/3);
  c.set_q(0, 0, {0, 1});
  for (std::int64_t layer = 0; layer < 3; ++layer) {
    c.set_row(0, {float(10 * layer + 1), 0}, layer);
    c.set_row(3, {float(10 * layer + 3), 0}, layer);
  }
  c.set_indices(0, {0, 3});
  ASSERT_TRUE(c.run(2).ok());
  EXPECT_EQ(c.o(0, 0, 0), 22.0f);  // (21 + 23) / 2
  ASSERT_TRUE(c.run(0).ok());
  EXPECT_EQ(c.o(0, 0, 0), 2.0f);
}

TEST(SparseMlaPrefillExact, ZeroRowsIsAValidCallThatWritesNothing) {
  Tiny c(0, 2, 4, 2, 3, 2, 1);
  ASSERT_TRUE(c.run().ok());
  EXPECT_TRUE(c.out.guard_intact());
  EXPECT_TRUE(c.lse.guard_intact());
}

TEST(SparseMlaPrefillExact, OutputIsRoundedOnceFromF64) {
  // 1 + 2^-8 + 2^-30 is above the bf16 tie; rounding through f32 would lose the 2^-30 and then
  // round the false tie to even (1.0).
  EXPECT_EQ(reference::bf16_from_f64(1.0 + 0x1.0p-8 + 0x1.0p-30), 0x3F81);
  EXPECT_EQ(reference::bf16_from_f64(-(1.0 + 0x1.0p-8 + 0x1.0p-30)), 0xBF81);
  EXPECT_EQ(reference::bf16_from_f64(1.0 + 0x1.0p-8 - 0x1.0p-40), 0x3F80);
  EXPECT_EQ(reference::bf16_from_f64(1.0 + 0x1.0p-8), 0x3F80);        // tie to even
  EXPECT_EQ(reference::bf16_from_f64(1.0 + 3 * 0x1.0p-8), 0x3F82);    // tie to even (up)
  EXPECT_EQ(reference::bf16_from_f64(1e300), 0x7F80);
  EXPECT_EQ(reference::bf16_from_f64(-1e300), 0xFF80);
  EXPECT_EQ(reference::bf16_from_f64(1e-300), 0x0000);
  EXPECT_EQ(reference::bf16_from_f64(-1e-300), 0x8000);
  EXPECT_EQ(reference::bf16_from_f64(0x1.0p-133), 0x0001);             // smallest bf16 subnormal
  EXPECT_EQ(reference::bf16_from_f64(0x1.0p-134 + 0x1.0p-160), 0x0001);  // just above half of it
  EXPECT_EQ(reference::bf16_from_f64(0x1.0p-134), 0x0000);             // tie to even (zero)
  EXPECT_TRUE(std::isnan(bf16_to_f32(reference::bf16_from_f64(std::nan("")))));
  // Agrees with plain rounding wherever the value is an f32 already.
  goldens::Rng rng(7);
  for (int i = 0; i < 100000; ++i) {
    const float f = static_cast<float>(rng.normal() * std::ldexp(1.0, static_cast<int>(rng.integer(-140, 120))));
    EXPECT_EQ(reference::bf16_from_f64(f), f32_to_bf16(f)) << f;
  }
}

// Host memory: automatic runs the cpu back-end (the same bits as asking for it), which agrees with
// the reference on this small case within the derived bound (checked at scale by the matrix).
TEST(SparseMlaPrefillRouting, AutomaticRunsTheCpuBackEnd) {
  Tiny a = two_rows(), b = two_rows(), r = two_rows();
  for (Tiny* x : {&a, &b, &r}) x->set_indices(0, {1, 4, 4});
  ASSERT_TRUE(a.run(0, Backend::cpu).ok());
  const Status s = b.run(0, Backend::automatic);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_TRUE(a.out.same_bytes(b.out));
  EXPECT_TRUE(a.lse.same_bytes(b.lse));
  ASSERT_TRUE(r.run(0, Backend::reference).ok());
  for (std::int64_t i = 0; i < r.out.numel(); ++i) EXPECT_NEAR(a.out.value(i), r.out.value(i), 0x1p-6 * (1 + std::fabs(r.out.value(i)))) << i;
  Tiny c = two_rows();
  c.set_indices(0, {1, 4, 4});
  const Status cuda = c.run(0, Backend::cuda);
  EXPECT_FALSE(cuda.ok());
}

}  // namespace
}  // namespace mlakit
