// Driver of mla_prefill_fp8 (docs/mla_prefill_fp8.md): golden-matrix cases, input generator, runner, tolerance
// and comparison.
//
// Comparison (derived in tolerance() below):
//   out.q, out.kv_cache.blocks  elements the call must not write are compared exactly; rotated
//                               elements within 1 bf16 step (+ the f32 cancellation term of
//                               x0·c - x1·s), normalized latent elements within 2 bf16 steps.
//   out.output                  per element within a bound the reference derives while re-running
//                               steps 3-7 on the candidate's own q and cache, plus one bf16 step for
//                               the final rounding; and each (token, head) row by cosine similarity.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/validators.hpp"
#include "goldens/common/driver.hpp"
#include "goldens/common/params.hpp"
#include "goldens/common/random.hpp"
#include "mlakit/ops/mla_prefill_fp8.hpp"
#include "reference/mla_prefill_fp8.hpp"

namespace mlakit::goldens {
namespace {

using std::int64_t;

constexpr double kU = 0x1p-24;  // f32 unit roundoff

std::vector<int64_t> int_list(const json& j, const char* name) {
  if (!j.is_array()) throw InputError(std::string("mla_prefill_fp8: knob '") + name + "' must be a list");
  std::vector<int64_t> v;
  for (const auto& e : j) v.push_back(e.get<int64_t>());
  return v;
}

constexpr const char* kOp = "mla_prefill_fp8";

// The params of a golden file (docs/golden-format.md §4); page_size restates the cache's page size. The
// library checks what the sizes must satisfy together (rope even, bn and bk tiling, ...).
constexpr ParamSpec kParams[] = {
    size_param("num_heads"),      size_param("nope", 0),      size_param("rope", 0),
    size_param("v"),              size_param("latent"),       size_param("bn"),
    size_param("bk"),             float_param("scale"),       float_param("epsilon"),
    size_param("buffer_length", 0), size_param("layer_idx", 0), size_param("page_size", 1, false),
    {"numerics", ParamKind::text, false, 0, 0, "max|deepseek|deepseek_ue8m0"},
};

constexpr TensorSpec kTensors[] = {
    {"q", 3},
    {"input_row_offsets", 1},
    {"freqs_cis", 2},
    {"kv_norm_gamma", 1},
    {"kv_cache.blocks", 6},
    {"kv_cache.scales", 6, false},
    {"kv_cache.lookup_table", 2},
    {"kv_cache.cache_lengths", 1},
    {"buffer_row_offsets", 1},
    {"cache_offsets", 1},
    {"kv_b_proj", 2},
    {"kv_b_proj_scale", 2},
    {"topk_indices", 2, false},
    {"out.output", 3, false},
    {"out.q", 3, false},
    {"out.kv_cache.blocks", 6, false},
};

MlaPrefillFp8Desc desc_from_params(const json& params) {
  const ParamReader p(kOp, params, kParams);
  MlaPrefillFp8Desc d;
  d.num_heads = p.integer("num_heads");
  d.nope = p.integer("nope");
  d.rope = p.integer("rope");
  d.v = p.integer("v");
  d.latent = p.integer("latent");
  d.bn = p.integer("bn");
  d.bk = p.integer("bk");
  d.scale = static_cast<float>(p.number("scale"));
  d.epsilon = static_cast<float>(p.number("epsilon"));
  const std::string numerics = p.text_or("numerics", "max");
  d.numerics = numerics == "deepseek" ? MlaNumerics::deepseek
               : numerics == "deepseek_ue8m0" ? MlaNumerics::deepseek_ue8m0 : MlaNumerics::max;
  return d;
}

int64_t param_integer(const Bundle& b, const char* key) { return ParamReader(kOp, b.params, kParams).integer(key); }

MlaPrefillFp8Args args_from_bundle(const Bundle& b, const std::string& q_name, const std::string& blocks_name,
                                   const Tensor& output) {
  MlaPrefillFp8Args a;
  a.q = b.at(q_name).view();
  a.input_row_offsets = b.at("input_row_offsets").view();
  a.freqs_cis = b.at("freqs_cis").view();
  a.kv_norm_gamma = b.at("kv_norm_gamma").view();
  a.kv_cache = cache_view(b, "kv_cache", 0, blocks_name);
  a.layer_idx = static_cast<std::uint32_t>(param_integer(b, "layer_idx"));
  a.buffer_row_offsets = b.at("buffer_row_offsets").view();
  a.cache_offsets = b.at("cache_offsets").view();
  a.buffer_length = param_integer(b, "buffer_length");
  a.kv_b_proj = b.at("kv_b_proj").view();
  a.kv_b_proj_scale = b.at("kv_b_proj_scale").view();
  if (b.has("topk_indices")) a.topk_indices = b.at("topk_indices").view();
  a.output = output.view();
  return a;
}

// One bf16 step at |x| (the spacing of bf16 values in x's binade; subnormal spacing below 2^-126).
double bf16_step(double x) {
  x = std::fabs(x);
  if (!(x >= 0x1p-126)) return 0x1p-133;
  int e = 0;
  std::frexp(x, &e);  // x in [2^(e-1), 2^e)
  return std::ldexp(1.0, e - 8);
}

std::uint32_t u32(const Tensor& t, int64_t i) { return t.data<std::uint32_t>()[i]; }

// Where the rotated / normalized elements live, and the RoPE pair products of each rotated element
// (|x0·c| + |x1·s| for the first of a pair, |x0·s| + |x1·c| for the second) from the inputs.
struct TouchedMap {
  std::vector<double> q_products;      // per element of q; < 0: untouched
  std::vector<double> cache_products;    // per element of blocks (rope parts of new rows)
  std::vector<std::uint8_t> cache_kind;  // 0 untouched, 1 latent (normalized), 2 rope (rotated)
};

TouchedMap touched_map(const Bundle& b) {
  const MlaPrefillFp8Desc d = desc_from_params(b.params);
  const Tensor& q = b.at("q");
  const Tensor& blocks = b.at("kv_cache.blocks");
  const Tensor& freqs = b.at("freqs_cis");
  const Tensor& iro = b.at("input_row_offsets");
  const Tensor& lut = b.at("kv_cache.lookup_table");
  const Tensor& lens = b.at("kv_cache.cache_lengths");
  const int64_t qk = d.nope + d.rope, hs = d.latent + d.rope;
  const int64_t layers = blocks.shape()[2], ps = blocks.shape()[3], cols = lut.shape()[1];
  const int64_t layer = param_integer(b, "layer_idx");
  TouchedMap m;
  m.q_products.assign(static_cast<std::size_t>(q.numel()), -1.0);
  m.cache_products.assign(static_cast<std::size_t>(blocks.numel()), -1.0);
  m.cache_kind.assign(static_cast<std::size_t>(blocks.numel()), 0);
  auto pair_products = [&](const Tensor& src, int64_t base, int64_t pos, std::vector<double>& dst) {
    for (int64_t p = 0; p < d.rope / 2; ++p) {
      const double x0 = src.value(base + 2 * p), x1 = src.value(base + 2 * p + 1);
      const double c = freqs.value(pos * d.rope + 2 * p), s = freqs.value(pos * d.rope + 2 * p + 1);
      dst[static_cast<std::size_t>(base + 2 * p)] = std::fabs(x0 * c) + std::fabs(x1 * s);
      dst[static_cast<std::size_t>(base + 2 * p + 1)] = std::fabs(x0 * s) + std::fabs(x1 * c);
    }
  };
  const int64_t B = iro.numel() - 1;
  for (int64_t s = 0; s < B; ++s) {
    for (int64_t t = u32(iro, s); t < u32(iro, s + 1); ++t) {
      const int64_t pos = u32(lens, s) + (t - u32(iro, s));
      for (int64_t h = 0; h < d.num_heads; ++h) pair_products(q, (t * d.num_heads + h) * qk + d.nope, pos, m.q_products);
      const int64_t blk = u32(lut, s * cols + pos / ps);
      const int64_t row = ((blk * layers + layer) * ps + pos % ps) * hs;  // kv_dim = 1, one head
      pair_products(blocks, row + d.latent, pos, m.cache_products);
      for (int64_t k = 0; k < d.latent; ++k) m.cache_kind[static_cast<std::size_t>(row + k)] = 1;
      for (int64_t r = 0; r < d.rope; ++r) m.cache_kind[static_cast<std::size_t>(row + d.latent + r)] = 2;
    }
  }
  return m;
}

// Output comparison: each (token, head) row of v elements by cosine similarity.
Comparison compare_rows_cosine(const std::string& name, const Tensor& expected, const Tensor& actual, int64_t row_len,
                               double min_cosine) {
  Comparison c;
  c.name = name;
  c.kind = "cosine";
  if (expected.shape() != actual.shape() || expected.dtype() != actual.dtype()) {
    c.pass = false;
    c.detail = name + ": dtype/shape differ from the expected tensor";
    return c;
  }
  for (int64_t r = 0; row_len > 0 && r * row_len < expected.numel(); ++r) {
    double ee = 0, aa = 0, ea = 0;
    bool finite = true;
    for (int64_t j = r * row_len; j < (r + 1) * row_len; ++j) {
      const double e = expected.value(j), a = actual.value(j);
      finite &= std::isfinite(e) && std::isfinite(a);
      ee += e * e;
      aa += a * a;
      ea += e * a;
    }
    if (!finite) continue;  // NaN / inf agreement is checked element by element
    const double cosine = (ee == 0 && aa == 0) ? 1.0 : (ee == 0 || aa == 0) ? 0.0 : ea / std::sqrt(ee * aa);
    if (cosine < c.min_cosine) {
      c.min_cosine = cosine;
      c.worst_index = r * row_len;
    }
    if (cosine < min_cosine) {
      if (c.mismatches++ == 0)
        c.detail = name + " row " + std::to_string(r) + " (token " + std::to_string(r) + " / heads): cosine " +
                   std::to_string(cosine) + " < " + std::to_string(min_cosine);
      c.pass = false;
    }
  }
  return c;
}

Comparison missing(const std::string& name) {
  Comparison c;
  c.name = name;
  c.kind = "bound";
  c.pass = false;
  c.detail = name + " is missing from the candidate";
  return c;
}

class MlaPrefillFp8Driver final : public OpDriver {
 public:
  const char* name() const override { return kOp; }

