// fused_qkv_paged: the golden matrix, the reference against the dequantize-then-matmul oracle, and
// hand-built calls whose results are known exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "goldens/common/driver.hpp"
#include "goldens/common/random.hpp"
#include "mlakit/ops/fused_qkv_paged.hpp"
#include "oracle/fused_qkv_paged.hpp"
#include "support/matrix.hpp"

MLAKIT_GOLDEN_MATRIX(fused_qkv_paged);

namespace mlakit::testing {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;

const goldens::OpDriver& driver() {
  const auto* d = goldens::find_driver("fused_qkv_paged");
  if (d == nullptr) throw std::runtime_error("fused_qkv_paged driver is not registered");
  return *d;
}

// ---- the reference against the oracle, every case and seed -------------------------------------

struct OracleParam {
  goldens::CaseSpec spec;
  std::uint64_t seed;
};

void PrintTo(const OracleParam& p, std::ostream* os) { *os << p.spec.name << " seed " << p.seed; }

std::vector<OracleParam> oracle_params() {
  std::vector<OracleParam> v;
  for (const auto& spec : driver().cases())
    for (std::uint64_t seed : kSeeds) v.push_back({spec, seed});
  return v;
}

class FusedQkvPagedOracle : public ::testing::TestWithParam<OracleParam> {};

TEST_P(FusedQkvPagedOracle, ReferenceMatchesOracle) {
  run_reference_against_oracle(driver(), GetParam().spec, GetParam().seed, fused_qkv_paged_oracle);
}

INSTANTIATE_TEST_SUITE_P(fused_qkv_paged, FusedQkvPagedOracle, ::testing::ValuesIn(oracle_params()),
                         [](const ::testing::TestParamInfo<OracleParam>& info) {
                           return info.param.spec.name + "_seed" + std::to_string(info.param.seed);
                         });

// ---- hand-built calls ---------------------------------------------------------------------------

struct Hand {
  Bundle b;
  Hand(std::int64_t q_dim, const char* format, std::int64_t group_size, bool has_zp, std::int64_t heads,
       std::int64_t head_dim, std::int64_t layer_idx, std::int64_t page_size) {
    b.op = "fused_qkv_paged";
    b.params = json{{"q_dim", q_dim},       {"weight_format", format}, {"group_size", group_size},
                    {"has_zp", has_zp},     {"num_kv_heads", heads},   {"head_dim", head_dim},
                    {"layer_idx", layer_idx}, {"page_size", page_size}};
  }
  void offsets(const std::vector<std::uint32_t>& v) {
    Tensor& t = b.add("input_row_offsets", DType::u32, {std::int64_t(v.size())});
    for (std::size_t i = 0; i < v.size(); ++i) t.data<std::uint32_t>()[i] = v[i];
  }
  void cache(DType dt, std::vector<std::int64_t> shape, const std::vector<std::uint32_t>& lut, std::int64_t cols,
             const std::vector<std::uint32_t>& lens) {
    Tensor& blocks = b.add("kv_cache.blocks", dt, shape);
    for (std::int64_t i = 0; i < blocks.numel(); ++i) set(blocks, i, 1000.0 + double(i));  // distinct, exact
    Tensor& l = b.add("kv_cache.lookup_table", DType::u32, {std::int64_t(lens.size()), cols});
    for (std::size_t i = 0; i < lut.size(); ++i) l.data<std::uint32_t>()[i] = lut[i];
    Tensor& c = b.add("kv_cache.cache_lengths", DType::u32, {std::int64_t(lens.size())});
    for (std::size_t i = 0; i < lens.size(); ++i) c.data<std::uint32_t>()[i] = lens[i];
  }
  static void set(Tensor& t, std::int64_t i, double v) {
    if (t.dtype() == DType::f32) t.data<float>()[i] = float(v);
    else t.data<std::uint16_t>()[i] = f32_to_bf16(float(v));
  }
  void run() {
    const Status s = driver().run(b, RunOptions{Backend::reference});
    ASSERT_TRUE(s.ok()) << s.message;
  }
};

std::int64_t cache_index(const Tensor& blocks, std::int64_t blk, std::int64_t kv, std::int64_t layer, std::int64_t off,
                         std::int64_t h, std::int64_t d) {
  const auto& s = blocks.shape();
  return ((((blk * s[1] + kv) * s[2] + layer) * s[3] + off) * s[4] + h) * s[5] + d;
}

// Small integers: every result is exact. Checks Q, K and V placement, the page of every position,
// and that every other cache element keeps its value.
TEST(FusedQkvPagedExact, DenseF32PlacementInOrdinaryCache) {
  Hand h(2, "dense", 128, false, 1, 2, 1, 2);
  Tensor& x = h.b.add("hidden_state", DType::f32, {3, 4});
  const float xv[] = {1, 2, 3, 4, 0, 1, 0, -1, 2, 0, 0, 1};
  std::memcpy(x.data<float>(), xv, sizeof xv);
  Tensor& w = h.b.add("weight", DType::f32, {6, 4});
  const float wv[] = {1, 0, 0, 0, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 2, -1, 0, 0, 0, 0, 0.5f, 0, 0};
  std::memcpy(w.data<float>(), wv, sizeof wv);
  h.offsets({0, 2, 3});
  // Sequence 0 (cache length 3): positions 3, 4 → LUT column 1 (block 2, offset 1), column 2 (block 1,
  // offset 0). Sequence 1 (length 0): position 0 → block 3, offset 0. 4 = no page.
  h.cache(DType::f32, {4, 2, 2, 2, 1, 2}, {0, 2, 1, 3, 4, 4}, 3, {3, 0});
  const Tensor before = h.b.at("kv_cache.blocks");
  h.run();
  const Tensor& out = h.b.at("out.output");
  const float want_q[] = {1, 5, 0, 1, 2, 0};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.data<float>()[i], want_q[i]) << i;