  json default_knobs() const override {
    return json{
        {"seq_lens", {9}},
        {"cache_lens", {6}},
        {"num_heads", 3},
        {"nope", 16},
        {"rope", 8},
        {"v", 16},
        {"latent", 80},  // not a multiple of bk: the last activation group and weight-scale column are partial
        {"bn", 24},      // H·(nope+v) = 96 = 4·24, but a block straddles the K and V parts of a head
        {"bk", 32},
        {"page_size", 8},
        {"num_layers", 1},
        {"layer_idx", 0},
        {"freqs_dtype", "bf16"},     // "bf16" or "f32"
        {"max_pos_extra", 3},        // freqs_cis rows past the last new token
        {"cache_offsets", "zero"},   // "zero", "chunked" (in [1, cache_len]), "late" (after the first
                                     // half of the new tokens), or an explicit list
        {"cache_offsets_len", "B"},  // "B" or "B+1" (the extra entry is ignored by the operator)
        {"buffer", "padded"},        // window per sequence: "padded" (to a page multiple, as MAX),
                                     // "exact", "short" (half the rows: the newest tokens fall outside)
        {"scale", nullptr},          // null: 1/sqrt(nope + rope)
        {"epsilon", 1e-6},
        {"nan_codes", "v_last_head"},  // where kv_b_proj's NaN codes 0x7F/0xFF go: "random" (wherever
                                       // the all-codes fill put them), "v_last_head", "k_last_head"
        {"padding_garbage", false},    // gathered rows past the last new token hold NaN / inf
        {"quant_edges", false},        // old rows with values > 1200 and all-zero groups; an all-zero new row
        {"new_row_sigma", 3.0},        // spread of the new tokens' raw latent values
        {"numerics", "max"},           // "max", "deepseek", "deepseek_ue8m0"
        {"gamma_dtype", "bf16"},       // "bf16" or "f32" (f32 needs a deepseek profile)
        {"topk", 0},                   // > 0: topk_indices [T, topk] of random causal positions (and a
                                       // future one, -1 padding, the first query of sequence 0 with none)
    };
  }

  std::vector<CaseSpec> cases() const override {
    return {
        {"single_chunk", "B=1, cache_offsets 0, window padded to a page multiple: causal prefill over prefix + new", json::object()},
        {"exact_window", "window exactly covers the prefix and the new tokens (no padding rows)",
         {{"buffer", "exact"}, {"seq_lens", {7}}, {"cache_lens", {5}}}},
        {"chunked", "cache_offsets > 0: the window starts inside the prefix, B=2",
         {{"cache_offsets", "chunked"}, {"seq_lens", {5, 7}}, {"cache_lens", {12, 20}}}},
        {"late_window", "window starts after the first new tokens: those queries see no key (output 0)",
         {{"cache_offsets", "late"}, {"seq_lens", {6, 5}}, {"cache_lens", {4, 0}}}},
        {"short_window", "window ends before the newest tokens: they attend to the window only",
         {{"buffer", "short"}, {"seq_lens", {8}}, {"cache_lens", {6}}}},
        {"ragged_empty", "B=4 ragged, one sequence without new tokens (its window is still gathered)",
         {{"seq_lens", {4, 0, 6, 1}}, {"cache_lens", {3, 5, 0, 9}}}},
        {"cache_len_zero", "no prefix: every key is a new token",
         {{"seq_lens", {5, 3}}, {"cache_lens", {0, 0}}}},
        {"no_new_tokens", "T = 0: valid, nothing is written",
         {{"seq_lens", {0, 0}}, {"cache_lens", {4, 7}}}},
        {"page_size_5", "non-power-of-two page size, pages shuffled, sentinel columns",
         {{"page_size", 5}, {"seq_lens", {6, 9}}, {"cache_lens", {7, 3}}}},
        {"page_size_1", "one token per page",
         {{"page_size", 1}, {"seq_lens", {4, 3}}, {"cache_lens", {2, 5}}}},
        {"multi_layer", "3 layers, layer_idx 2: the other layers stay untouched",
         {{"num_layers", 3}, {"layer_idx", 2}, {"seq_lens", {5, 4}}, {"cache_lens", {6, 2}}}},
        {"freqs_f32", "freqs_cis in f32 (products no longer exact in f32)",
         {{"freqs_dtype", "f32"}, {"seq_lens", {6, 3}}, {"cache_lens", {5, 11}}}},
        {"cache_offsets_b_plus_1", "cache_offsets given as [B+1] with a garbage last entry",
         {{"cache_offsets_len", "B+1"}, {"cache_offsets", "chunked"}, {"seq_lens", {3, 4}}, {"cache_lens", {5, 6}}}},
        {"nan_codes_random", "kv_b_proj's NaN codes wherever the all-256-codes fill put them",
         {{"nan_codes", "random"}, {"seq_lens", {4, 5}}, {"cache_lens", {3, 1}}}},
        {"nan_codes_k_part", "NaN codes in the K part of the last head: that head's output is all NaN",
         {{"nan_codes", "k_last_head"}}},
        {"padding_garbage", "gathered padding rows hold NaN / inf: never attended, never in the output",
         {{"padding_garbage", true}, {"seq_lens", {5, 3}}, {"cache_lens", {2, 9}}}},
        {"quant_edges", "latent values > 1200 (scale clamp), all-zero groups (sa = 0), an all-zero new row",
         {{"quant_edges", true}, {"seq_lens", {4}}, {"cache_lens", {12}}}},
        {"large_blocks", "bn, bk larger than the matrix: one partial scale block",
         {{"bn", 128}, {"bk", 128}}},
        {"unit_blocks", "bn = bk = 1: a scale per weight element, one activation value per group",
         {{"bn", 1}, {"bk", 1}, {"seq_lens", {3}}, {"cache_lens", {4}}}},
        {"sharp_softmax", "scale 2 and epsilon 0.5: peaked softmax, epsilon matters",
         {{"scale", 2.0}, {"epsilon", 0.5}}},
        {"minimal_dims", "H=1, rope=2, nope=v=8",
         {{"num_heads", 1}, {"nope", 8}, {"rope", 2}, {"v", 8}, {"seq_lens", {4}}, {"cache_lens", {3}}}},
        {"wide_v_long_rows", "v = 136 (two column chunks of a GPU block, the second partial), 70 new tokens after 60 "
                             "cached: several key tiles per query row, a query tile split across them",
         {{"num_heads", 2}, {"nope", 16}, {"rope", 8}, {"v", 136}, {"seq_lens", {70}}, {"cache_lens", {60}}}},
        {"numerics_deepseek", "deepseek profile: one-rounding RMSNorm, amax floor 1e-4 and x / sa codes, bf16 weights",
         {{"numerics", "deepseek"}, {"seq_lens", {6, 4}}, {"cache_lens", {5, 9}}}},
        {"numerics_deepseek_quant_edges", "deepseek profile with values > 1200 (no cap) and all-zero groups (floor)",
         {{"numerics", "deepseek"}, {"quant_edges", true}, {"seq_lens", {4}}, {"cache_lens", {12}}}},
        {"numerics_ue8m0_f32_gamma", "deepseek_ue8m0 (power-of-two scales) with an f32 norm weight, chunked windows",
         {{"numerics", "deepseek_ue8m0"}, {"gamma_dtype", "f32"}, {"quant_edges", true}, {"cache_offsets", "chunked"},
          {"seq_lens", {5, 7}}, {"cache_lens", {12, 20}}}},
        {"numerics_ue8m0_sharp", "deepseek_ue8m0, scale 2: peaked weights where bf16 rounding of P matters most",
         {{"numerics", "deepseek_ue8m0"}, {"scale", 2.0}, {"seq_lens", {9}}, {"cache_lens", {7}}}},
        {"topk_indices", "topk_indices of 6 (random causal positions, a future one, -1; one query with none)",
         {{"topk", 6}, {"seq_lens", {7, 5}}, {"cache_lens", {9, 3}}}},
        {"topk_indices_chunked", "topk_indices with windows inside the prefix: positions below the window select nothing",
         {{"topk", 5}, {"cache_offsets", "chunked"}, {"seq_lens", {6, 4}}, {"cache_lens", {12, 20}}}},
        {"topk_indices_ue8m0", "DeepSeek-V3.2 prefill: deepseek_ue8m0 with topk_indices, 2 heads, long rows",
         {{"numerics", "deepseek_ue8m0"}, {"topk", 24}, {"num_heads", 2}, {"nope", 16}, {"rope", 8}, {"v", 24},
          {"seq_lens", {70}}, {"cache_lens", {150}}}},
        {"topk_indices_scale_zero", "topk_indices with scale 0: uniform weights over exactly the listed keys",
         {{"topk", 4}, {"scale", 0.0}, {"seq_lens", {6, 5}}, {"cache_lens", {130, 3}}}},
        {"topk_indices_negative_scale", "topk_indices with a negative scale (masked keys must still weigh 0)",
         {{"topk", 7}, {"scale", -0.3}, {"numerics", "deepseek"}, {"seq_lens", {6, 5}}, {"cache_lens", {130, 3}}}},
        {"topk_indices_wide", "top_k above every query's position: all causal keys selected (as without the mask)",
         {{"topk", 64}, {"seq_lens", {5, 3}}, {"cache_lens", {4, 6}}}},
        {"deepseek_dims", "DeepSeek dimensions (nope 128, rope 64, v 128, latent 512, bn=bk=128, page 64), few tokens",
         {{"num_heads", 2}, {"nope", 128}, {"rope", 64}, {"v", 128}, {"latent", 512}, {"bn", 128}, {"bk", 128},
          {"page_size", 64}, {"seq_lens", {3, 2}}, {"cache_lens", {2, 5}}}},
    };
  }