  const Tensor& cache = h.b.at("out.kv_cache.blocks");
  struct Want {
    std::int64_t blk, off;
    float k0, k1, v0, v1;
  };
  const Want want[] = {{2, 1, 10, 8, -1, 1}, {1, 0, 0, -2, 0, 0.5f}, {3, 0, 3, 2, -2, 0}};
  std::set<std::int64_t> written;
  for (const Want& r : want) {
    const float vals[2][2] = {{r.k0, r.k1}, {r.v0, r.v1}};
    for (int kv = 0; kv < 2; ++kv)
      for (int d = 0; d < 2; ++d) {
        const std::int64_t i = cache_index(cache, r.blk, kv, 1, r.off, 0, d);
        EXPECT_EQ(cache.data<float>()[i], vals[kv][d]) << "block " << r.blk << " kv " << kv << " d " << d;
        written.insert(i);
      }
  }
  for (std::int64_t i = 0; i < cache.numel(); ++i)
    if (!written.count(i)) {
      EXPECT_EQ(cache.data<float>()[i], before.data<float>()[i]) << "element " << i;
    }
}

// The f64 sum is rounded once: 1 + 2^-8 + 2^-40 rounds up to 1 + 2^-7 in bf16, while rounding
// through f32 first would land on the tie 1 + 2^-8 and then round to even (1.0).
TEST(FusedQkvPagedExact, Bf16ResultIsRoundedOnce) {
  Hand h(1, "dense", 128, false, 1, 1, 0, 4);
  Tensor& x = h.b.add("hidden_state", DType::bf16, {2, 3});
  const double xv[] = {1, 0x1.0p-8, 0x1.0p-40, -1, -0x1.0p-8, -0x1.0p-40};
  for (int i = 0; i < 6; ++i) Hand::set(x, i, xv[i]);
  Tensor& w = h.b.add("weight", DType::bf16, {2, 3});
  const double wv[] = {1, 1, 1, 1, 1, 0};  // row 1 (the latent column) drops the 2^-40 term: an exact tie
  for (int i = 0; i < 6; ++i) Hand::set(w, i, wv[i]);
  h.offsets({0, 2});
  h.cache(DType::bf16, {2, 1, 1, 4, 1, 1}, {1, 2}, 2, {0});
  h.run();
  const Tensor& out = h.b.at("out.output");
  EXPECT_EQ(out.data<std::uint16_t>()[0], 0x3F81);  // 1 + 2^-7
  EXPECT_EQ(out.data<std::uint16_t>()[1], 0xBF81);
  const Tensor& cache = h.b.at("out.kv_cache.blocks");
  EXPECT_EQ(cache.data<std::uint16_t>()[cache_index(cache, 1, 0, 0, 0, 0, 0)], 0x3F80);  // tie → even: 1.0
  EXPECT_EQ(cache.data<std::uint16_t>()[cache_index(cache, 1, 0, 0, 1, 0, 0)], 0xBF80);
}