  CaseSpec default_case() const override {
    return {"deepseek_tp8", "DeepSeek-V3 at TP 8 (H=16), one sequence: 24 cached + 40 new tokens, page 64",
            {{"num_heads", 16}, {"nope", 128}, {"rope", 64}, {"v", 128}, {"latent", 512}, {"bn", 128}, {"bk", 128},
             {"page_size", 64}, {"seq_lens", {40}}, {"cache_lens", {24}}}};
  }

  std::vector<CaseSpec> bench_cases() const override {
    std::vector<CaseSpec> v;
    const json dims = {{"nope", 128}, {"rope", 64}, {"v", 128}, {"latent", 512}, {"bn", 128}, {"bk", 128}};
    struct Shape {
      const char* name;
      std::vector<int64_t> seq, cache;
    };
    const Shape shapes[] = {{"b1_s1024_c0", {1024}, {0}},
                            {"b1_s1024_c4096", {1024}, {4096}},
                            {"b1_s4096_c0", {4096}, {0}},
                            {"b1_s4096_c4096", {4096}, {4096}},
                            {"b4_s512_c2048", {512, 512, 512, 512}, {2048, 2048, 2048, 2048}}};
    for (int64_t heads : {128, 16}) {
      for (const auto& s : shapes) {
        json k = dims;
        k["num_heads"] = heads;
        k["page_size"] = 64;
        k["seq_lens"] = s.seq;
        k["cache_lens"] = s.cache;
        v.push_back({"h" + std::to_string(heads) + "_" + s.name, "DeepSeek-V3 dimensions, page 64", k});
      }
    }
    json k = dims;
    k["num_heads"] = 128;
    k["page_size"] = 128;
    k["seq_lens"] = {4096};
    k["cache_lens"] = {4096};
    v.push_back({"h128_b1_s4096_c4096_page128", "DeepSeek-V3 dimensions, page 128", k});
    // DeepSeek-V3.2's own numerics, then its prefill over the indexer's 2048 keys per query.
    json ds = v[8].knobs;  // h16_b1_s4096_c4096
    ds["numerics"] = "deepseek_ue8m0";
    v.push_back({"h16_b1_s4096_c4096_ue8m0", "DeepSeek-V3.2 numerics (deepseek_ue8m0), H=16, page 64", ds});
    ds["topk"] = 2048;
    v.push_back({"h16_b1_s4096_c4096_ue8m0_topk2048", "DeepSeek-V3.2 prefill: ue8m0 and topk_indices of 2048", ds});
    return v;
  }

  Bundle generate(const json& overrides, std::uint64_t seed) const override {
    json k;
    std::string why;
    if (!merge_knobs(default_knobs(), overrides, &k, &why)) throw InputError("mla_prefill_fp8: " + why);
    Rng rng(seed);
    const std::vector<int64_t> seq = int_list(k["seq_lens"], "seq_lens"), cache_len = int_list(k["cache_lens"], "cache_lens");
    if (seq.size() != cache_len.size())
      throw InputError("mla_prefill_fp8: seq_lens and cache_lens differ in length");
    const int64_t B = static_cast<int64_t>(seq.size());
    const int64_t H = k["num_heads"], nope = k["nope"], rope = k["rope"], v = k["v"], latent = k["latent"];
    const int64_t bn = k["bn"], bk = k["bk"], ps = k["page_size"], layers = k["num_layers"], layer = k["layer_idx"];
    const int64_t qk = nope + rope, hs = latent + rope, N = H * (nope + v);
    int64_t T = 0;
    for (int64_t s : seq) T += s;

    // Windows: cache_offsets[b] and the number of buffer rows of each sequence.
    std::vector<int64_t> offsets(static_cast<std::size_t>(B)), window(static_cast<std::size_t>(B));
    const json& co = k["cache_offsets"];
    for (int64_t b = 0; b < B; ++b) {
      const std::size_t i = static_cast<std::size_t>(b);
      if (co.is_array()) offsets[i] = co.at(i).get<int64_t>();
      else if (co == "zero") offsets[i] = 0;
      else if (co == "chunked") offsets[i] = cache_len[i] > 0 ? rng.integer(1, cache_len[i]) : 0;
      else if (co == "late") offsets[i] = cache_len[i] + (seq[i] + 1) / 2;
      else throw InputError("mla_prefill_fp8: cache_offsets must be zero, chunked, late or a list");
      const int64_t span = std::max<int64_t>(0, cache_len[i] + seq[i] - offsets[i]);
      const std::string mode = k["buffer"];
      if (mode == "padded") window[i] = (span + ps - 1) / ps * ps;
      else if (mode == "exact") window[i] = span;
      else if (mode == "short") window[i] = span / 2;
      else throw InputError("mla_prefill_fp8: buffer must be padded, exact or short");
    }
    std::vector<int64_t> needed(static_cast<std::size_t>(B));
    int64_t max_pos = 0;
    for (std::size_t i = 0; i < needed.size(); ++i) {
      needed[i] = std::max(cache_len[i] + seq[i], offsets[i] + window[i]);
      max_pos = std::max(max_pos, cache_len[i] + seq[i]);
    }
    max_pos += k["max_pos_extra"].get<int64_t>();

    Bundle b;
    b.op = name();
    Tensor& q = b.add("q", DType::bf16, {T, H, qk});
    fill_normal(q, rng, 1.0);
    make_row_offsets(b, "input_row_offsets", seq);

    const bool f32_freqs = k["freqs_dtype"] == "f32";
    if (!f32_freqs && k["freqs_dtype"] != "bf16") throw InputError("mla_prefill_fp8: freqs_dtype must be bf16 or f32");
    Tensor& freqs = b.add("freqs_cis", f32_freqs ? DType::f32 : DType::bf16, {max_pos, rope});
    for (int64_t pos = 0; pos < max_pos; ++pos) {
      for (int64_t p = 0; p < rope / 2; ++p) {
        const double theta = static_cast<double>(pos) * std::pow(10000.0, -2.0 * static_cast<double>(p) / static_cast<double>(rope));
        const float c = static_cast<float>(std::cos(theta)), s = static_cast<float>(std::sin(theta));
        if (f32_freqs) {
          freqs.data<float>()[pos * rope + 2 * p] = c;
          freqs.data<float>()[pos * rope + 2 * p + 1] = s;
        } else {
          freqs.data<std::uint16_t>()[pos * rope + 2 * p] = f32_to_bf16(c);
          freqs.data<std::uint16_t>()[pos * rope + 2 * p + 1] = f32_to_bf16(s);
        }
      }
    }
    const std::string numerics = k["numerics"];
    if (numerics != "max" && numerics != "deepseek" && numerics != "deepseek_ue8m0")
      throw InputError("mla_prefill_fp8: numerics must be max, deepseek or deepseek_ue8m0");
    const bool f32_gamma = k["gamma_dtype"] == "f32";
    if (!f32_gamma && k["gamma_dtype"] != "bf16") throw InputError("mla_prefill_fp8: gamma_dtype must be bf16 or f32");
    if (f32_gamma && numerics == "max") throw InputError("mla_prefill_fp8: gamma_dtype f32 needs a deepseek numerics profile");
    Tensor& gamma = b.add("kv_norm_gamma", f32_gamma ? DType::f32 : DType::bf16, {latent});
    fill_uniform(gamma, rng, 0.25, 1.75);

    CacheLayout layout;
    layout.page_size = ps;
    layout.kv_dim = 1;
    layout.num_layers = layers;
    layout.num_kv_heads = 1;
    layout.head_size = hs;
    layout.dtype = DType::bf16;
    make_paged_cache(b, "kv_cache", layout, cache_len, needed, rng);
    Tensor& blocks = b.at("kv_cache.blocks");
    fill_normal(blocks, rng, 1.0);  // every row of every layer, read or not
    const Tensor& lut = b.at("kv_cache.lookup_table");
    const int64_t cols = lut.shape()[1];
    auto row_of = [&](int64_t s, int64_t pos) {
      const int64_t blk = lut.data<std::uint32_t>()[s * cols + pos / ps];
      return blocks.data<std::uint16_t>() + ((blk * layers + layer) * ps + pos % ps) * hs;
    };
    const double new_sigma = k["new_row_sigma"].get<double>();
    for (int64_t s = 0; s < B; ++s)
      for (int64_t pos = cache_len[s]; pos < cache_len[s] + seq[s]; ++pos)
        for (int64_t e = 0; e < latent; ++e) row_of(s, pos)[e] = f32_to_bf16(static_cast<float>(new_sigma * rng.normal()));
    if (k["quant_edges"].get<bool>()) {
      for (int64_t s = 0; s < B; ++s) {
        for (int64_t pos = offsets[s]; pos < std::min(cache_len[s], offsets[s] + window[s]); ++pos) {
          std::uint16_t* row = row_of(s, pos);
          if (pos % 3 == 0) {  // an outlier past the 1200 cap, and one just below it
            row[rng.integer(0, latent - 1)] = f32_to_bf16(static_cast<float>(rng.uniform(1500, 3000) * (pos % 2 ? -1 : 1)));
            row[rng.integer(0, latent - 1)] = f32_to_bf16(1100.0f);
          } else if (pos % 3 == 1) {  // one all-zero activation group
            const int64_t g = rng.integer(0, (latent + bk - 1) / bk - 1);
            for (int64_t e = g * bk; e < std::min(latent, (g + 1) * bk); ++e) row[e] = 0;
          }
        }
        if (seq[s] > 0) std::fill(row_of(s, cache_len[s]), row_of(s, cache_len[s]) + latent, std::uint16_t{0});
      }
    }
    if (k["padding_garbage"].get<bool>()) {
      static const std::uint16_t kGarbage[] = {0x7FC0, 0x7F80, 0xFF80, 0xFFC1};
      for (int64_t s = 0; s < B; ++s)
        for (int64_t pos = std::max(offsets[s], cache_len[s] + seq[s]); pos < offsets[s] + window[s]; ++pos)
          for (int64_t e = 0; e < hs; ++e) row_of(s, pos)[e] = kGarbage[(pos + e) % 4];
    }

    make_row_offsets(b, "buffer_row_offsets", window);
    const bool extra = k["cache_offsets_len"] == "B+1";
    if (!extra && k["cache_offsets_len"] != "B") throw InputError("mla_prefill_fp8: cache_offsets_len must be B or B+1");
    Tensor& co_t = b.add("cache_offsets", DType::u32, {B + (extra ? 1 : 0)});
    for (int64_t s = 0; s < B; ++s) co_t.data<std::uint32_t>()[s] = static_cast<std::uint32_t>(offsets[s]);
    if (extra) co_t.data<std::uint32_t>()[B] = 0xFFFFFFF0u;  // ignored

    Tensor& w = b.add("kv_b_proj", DType::f8e4m3, {N, latent});
    fill_fp8(w, rng, 1.0, w.numel() >= 256);
    const std::string nan_mode = k["nan_codes"];
    if (nan_mode != "random") {
      if (nan_mode != "v_last_head" && nan_mode != "k_last_head")
        throw InputError("mla_prefill_fp8: nan_codes must be random, v_last_head or k_last_head");
      // Move the NaN codes (swapping, so every code stays present) into two rows of the last head.
      const int64_t part = nan_mode == "v_last_head" ? nope : 0, part_rows = nan_mode == "v_last_head" ? v : nope;
      const int64_t col = rng.integer(0, latent - 1);
      for (int i = 0; i < 2; ++i) {
        const std::uint8_t code = i == 0 ? 0x7F : 0xFF;
        auto* data = w.data<std::uint8_t>();
        const int64_t target = ((H - 1) * (nope + v) + part + std::min<int64_t>(i, part_rows - 1)) * latent + (col + i) % latent;
        for (int64_t e = 0; e < w.numel(); ++e)
          if (data[e] == code) {
            std::swap(data[e], data[target]);
            break;
          }
      }
    }
    Tensor& ws = b.add("kv_b_proj_scale", DType::f32, {(N + bn - 1) / bn, (latent + bk - 1) / bk});
    fill_uniform(ws, rng, 0.5 / std::sqrt(static_cast<double>(latent)), 1.5 / std::sqrt(static_cast<double>(latent)));

    const float scale = k["scale"].is_null() ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(qk)))
                                             : static_cast<float>(k["scale"].get<double>());
    int64_t buffer_length = 0;
    for (int64_t x : window) buffer_length += x;