// GPTQ layout: nibble i of qweight[r, n] is q[8r+i, n]; nibble i of qzeros[g, c] is z[g, 8c+i];
// g_idx picks the group. One-hot rows read the weight back column by column.
TEST(FusedQkvPagedExact, GptqNibbleOrderZeroPointsAndGroupIndex) {
  constexpr std::int64_t K = 64, GS = 32, G = 2, QD = 8, HS = 8, N = QD + HS;
  auto qv = [](std::int64_t k, std::int64_t n) { return int((k * 3 + n * 5 + 1) % 16); };
  auto zv = [](std::int64_t g, std::int64_t n) { return int((g * 7 + n * 3 + 2) % 16); };
  auto sv = [](std::int64_t g, std::int64_t n) { return (g == 0 ? 0.5 : 2.0) * (n % 2 ? -1 : 1); };
  auto gv = [](std::int64_t k) { return std::int32_t((k / 3) % 2); };
  for (int variant = 0; variant < 3; ++variant) {
    const bool zp = variant >= 1, gidx = variant == 2;
    SCOPED_TRACE("has_zp=" + std::to_string(zp) + " g_idx=" + std::to_string(gidx));
    Hand h(QD, "gptq", GS, zp, 1, HS, 0, 64);
    Tensor& x = h.b.add("hidden_state", DType::f32, {K, K});
    for (std::int64_t t = 0; t < K; ++t) x.data<float>()[t * K + t] = 1.0f;
    Tensor& qw = h.b.add("qweight", DType::i32, {K / 8, N});
    for (std::int64_t r = 0; r < K / 8; ++r)
      for (std::int64_t n = 0; n < N; ++n) {
        std::uint32_t word = 0;
        for (int i = 0; i < 8; ++i) word |= std::uint32_t(qv(8 * r + i, n)) << (4 * i);
        qw.data<std::int32_t>()[r * N + n] = std::int32_t(word);
      }
    Tensor& sc = h.b.add("scales", DType::f16, {G, N});
    for (std::int64_t g = 0; g < G; ++g)
      for (std::int64_t n = 0; n < N; ++n) sc.data<std::uint16_t>()[g * N + n] = f32_to_f16(float(sv(g, n)));
    if (zp) {
      Tensor& qz = h.b.add("qzeros", DType::i32, {G, N / 8});
      for (std::int64_t g = 0; g < G; ++g)
        for (std::int64_t c = 0; c < N / 8; ++c) {
          std::uint32_t word = 0;
          for (int i = 0; i < 8; ++i) word |= std::uint32_t(zv(g, 8 * c + i)) << (4 * i);
          qz.data<std::int32_t>()[g * (N / 8) + c] = std::int32_t(word);
        }
    }
    if (gidx) {
      Tensor& gi = h.b.add("g_idx", DType::i32, {K});
      for (std::int64_t k = 0; k < K; ++k) gi.data<std::int32_t>()[k] = gv(k);
    }
    h.offsets({0, K});
    h.cache(DType::f32, {3, 1, 1, 64, 1, HS}, {2, 3}, 2, {0});
    h.run();
    const Tensor& out = h.b.at("out.output");
    const Tensor& cache = h.b.at("out.kv_cache.blocks");
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t n = 0; n < N; ++n) {
        const std::int64_t g = gidx ? gv(k) : k / GS;
        const double want = (qv(k, n) - (zp ? zv(g, n) : 8)) * sv(g, n);  // exact in bf16
        const float got = n < QD ? out.data<float>()[k * QD + n]
                                 : cache.data<float>()[cache_index(cache, 2, 0, 0, k, 0, n - QD)];
        ASSERT_EQ(double(got), want) << "k " << k << " n " << n;
      }
  }
}