    const int64_t top_k = k["topk"].get<int64_t>();
    if (top_k < 0) throw InputError("mla_prefill_fp8: topk must be >= 0");
    if (top_k > 0) {
      // Per query: distinct random positions of its sequence up to its own (some below the window
      // when cache_offsets > 0), one future position (never visible), the rest -1.
      Tensor& idx = b.add("topk_indices", DType::i32, {T, top_k});
      std::fill_n(idx.data<std::int32_t>(), idx.numel(), -1);
      int64_t t = 0;
      for (int64_t s = 0; s < B; ++s)
        for (int64_t i = 0; i < seq[s]; ++i, ++t) {
          if (s == 0 && i == 0) continue;  // a query that selects nothing: output 0
          const int64_t pos = cache_len[s] + i;
          std::vector<int64_t> pool(static_cast<std::size_t>(pos + 1));
          for (int64_t p = 0; p <= pos; ++p) pool[p] = p;
          const int64_t want = std::min<int64_t>(top_k - 1, pos + 1);
          for (int64_t e = 0; e < want; ++e) {
            std::swap(pool[e], pool[rng.integer(e, pos)]);
            idx.data<std::int32_t>()[t * top_k + e] = static_cast<std::int32_t>(pool[e]);
          }
          idx.data<std::int32_t>()[t * top_k + want] = static_cast<std::int32_t>(pos + 1 + rng.integer(0, 3));
        }
    }
    b.params = json{{"num_heads", H},
                    {"nope", nope},
                    {"rope", rope},
                    {"v", v},
                    {"latent", latent},
                    {"bn", bn},
                    {"bk", bk},
                    {"scale", static_cast<double>(scale)},
                    {"epsilon", static_cast<double>(static_cast<float>(k["epsilon"].get<double>()))},
                    {"buffer_length", buffer_length},
                    {"layer_idx", layer},
                    {"page_size", ps}};
    if (numerics != "max") b.params["numerics"] = numerics;
    return b;
  }

  void check_inputs(const Bundle& b) const override {
    check_tensors(kOp, b, kTensors);
    ParamReader(kOp, b.params, kParams).agrees("page_size", b.at("kv_cache.blocks").shape()[3], "kv_cache.blocks.shape[3]");
  }

  void prepare_outputs(Bundle& b) const override {
    check_inputs(b);
    b.remove_outputs();
    const MlaPrefillFp8Desc d = desc_from_params(b.params);
    b.add("out.output", DType::bf16, {b.at("q").shape()[0], d.num_heads, d.v}).poison();
    b.copy_to_output("q");
    b.copy_to_output("kv_cache.blocks");
  }

  Status validate(const Bundle& b) const override {
    MemorySpace space;
    return core::validate_mla_prefill_fp8(desc_from_params(b.params),
                                          args_from_bundle(b, "out.q", "out.kv_cache.blocks", b.at("out.output")), &space);
  }

  Status call(Bundle& b, const RunOptions& options) const override {
    const MlaPrefillFp8Desc d = desc_from_params(b.params);
    const MlaPrefillFp8Args a = args_from_bundle(b, "out.q", "out.kv_cache.blocks", b.at("out.output"));
    return mla_prefill_fp8(d, a, options);
  }

  Status call_planned(Bundle& b, PlannedRun* pr) const override {
    return plan_and_run(desc_from_params(b.params),
                        args_from_bundle(b, "out.q", "out.kv_cache.blocks", b.at("out.output")), pr);
  }

  Status plan(const Bundle& b, const PlanOptions& options, std::unique_ptr<PlannedCall>* out) const override {
    return make_planned_call(
        desc_from_params(b.params), b,
        [](const Bundle& r) { return args_from_bundle(r, "out.q", "out.kv_cache.blocks", r.at("out.output")); },
        options, out);
  }

  // Derivation (docs/mla_prefill_fp8.md §6), for a back-end computing in f32 against the f64 reference:
  //
  // out.q / out.kv_cache.blocks. Elements the call does not write (q's nope part, every cache row
  //   but the new tokens' rows in layer_idx, other layers, spare blocks) must be bit-identical.
  //   RoPE: y0 = x0·c - x1·s in f32 carries at most 2^-24·(|x0·c| + |x1·s|) from the two products
  //   and the difference, times 2 for an FMA-less or reordered evaluation: rope_product_eps = 2^-23;
  //   its bf16 rounding then lands at most one bf16 step from the reference's single rounding.
  //   RMSNorm: an f32 r = 1/sqrt(mean(x²)+eps) is off by ~latent·2^-25 relative, so y = bf16(x·r)
  //   may round to the neighbouring bf16 value (1 step of y, < 2^-7 relative); y·gamma then differs
  //   by less than two steps of the result before its rounding, and rounding both keeps the results
  //   within 2 bf16 steps: latent_ulps = 2. (One step = spacing at max(|candidate|, |reference|).)
  //
  // out.output. The FP8 quantization turns a one-step change of a normalized latent value into a
  //   different code, which moves KV by up to an FP8 step (2^-3 relative) - no fixed tolerance can
  //   absorb that. So the reference re-runs steps 3-7 on the candidate's own q and cache (identical
  //   codes by construction) and derives a per-element bound for an f32 back-end:
  //   - KV accumulated in f32 over latent products, times sa·w_s per group, summed over groups:
  //     kv_eps = 2·(latent + groups + 4)·2^-24 of Σ|x·W|. A KV element whose exact value lies within
  //     that distance of a bf16 rounding boundary may round either way: it counts one bf16 step.
  //   - Scores q·k over nope+rope terms, times scale: score_eps = 2·(nope + rope + 4)·2^-24 of
  //     |scale|·Σ|q·k|, plus the row maximum's share (exp(s - max) inherits both errors); score errors
  //     up to Δ move each softmax weight by at most a factor exp(±2Δ).
  //   - exp, the running sums and the normalization in f32: (4·keys + 64)·2^-24 of Σ_j p_j·|V_jd|.
  //   - plus one bf16 step for the final rounding of each side (out_ulps = 1).
  //   Row cosine >= 1 - 2^-10: an error of two bf16 steps (2^-6 relative) in every element leaves the
  //   cosine above 1 - 2^-13; 2^-10 keeps 8x margin and still rejects a wrong head, mask or scale block.
  json tolerance(const Bundle& b) const override {
    const MlaPrefillFp8Desc d = desc_from_params(b.params);
    const double groups = static_cast<double>((d.latent + d.bk - 1) / d.bk);
    json t{
        {"out.q",
         {{"untouched", "exact"},
          {"rope_ulps", 1},
          {"rope_product_eps", 2 * kU},
          {"reason", "rope part rotated in f32 may land one bf16 step from the f64 reference (plus 2^-23 of "
                     "|x0·c|+|x1·s| under cancellation); the nope part is not written"}}},
        {"out.kv_cache.blocks",
         {{"untouched", "exact"},
          {"latent_ulps", 2},
          {"rope_ulps", 1},
          {"rope_product_eps", 2 * kU},
          {"reason", "new tokens' rows: RMSNorm with an f32 r rounds twice (x·r, then ·gamma): 2 bf16 steps; "
                     "RoPE as for q; every other element is not written"}}},
        {"out.output",
         {{"out_ulps", 1},
          {"kv_eps", 2 * (static_cast<double>(d.latent) + groups + 4) * kU},
          {"score_eps", 2 * static_cast<double>(d.nope + d.rope + 4) * kU},
          {"softmax_eps_per_key", 4 * kU},
          {"softmax_eps_fixed", 64 * kU},
          {"min_cosine", 1 - 0x1p-10},
          {"rebase", "steps 3-7 of the reference are re-run on the candidate's out.q and out.kv_cache.blocks "
                     "(FP8 codes of a one-step-different latent value differ)"},
          {"reason", "per element: one bf16 step + the f32 error of KV (kv_eps·Σ|x·W|, a KV element near a "
                     "rounding boundary counts one bf16 step), of the scores (score_eps, through exp(±2Δ)) "
                     "and of the softmax sums; each (token, head) row by cosine"}}},
    };
    if (d.numerics != MlaNumerics::max)
      t["out.output"]["reason"] = t["out.output"]["reason"].get<std::string>() +
                                  ". deepseek profile: a softmax weight near a bf16 rounding boundary may round either "
                                  "way, its bf16 step times |V| joins the bound";
    return t;
  }