// W = bf16((q − z)·scale): 3·(1 + 2^-10) (f16 scale) rounds to 3; 3·(1 + 2^-7) (bf16 scale) is a tie
// between 3 + 2^-6 and 3 + 2^-5 and rounds to even, 3 + 2^-5.
TEST(FusedQkvPagedExact, GptqWeightIsRoundedToBf16) {
  for (DType sdt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(sdt)));
    Hand h(8, "gptq", 32, false, 1, 8, 0, 4);
    Tensor& x = h.b.add("hidden_state", DType::f32, {1, 32});
    x.data<float>()[0] = 1.0f;
    Tensor& qw = h.b.add("qweight", DType::i32, {4, 16});
    for (std::int64_t i = 0; i < qw.numel(); ++i) qw.data<std::int32_t>()[i] = std::int32_t(0xBBBBBBBBu);  // q = 11
    Tensor& sc = h.b.add("scales", sdt, {1, 16});
    const float s = sdt == DType::f16 ? 1.0f + 0x1.0p-10f : 1.0f + 0x1.0p-7f;
    for (std::int64_t i = 0; i < 16; ++i)
      sc.data<std::uint16_t>()[i] = sdt == DType::f16 ? f32_to_f16(s) : f32_to_bf16(s);
    h.offsets({0, 1});
    h.cache(DType::f32, {1, 1, 1, 4, 1, 8}, {0}, 1, {2});
    h.run();
    const float want = sdt == DType::f16 ? 3.0f : 3.0f + 0x1.0p-5f;
    for (int c = 0; c < 8; ++c) EXPECT_EQ(h.b.at("out.output").data<float>()[c], want) << c;
    const Tensor& cache = h.b.at("out.kv_cache.blocks");
    for (int d = 0; d < 8; ++d) EXPECT_EQ(cache.data<float>()[cache_index(cache, 0, 0, 0, 2, 0, d)], want) << d;
  }
}

// FP8: scale[n/128, k/128] with partial blocks on both axes, subnormal codes kept, NaN codes
// poisoning their whole output column.
TEST(FusedQkvPagedExact, Fp8BlockScalesAndNaNColumn) {
  constexpr std::int64_t K = 136, QD = 130, HS = 8, N = QD + HS;
  Hand h(QD, "fp8_block", 128, false, 1, HS, 0, 4);
  Tensor& x = h.b.add("hidden_state", DType::f32, {3, K});
  const std::int64_t hot[3] = {0, 17, 130};
  for (int t = 0; t < 3; ++t) x.data<float>()[t * K + hot[t]] = 1.0f;
  Tensor& w = h.b.add("weight", DType::f8e4m3, {N, K});
  for (std::int64_t i = 0; i < w.numel(); ++i) w.data<std::uint8_t>()[i] = 0x38;  // 1.0
  w.data<std::uint8_t>()[5 * K + 17] = 0x7F;                                      // NaN
  w.data<std::uint8_t>()[131 * K + 130] = 0x01;                                   // 2^-9
  Tensor& s = h.b.add("weight_scale", DType::f32, {2, 2});
  const float sv[4] = {1, 2, 4, 8};
  std::memcpy(s.data<float>(), sv, sizeof sv);
  h.offsets({0, 3});
  h.cache(DType::f32, {2, 1, 1, 4, 1, HS}, {1, 2}, 2, {0});
  h.run();
  const Tensor& out = h.b.at("out.output");
  const Tensor& cache = h.b.at("out.kv_cache.blocks");
  for (int t = 0; t < 3; ++t)
    for (std::int64_t n = 0; n < N; ++n) {
      const float got = n < QD ? out.data<float>()[t * QD + n]
                               : cache.data<float>()[cache_index(cache, 1, 0, 0, t, 0, n - QD)];
      if (n == 5) {
        EXPECT_TRUE(std::isnan(got)) << "row " << t;
        continue;
      }
      float want = sv[(n / 128) * 2 + hot[t] / 128];
      if (n == 131 && t == 2) want *= 0x1.0p-9f;
      EXPECT_EQ(got, want) << "row " << t << " column " << n;
    }
}