  std::vector<Comparison> compare(const Bundle& expected, const Bundle& candidate) const override {
    const json tol = tolerance(expected);
    std::vector<Comparison> out;
    const TouchedMap touched = touched_map(expected);

    // out.q
    bool q_ok = candidate.has("out.q");
    if (!q_ok) {
      out.push_back(missing("out.q"));
    } else {
      const Tensor& e = expected.at("out.q");
      const Tensor& a = candidate.at("out.q");
      const double eps = tol["out.q"]["rope_product_eps"].get<double>();
      std::vector<double> bound(static_cast<std::size_t>(e.numel()), 0.0);
      if (a.shape() == e.shape())
        for (int64_t i = 0; i < e.numel(); ++i)
          if (touched.q_products[i] >= 0)
            bound[i] = bf16_step(std::max(std::fabs(e.value(i)), std::fabs(a.value(i)))) + eps * touched.q_products[i];
      out.push_back(compare_bound("out.q", e, a, bound));
      q_ok = out.back().pass;
    }
    // out.kv_cache.blocks
    bool cache_ok = candidate.has("out.kv_cache.blocks");
    if (!cache_ok) {
      out.push_back(missing("out.kv_cache.blocks"));
    } else {
      const Tensor& e = expected.at("out.kv_cache.blocks");
      const Tensor& a = candidate.at("out.kv_cache.blocks");
      const double eps = tol["out.kv_cache.blocks"]["rope_product_eps"].get<double>();
      const double latent_ulps = tol["out.kv_cache.blocks"]["latent_ulps"].get<double>();
      std::vector<double> bound(static_cast<std::size_t>(e.numel()), 0.0);
      if (a.shape() == e.shape())
        for (int64_t i = 0; i < e.numel(); ++i) {
          if (touched.cache_kind[i] == 0) continue;
          const double step = bf16_step(std::max(std::fabs(e.value(i)), std::fabs(a.value(i))));
          bound[i] = touched.cache_kind[i] == 1 ? latent_ulps * step : step + eps * touched.cache_products[i];
        }
      out.push_back(compare_bound("out.kv_cache.blocks", e, a, bound));
      cache_ok = out.back().pass;
    }
    // out.output
    if (!candidate.has("out.output")) {
      out.push_back(missing("out.output"));
      return out;
    }
    const Tensor& actual = candidate.at("out.output");
    const Tensor& golden = expected.at("out.output");
    const bool same_inputs = candidate.has("out.q") && candidate.has("out.kv_cache.blocks") &&
                             candidate.at("out.q").same_bytes(expected.at("out.q")) &&
                             candidate.at("out.kv_cache.blocks").same_bytes(expected.at("out.kv_cache.blocks"));
    // Re-run steps 3-7 on the candidate's q and cache when they are usable (else on the expected ones).
    const bool rebase = !same_inputs && q_ok && cache_ok;
    Bundle base = expected;
    if (rebase) {
      base.tensors["out.q"] = candidate.at("out.q");
      base.tensors["out.kv_cache.blocks"] = candidate.at("out.kv_cache.blocks");
    }
    const MlaPrefillFp8Desc d = desc_from_params(expected.params);
    Tensor rebased(DType::bf16, golden.shape());
    std::vector<double> bound(static_cast<std::size_t>(golden.numel()), 0.0);
    reference::MlaPrefillFp8BoundModel model;
    const json& to = tol["out.output"];
    model.kv_eps = to["kv_eps"].get<double>();
    model.score_eps = to["score_eps"].get<double>();
    model.softmax_eps_per_key = to["softmax_eps_per_key"].get<double>();
    model.softmax_eps_fixed = to["softmax_eps_fixed"].get<double>();
    const MlaPrefillFp8Args args = args_from_bundle(base, "out.q", "out.kv_cache.blocks", rebased);
    reference::mla_prefill_fp8_attention(d, args, &model, bound.data());
    const Tensor& reference_out = rebase ? rebased : golden;
    const double out_ulps = to["out_ulps"].get<double>();
    if (actual.shape() == golden.shape())
      for (int64_t i = 0; i < golden.numel(); ++i)
        bound[i] += out_ulps * bf16_step(std::max(std::fabs(reference_out.value(i)), std::fabs(actual.value(i))));
    out.push_back(compare_bound("out.output", reference_out, actual, bound));
    if (rebase) out.back().detail += out.back().detail.empty() ? "" : " (reference re-run on the candidate's q and cache)";
    out.push_back(compare_rows_cosine("out.output", reference_out, actual, d.v, to["min_cosine"].get<double>()));
    return out;
  }

  Work work(const Bundle& b) const override {
    const MlaPrefillFp8Desc d = desc_from_params(b.params);
    const Tensor& iro = b.at("input_row_offsets");
    const Tensor& bro = b.at("buffer_row_offsets");
    const Tensor& co = b.at("cache_offsets");
    const Tensor& lens = b.at("kv_cache.cache_lengths");
    const double H = static_cast<double>(d.num_heads);
    const double N = H * static_cast<double>(d.nope + d.v);
    const double BL = static_cast<double>(param_integer(b, "buffer_length"));
    const double T = static_cast<double>(b.at("q").shape()[0]);
    // (query, key) pairs attended: the causal window, or with topk_indices the distinct listed
    // positions inside it.
    const Tensor* topk = b.has("topk_indices") ? &b.at("topk_indices") : nullptr;
    std::vector<char> listed;
    double pairs = 0;
    for (int64_t s = 0; s + 1 < iro.numel(); ++s) {
      const int64_t window = static_cast<int64_t>(u32(bro, s + 1)) - u32(bro, s);
      for (int64_t i = 0; i < static_cast<int64_t>(u32(iro, s + 1)) - u32(iro, s); ++i) {
        const int64_t pos = static_cast<int64_t>(u32(lens, s)) + i;
        const int64_t causal = std::clamp<int64_t>(pos - u32(co, s) + 1, 0, window);
        if (topk == nullptr) {
          pairs += static_cast<double>(causal);
          continue;
        }
        listed.assign(static_cast<std::size_t>(causal), 0);
        const int64_t k = topk->shape()[1], t = static_cast<int64_t>(u32(iro, s)) + i;
        for (int64_t e = 0; e < k; ++e) {
          const int64_t j = static_cast<int64_t>(topk->data<std::int32_t>()[t * k + e]) - u32(co, s);
          if (topk->data<std::int32_t>()[t * k + e] >= 0 && j >= 0 && j < causal && !listed[j]) {
            listed[j] = 1;
            pairs += 1;
          }
        }
      }
    }
    Work w;
    w.flops = 2 * BL * static_cast<double>(d.latent) * N + 2 * H * static_cast<double>(d.nope + d.rope + d.v) * pairs;
    const double row_bytes = 2.0 * static_cast<double>(d.latent + d.rope);
    w.bytes = 2 * T * H * static_cast<double>(d.nope + d.rope) * 2  // q read + written
              + BL * row_bytes + T * row_bytes                      // gathered rows, new rows written
              + N * static_cast<double>(d.latent)                   // kv_b_proj
              + static_cast<double>(b.at("kv_b_proj_scale").nbytes()) + T * H * static_cast<double>(d.v) * 2;
    return w;
  }
};

const MlaPrefillFp8Driver kDriver;
[[maybe_unused]] const bool kRegistered = register_driver(&kDriver);

}  // namespace
}  // namespace mlakit::goldens