TEST(FusedQkvPagedExact, ZeroRowsWriteNothing) {
  for (const char* name : {"empty_batch", "empty_batch_gptq"}) {
    goldens::CaseSpec spec;
    for (const auto& c : driver().cases())
      if (c.name == name) spec = c;
    ASSERT_EQ(spec.name, name);
    Bundle b = driver().generate(spec.knobs, 7);
    ASSERT_EQ(b.at("hidden_state").shape()[0], 0);
    ASSERT_TRUE(driver().run(b, RunOptions{Backend::reference}).ok());
    EXPECT_TRUE(b.at("out.kv_cache.blocks").same_bytes(b.at("kv_cache.blocks")));
    EXPECT_EQ(b.at("out.output").numel(), 0);
    EXPECT_TRUE(b.at("out.output").guard_intact());
  }
}

// ---- the driver itself --------------------------------------------------------------------------

TEST(FusedQkvPagedDriver, CasesAreWellFormed) {
  std::set<std::string> names;
  const std::set<std::string> keys = {"q_dim", "weight_format", "group_size", "has_zp",
                                      "num_kv_heads", "head_dim", "layer_idx", "page_size"};
  for (const auto& spec : driver().cases()) {
    SCOPED_TRACE(spec.name);
    EXPECT_TRUE(names.insert(spec.name).second) << "duplicate case name";
    const Bundle b = driver().generate(spec.knobs, 1);
    std::set<std::string> got;
    for (auto it = b.params.begin(); it != b.params.end(); ++it) got.insert(it.key());
    std::set<std::string> want = keys;
    if (spec.knobs.contains("zero_format")) want.insert("zero_format");  // written when not the default
    EXPECT_EQ(got, want);
    if (b.has("weight") && b.at("weight").dtype() == DType::f8e4m3) {
      std::set<int> codes;
      const Tensor& w = b.at("weight");
      for (std::int64_t i = 0; i < w.numel(); ++i) codes.insert(w.data<std::uint8_t>()[i]);
      EXPECT_EQ(codes.size(), 256u) << "an fp8 weight must hold every code";
    }
    // The cache is random everywhere (no zero blocks that would hide a stray write).
    const Tensor& blocks = b.at("kv_cache.blocks");
    std::int64_t zeros = 0;
    for (std::int64_t i = 0; i < blocks.numel(); ++i) zeros += blocks.value(i) == 0;
    EXPECT_LT(zeros, blocks.numel() / 100 + 1);
  }
  std::string why;
  json merged;
  for (const auto& spec : driver().bench_cases())
    EXPECT_TRUE(goldens::merge_knobs(driver().default_knobs(), spec.knobs, &merged, &why)) << spec.name << ": " << why;
  EXPECT_TRUE(goldens::merge_knobs(driver().default_knobs(), driver().default_case().knobs, &merged, &why)) << why;
}

TEST(FusedQkvPagedDriver, EveryFormatAndCacheKindIsCovered) {
  std::set<std::string> seen;
  for (const auto& spec : driver().cases()) {
    json k;
    std::string why;
    ASSERT_TRUE(goldens::merge_knobs(driver().default_knobs(), spec.knobs, &k, &why));
    seen.insert(k["weight_format"].get<std::string>() + "/" + k["dtype"].get<std::string>() + "/" +
                k["cache"].get<std::string>());
    if (k["weight_format"] == "gptq") {
      seen.insert("gs" + std::to_string(k["group_size"].get<int>()));
      seen.insert(std::string("scales_") + k["scales_dtype"].get<std::string>());
      seen.insert(std::string("zp_") + (k["has_zp"].get<bool>() ? "1" : "0"));
      if (k["g_idx"].get<bool>()) seen.insert("g_idx");
    }
  }
  for (const char* f : {"dense", "fp8_block", "gptq"})
    for (const char* dt : {"bf16", "f32"}) EXPECT_TRUE(seen.count(std::string(f) + "/" + dt + "/ordinary")) << f << dt;
  for (const char* f : {"dense", "fp8_block", "gptq"}) {
    bool mla = false;
    for (const auto& s : seen) mla |= s.rfind(std::string(f) + "/", 0) == 0 && s.find("/mla") != std::string::npos;
    EXPECT_TRUE(mla) << f << " into an MLA cache";
  }
  for (const char* s : {"gs32", "gs64", "gs128", "scales_f16", "scales_bf16", "zp_0", "zp_1", "g_idx"})
    EXPECT_TRUE(seen.count(s)) << s;
}

// The comparison is able to fail: an error past the bound in the output, in a written cache
// element, and a one-bit change in an element the call must not write.
TEST(FusedQkvPagedDriver, ComparisonDetectsErrors) {
  const goldens::CaseSpec spec = driver().cases().front();
  Bundle ref = driver().generate(spec.knobs, 1);
  ASSERT_TRUE(driver().run(ref, RunOptions{Backend::reference}).ok());
  auto all_pass = [](const std::vector<goldens::Comparison>& v) {
    bool ok = !v.empty();
    for (const auto& c : v) ok &= c.pass;
    return ok;
  };
  EXPECT_TRUE(all_pass(driver().compare(ref, ref)));

  // The largest results: there the error bound is dominated by the rounding term.
  auto largest = [](const Tensor& t, const std::vector<bool>* only) {
    std::int64_t best = -1;
    for (std::int64_t i = 0; i < t.numel(); ++i)
      if ((!only || (*only)[i]) && std::isfinite(t.value(i)) && (best < 0 || std::fabs(t.value(i)) > std::fabs(t.value(best))))
        best = i;
    return best;
  };
  Bundle bad = ref;
  Tensor& out = bad.at("out.output");
  const std::int64_t o = largest(out, nullptr);
  ASSERT_GE(o, 0);
  out.data<std::uint16_t>()[o] = f32_to_bf16(float(out.value(o) * 1.25));
  EXPECT_FALSE(all_pass(driver().compare(ref, bad)));

  // A written cache element may differ by one ulp, not by four.
  const Tensor& in = ref.at("kv_cache.blocks");
  const Tensor& done = ref.at("out.kv_cache.blocks");
  std::vector<bool> changed(std::size_t(in.numel()));
  std::int64_t untouched = -1;
  for (std::int64_t i = 0; i < in.numel(); ++i) {
    changed[i] = std::memcmp(in.bytes() + 2 * i, done.bytes() + 2 * i, 2) != 0;
    if (!changed[i]) untouched = i;
  }
  const std::int64_t written = largest(done, &changed);
  ASSERT_GE(written, 0);
  ASSERT_GE(untouched, 0);
  Tensor& cache = (bad = ref).at("out.kv_cache.blocks");
  cache.data<std::uint16_t>()[written] += 1;
  EXPECT_TRUE(all_pass(driver().compare(ref, bad)));
  cache.data<std::uint16_t>()[written] += 3;
  EXPECT_FALSE(all_pass(driver().compare(ref, bad)));

  Tensor& cache2 = (bad = ref).at("out.kv_cache.blocks");
  cache2.data<std::uint16_t>()[untouched] ^= 1;
  const auto cmp = driver().compare(ref, bad);
  EXPECT_FALSE(all_pass(cmp));
  bool named = false;
  for (const auto& c : cmp) named |= !c.pass && c.name == "out.kv_cache.blocks (untouched)";
  EXPECT_TRUE(named);
}

TEST(FusedQkvPagedOracle, RoundToFormatMatchesTheLibraryConversions) {
  goldens::Rng rng(5);
  for (int i = 0; i < 100000; ++i) {
    const double v = std::ldexp(rng.uniform(-1, 1), int(rng.integer(-140, 130)));
    const float f = float(v);
    EXPECT_EQ(round_to_format(v, 24, -149, 0x1.FFFFFEp127), double(f)) << v;
    // Values already in f32 round to bf16 the same way through either path.
    EXPECT_EQ(round_to_format(double(f), 8, -133, 0x1.FEp127), double(round_to_bf16(f))) << f;
  }
}

TEST(FusedQkvPagedDriver, DefaultCaseRunsOnTheReference) {
  const Bundle in = driver().generate(driver().default_case().knobs, 1);
  Bundle b = in;
  const Status s = driver().run(b, RunOptions{Backend::reference});
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_FALSE(b.at("out.kv_cache.blocks").same_bytes(in.at("kv_cache.blocks")));
}

}  // namespace
}  // namespace mlakit::testing
