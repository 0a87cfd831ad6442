// Driver of fused_qkv_paged (docs/fused_qkv_paged.md): case generator, golden matrix, run, tolerance, comparison.
#include "goldens/fused_qkv_paged.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/validators.hpp"
#include "goldens/common/driver.hpp"
#include "goldens/common/params.hpp"
#include "goldens/common/random.hpp"
#include "mlakit/ops/fused_qkv_paged.hpp"

namespace mlakit::goldens {
namespace {

constexpr const char* kName = "fused_qkv_paged";

// Tolerance constants (docs/fused_qkv_paged.md §6). A back-end accumulates the K products in f32: each partial
// sum rounds by at most 2^-24 relative, and an f32 product of two f32 numbers (or code·scale) rounds
// once more, so c = 4 covers K·(1 + 1 + slack). The output rounding is counted for both the
// reference and the candidate (u_out·(|ref| + |out|)): two correct roundings of nearly equal sums
// that sit on either side of a tie differ by one ulp, which u_out·|ref| alone does not cover.
constexpr double kC = 4.0;
constexpr double kUnitRoundoffBf16 = 0x1.0p-8;
constexpr double kUnitRoundoffF32 = 0x1.0p-24;

DType parse_dtype(const std::string& s) {
  if (s == "bf16") return DType::bf16;
  if (s == "f32") return DType::f32;
  throw InputError(std::string(kName) + ": dtype '" + s + "' (expected bf16 or f32)");
}

WeightFormat parse_format(const std::string& s) {
  if (s == "dense") return WeightFormat::dense;
  if (s == "fp8_block") return WeightFormat::fp8_block;
  if (s == "gptq") return WeightFormat::gptq;
  throw InputError(std::string(kName) + ": weight_format '" + s + "' (expected dense, fp8_block or gptq)");
}

// The params of a golden file (docs/golden-format.md §4). group_size and has_zp belong to GPTQ weights: they
// are optional for the other formats, where group_size is ignored and has_zp=true contradicts the
// format. num_kv_heads, head_dim and page_size restate the cache's shape and must agree with it.
constexpr ParamSpec kParams[] = {
    size_param("q_dim"),
    {"weight_format", ParamKind::text, true, 0, 0, "dense|fp8_block|gptq"},
    size_param("group_size", 1, false),
    {"has_zp", ParamKind::boolean, false},
    {"zero_format", ParamKind::text, false, 0, 0, "v2|v1"},
    size_param("num_kv_heads", 1, false),
    size_param("head_dim", 1, false),
    size_param("layer_idx", 0),
    size_param("page_size", 1, false),
};

constexpr TensorSpec kTensors[] = {
    {"hidden_state", 2},         {"input_row_offsets", 1},           {"weight", 2, false},
    {"weight_scale", 2, false},  {"qweight", 2, false},              {"scales", 2, false},
    {"qzeros", 2, false},        {"g_idx", 1, false},                {"kv_cache.blocks", 6},
    {"kv_cache.scales", 6, false}, {"kv_cache.lookup_table", 2},     {"kv_cache.cache_lengths", 1},
    {"out.output", 2, false},    {"out.kv_cache.blocks", 6, false},
};

struct Params {
  FusedQkvPagedDesc desc;
  std::uint32_t layer_idx = 0;
};

Params params_of(const Bundle& b) {
  const ParamReader r(kName, b.params, kParams);
  Params p;
  p.desc.q_dim = r.integer("q_dim");
  p.desc.weight_format = parse_format(r.text("weight_format"));
  if (p.desc.weight_format == WeightFormat::gptq) {
    r.require("group_size", "for weight_format=\"gptq\"");
    r.require("has_zp", "for weight_format=\"gptq\"");
  } else if (r.boolean_or("has_zp", false)) {
    r.contradiction("has_zp", "only weight_format=\"gptq\" has zero points");
  }
  p.desc.group_size = r.integer_or("group_size", 128);
  p.desc.has_zp = r.boolean_or("has_zp", false);
  // v1 checkpoints store each zero point minus one; the library refuses v1 without zero points.
  p.desc.zero_format = r.text_or("zero_format", "v2") == "v1" ? ZeroFormat::v1 : ZeroFormat::v2;
  p.layer_idx = static_cast<std::uint32_t>(r.integer("layer_idx"));
  return p;
}

std::int64_t cache_columns(const Tensor& blocks) {
  return blocks.shape()[1] * blocks.shape()[4] * blocks.shape()[5];
}

// Decodes row n of the bundle's weight into |W[n, 0..K)| (this driver's own decode, used for the
// error bound only).
class AbsWeightRows {
 public:
  AbsWeightRows(const Bundle& b, std::int64_t N, std::int64_t K) : b_(b), N_(N), K_(K) {
    const Params p = params_of(b);
    format_ = p.desc.weight_format;
    gs_ = p.desc.group_size;
    has_zp_ = p.desc.has_zp;
    zero_bias_ = zero_bias(p.desc);
  }

  void row(std::int64_t n, std::vector<double>& out) const {
    out.assign(static_cast<std::size_t>(K_), 0.0);
    if (format_ == WeightFormat::dense) {
      const Tensor& w = b_.at("weight");
      for (std::int64_t k = 0; k < K_; ++k) out[k] = std::fabs(w.value(n * K_ + k));
    } else if (format_ == WeightFormat::fp8_block) {
      const Tensor& w = b_.at("weight");
      const Tensor& s = b_.at("weight_scale");
      const std::int64_t kb = s.shape()[1];
      for (std::int64_t k = 0; k < K_; ++k)
        out[k] = std::fabs(w.value(n * K_ + k) * s.value((n / 128) * kb + k / 128));
    } else {
      const Tensor& qw = b_.at("qweight");
      const Tensor& sc = b_.at("scales");
      const bool gidx = b_.has("g_idx");
      for (std::int64_t k = 0; k < K_; ++k) {
        const std::uint32_t word = static_cast<std::uint32_t>(qw.data<std::int32_t>()[(k / 8) * N_ + n]);
        const int q = static_cast<int>((word >> (4 * (k % 8))) & 15u);
        const std::int64_t g = gidx ? b_.at("g_idx").data<std::int32_t>()[k] : k / gs_;
        int z = 8;
        if (has_zp_) {
          const auto zw = static_cast<std::uint32_t>(b_.at("qzeros").data<std::int32_t>()[g * (N_ / 8) + n / 8]);
          z = static_cast<int>((zw >> (4 * (n % 8))) & 15u) + zero_bias_;
        }
        out[k] = std::fabs(static_cast<double>(round_to_bf16(float(q - z) * static_cast<float>(sc.value(g * N_ + n)))));
      }
    }
  }

 private:
  const Bundle& b_;
  std::int64_t N_, K_;
  WeightFormat format_ = WeightFormat::dense;
  std::int64_t gs_ = 128;
  bool has_zp_ = false;
  int zero_bias_ = 0;
};

Comparison missing(const std::string& name) {
  Comparison c;
  c.name = name;
  c.kind = "bound";
  c.pass = false;
  c.mismatches = 1;
  c.detail = name + ": missing";
  return c;
}

class FusedQkvPagedDriver final : public OpDriver {
 public:
  const char* name() const override { return kName; }

  json default_knobs() const override {
    return json{{"seq_lens", {3, 0, 4}},
                {"cache_lens", {5, 2, 0}},
                {"K", 256},
                {"q_dim", 96},
                {"cache", "ordinary"},  // "ordinary" (K and V heads) or "mla" (one latent head)
                {"num_kv_heads", 2},
                {"head_dim", 32},       // head size; the latent width for an MLA cache
                {"dtype", "bf16"},
                {"weight_format", "dense"},
                {"group_size", 128},
                {"has_zp", false},
                {"zero_format", "v2"},  // "v1": qzeros holds each zero point minus one (AutoGPTQ)
                {"g_idx", false},       // a shuffled act-order map (gptq)
                {"scales_dtype", "f16"},
                {"page_size", 16},
                {"num_layers", 2},
                {"layer_idx", 1}};
  }

  std::vector<CaseSpec> cases() const override {
    const json mla = {{"cache", "mla"}, {"num_kv_heads", 1}};
    auto with = [](json base, const json& more) {
      for (auto it = more.begin(); it != more.end(); ++it) base[it.key()] = it.value();
      return base;
    };
    return {
        {"dense_bf16_prefill", "dense bf16 weight, ordinary cache, ragged prefill with an empty sequence, layer 1 of 2",
         json::object()},
        {"dense_f32_prefill", "dense f32 weight and activations", {{"dtype", "f32"}}},
        {"dense_bf16_decode", "decode: one row per sequence, positions on both sides of a page boundary",
         {{"seq_lens", {1, 1, 1, 1}}, {"cache_lens", {7, 0, 16, 31}}}},
        {"dense_bf16_mla", "MLA cache: one latent head of 72", with(mla, {{"head_dim", 72}, {"q_dim", 48}})},
        {"dense_f32_mla_decode", "MLA cache, f32, decode",
         with(mla, {{"dtype", "f32"}, {"head_dim", 40}, {"seq_lens", {1, 1, 1}}, {"cache_lens", {0, 15, 33}}})},
        {"fp8_bf16_partial_blocks", "fp8 block-scaled, N = K = 200 (partial 128-blocks on both axes), all 256 codes",
         {{"weight_format", "fp8_block"}, {"K", 200}, {"q_dim", 72}}},
        {"fp8_f32_partial_blocks", "fp8 block-scaled with f32 activations, N = 328, K = 136",
         {{"weight_format", "fp8_block"}, {"dtype", "f32"}, {"K", 136}, {"q_dim", 200}}},
        {"fp8_bf16_mla_decode", "fp8 weight into an MLA cache (DeepSeek-style input projection), decode",
         with(mla, {{"weight_format", "fp8_block"}, {"K", 264}, {"q_dim", 130}, {"head_dim", 72},
                    {"seq_lens", {1, 1, 1, 1, 1}}, {"cache_lens", {0, 1, 15, 16, 40}}})},
        {"gptq_bf16_g128_f16", "GPTQ int4, group 128, no zero points (z = 8), f16 scales",
         {{"weight_format", "gptq"}}},
        {"gptq_f32_g64_zp_bf16", "GPTQ with packed zero points, group 64, bf16 scales, f32 activations",
         {{"weight_format", "gptq"}, {"dtype", "f32"}, {"group_size", 64}, {"has_zp", true}, {"scales_dtype", "bf16"}}},
        {"gptq_bf16_g32_gidx", "GPTQ group 32 with a shuffled act-order g_idx",
         {{"weight_format", "gptq"}, {"group_size", 32}, {"g_idx", true}}},
        {"gptq_f32_g128_zp_gidx", "GPTQ with zero points and g_idx, f32",
         {{"weight_format", "gptq"}, {"dtype", "f32"}, {"has_zp", true}, {"g_idx", true}, {"K", 384}}},
        {"gptq_bf16_mla_g64_zp", "GPTQ into an MLA cache, zero points, group 64, bf16 scales",
         with(mla, {{"weight_format", "gptq"}, {"group_size", 64}, {"has_zp", true}, {"scales_dtype", "bf16"},
                    {"q_dim", 64}, {"head_dim", 64}})},
        {"gptq_bf16_g128_zp_v1", "GPTQ v1 zero points (stored z - 1: nibble 15 is zero 16), bf16, group 128",
         {{"weight_format", "gptq"}, {"has_zp", true}, {"zero_format", "v1"}}},
        {"gptq_f32_g32_zp_v1_gidx", "GPTQ v1 zero points with g_idx, f32 activations, group 32, bf16 scales",
         {{"weight_format", "gptq"}, {"dtype", "f32"}, {"group_size", 32}, {"has_zp", true}, {"zero_format", "v1"},
          {"g_idx", true}, {"scales_dtype", "bf16"}}},
        {"gptq_bf16_g32_zp_decode", "GPTQ group 32, zero points, g_idx, decode",
         {{"weight_format", "gptq"}, {"group_size", 32}, {"has_zp", true}, {"g_idx", true},
          {"seq_lens", {1, 1, 1}}, {"cache_lens", {3, 0, 47}}}},
        {"page_size_5", "non-power-of-two page size, multi-page writes, shuffled pages and sentinels",
         {{"page_size", 5}, {"seq_lens", {6, 0, 3, 9}}, {"cache_lens", {4, 3, 0, 11}}}},
        {"page_size_1", "one token per page", {{"page_size", 1}, {"seq_lens", {2, 3}}, {"cache_lens", {1, 0}}}},
        {"cache_len_zero", "every sequence starts at position 0", {{"seq_lens", {5, 2, 7}}, {"cache_lens", {0, 0, 0}}}},
        {"single_layer", "num_layers 1, layer_idx 0", {{"num_layers", 1}, {"layer_idx", 0}}},
        {"layer_2_of_3", "layer_idx 2 of 3: other layers must stay untouched",
         {{"num_layers", 3}, {"layer_idx", 2}, {"weight_format", "fp8_block"}, {"dtype", "f32"}}},
        {"long_sequence", "one sequence spanning many pages, non-power-of-two page size",
         {{"seq_lens", {40}}, {"cache_lens", {13}}, {"page_size", 7}, {"K", 64}, {"head_dim", 16}, {"q_dim", 32}}},
        {"empty_batch", "T = 0: nothing is written", {{"seq_lens", {0, 0}}, {"cache_lens", {3, 0}}}},
        {"empty_batch_gptq", "T = 0 with a GPTQ weight",
         {{"seq_lens", {0}}, {"cache_lens", {0}}, {"weight_format", "gptq"}, {"has_zp", true}}},
    };
  }

  CaseSpec default_case() const override {
    return {"deepseek_v3_mla_fp8",
            "DeepSeek-V3 MLA input projection: K 7168, q_dim 1536, latent 576, fp8 block weight, decode of 4",
            {{"seq_lens", {1, 1, 1, 1}},
             {"cache_lens", {100, 0, 63, 64}},
             {"K", 7168},
             {"q_dim", 1536},
             {"cache", "mla"},
             {"num_kv_heads", 1},
             {"head_dim", 576},
             {"weight_format", "fp8_block"},
             {"page_size", 64},
             {"num_layers", 1},
             {"layer_idx", 0}}};
  }

  std::vector<CaseSpec> bench_cases() const override {
    std::vector<CaseSpec> v;
    const json llama = {{"K", 4096}, {"q_dim", 4096}, {"cache", "ordinary"}, {"num_kv_heads", 8},
                        {"head_dim", 128}, {"page_size", 128}, {"num_layers", 1}, {"layer_idx", 0}};
    const json dsv3 = {{"K", 7168}, {"q_dim", 1536}, {"cache", "mla"}, {"num_kv_heads", 1}, {"head_dim", 576},
                       {"weight_format", "fp8_block"}, {"page_size", 64}, {"num_layers", 1}, {"layer_idx", 0}};
    struct Model {
      const char* name;
      json knobs;
    };
    // T rows: a decode batch (one row per sequence, various cache lengths) up to 32, else a
    // prefill (one sequence up to 512 rows, two of 1024 beyond).
    const auto set_rows = [](json& k, int t) {
      if (t <= 32) {
        std::vector<std::int64_t> seq(t, 1), cache(t);
        for (int i = 0; i < t; ++i) cache[i] = 512 + 37 * i;
        k["seq_lens"] = seq;
        k["cache_lens"] = cache;
      } else {
        k["seq_lens"] = t <= 512 ? std::vector<std::int64_t>{t} : std::vector<std::int64_t>{1024, 1024};
        k["cache_lens"] = t <= 512 ? std::vector<std::int64_t>{0} : std::vector<std::int64_t>{0, 256};
      }
    };
    const Model models[] = {{"llama3_8b_dense", llama},
                            {"llama3_8b_gptq", [&] {
                               json j = llama;
                               j["weight_format"] = "gptq";
                               return j;
                             }()},
                            {"deepseek_v3_mla_fp8", dsv3}};
    for (const Model& m : models) {
      for (int t : {1, 8, 32, 128, 512, 2048}) {
        json k = m.knobs;
        set_rows(k, t);
        v.push_back({std::string(m.name) + "_t" + std::to_string(t),
                     std::string(t <= 32 ? "decode" : "prefill") + ", T = " + std::to_string(t), k});
      }
    }
    // Act-order GPTQ (zero points, a shuffled g_idx), where calls take K in group order: decode
    // sizes and a prefill.
    for (int t : {1, 8, 512}) {
      json k = llama;
      k["weight_format"] = "gptq";
      k["has_zp"] = true;
      k["g_idx"] = true;
      set_rows(k, t);
      v.push_back({"llama3_8b_gptq_zp_gidx_t" + std::to_string(t),
                   std::string(t <= 32 ? "decode" : "prefill") + ", act-order, T = " + std::to_string(t), k});
    }
    return v;
  }

  Bundle generate(const json& overrides, std::uint64_t seed) const override {
    json k;
    std::string why;
    if (!merge_knobs(default_knobs(), overrides, &k, &why)) throw InputError(std::string(kName) + ": " + why);
    const auto seq = k.at("seq_lens").get<std::vector<std::int64_t>>();
    const auto cache_lens = k.at("cache_lens").get<std::vector<std::int64_t>>();
    if (seq.size() != cache_lens.size())
      throw InputError(std::string(kName) + ": seq_lens and cache_lens differ in length");
    const DType dt = parse_dtype(k.at("dtype").get<std::string>());
    const std::string fmt_name = k.at("weight_format").get<std::string>();
    const WeightFormat fmt = parse_format(fmt_name);
    const std::string cache_kind = k.at("cache").get<std::string>();
    if (cache_kind != "ordinary" && cache_kind != "mla")
      throw InputError(std::string(kName) + ": cache '" + cache_kind + "' (expected ordinary or mla)");
    const std::int64_t K = k.at("K").get<std::int64_t>();
    const std::int64_t q_dim = k.at("q_dim").get<std::int64_t>();
    const std::int64_t heads = k.at("num_kv_heads").get<std::int64_t>();
    const std::int64_t hd = k.at("head_dim").get<std::int64_t>();
    const std::int64_t gs = k.at("group_size").get<std::int64_t>();
    const bool has_zp = k.at("has_zp").get<bool>();
    const std::string sdt = k.at("scales_dtype").get<std::string>();
    if (sdt != "f16" && sdt != "bf16")
      throw InputError(std::string(kName) + ": scales_dtype '" + sdt + "' (expected f16 or bf16)");

    Rng rng(seed);
    Bundle b;
    b.op = kName;
    const std::int64_t T = std::accumulate(seq.begin(), seq.end(), std::int64_t{0});
    fill_normal(b.add("hidden_state", dt, {T, K}), rng, 1.0);
    make_row_offsets(b, "input_row_offsets", seq);

    CacheLayout L;
    L.page_size = k.at("page_size").get<std::int64_t>();
    L.kv_dim = cache_kind == "mla" ? 1 : 2;
    L.num_layers = k.at("num_layers").get<std::int64_t>();
    L.num_kv_heads = heads;
    L.head_size = hd;
    L.dtype = dt;
    std::vector<std::int64_t> needed(seq.size());
    for (std::size_t i = 0; i < seq.size(); ++i) needed[i] = cache_lens[i] + seq[i];
    make_paged_cache(b, "kv_cache", L, cache_lens, needed, rng);
    // Random data everywhere: positions, layers and sequences the call must not touch are checked
    // bit for bit afterwards.
    fill_normal(b.at("kv_cache.blocks"), rng, 1.0);

    const std::int64_t N = q_dim + L.kv_dim * heads * hd;
    switch (fmt) {
      case WeightFormat::dense:
        fill_normal(b.add("weight", dt, {N, K}), rng, 1.0 / std::sqrt(double(K)));
        break;
      case WeightFormat::fp8_block: {
        Tensor& w = b.add("weight", DType::f8e4m3, {N, K});
        fill_fp8(w, rng, 24.0, w.numel() >= 256);
        fill_uniform(b.add("weight_scale", DType::f32, {(N + 127) / 128, (K + 127) / 128}), rng, 0x1.0p-12, 0x1.0p-8);
        break;
      }
      case WeightFormat::gptq: {
        if (gs <= 0) throw InputError(std::string(kName) + ": group_size must be > 0");
        const std::int64_t G = K / gs;
        fill_integers(b.add("qweight", DType::i32, {K / 8, N}), rng, INT32_MIN, INT32_MAX);
        fill_uniform(b.add("scales", sdt == "f16" ? DType::f16 : DType::bf16, {G, N}), rng, 0.002, 0.03);
        if (has_zp) fill_integers(b.add("qzeros", DType::i32, {G, N / 8}), rng, INT32_MIN, INT32_MAX);
        if (k.at("g_idx").get<bool>()) {
          // Act order: the channels of each group are scattered over K.
          std::vector<std::int32_t> perm(static_cast<std::size_t>(K));
          std::iota(perm.begin(), perm.end(), 0);
          rng.shuffle(perm);
          Tensor& g = b.add("g_idx", DType::i32, {K});
          for (std::int64_t i = 0; i < K; ++i) g.data<std::int32_t>()[i] = static_cast<std::int32_t>(perm[i] / gs);
        }
        break;
      }
    }
    b.params = json{{"q_dim", q_dim},        {"weight_format", fmt_name}, {"group_size", gs},
                    {"has_zp", has_zp},      {"num_kv_heads", heads},     {"head_dim", hd},
                    {"layer_idx", k.at("layer_idx").get<std::int64_t>()}, {"page_size", L.page_size}};
    if (k.at("zero_format") != "v2") b.params["zero_format"] = k.at("zero_format");
    b.tolerance = tolerance(b);
    return b;
  }

  void check_inputs(const Bundle& b) const override {
    check_tensors(kName, b, kTensors);
    params_of(b);
    const ParamReader r(kName, b.params, kParams);
    const auto& cache = b.at("kv_cache.blocks").shape();
    r.agrees("page_size", cache[3], "kv_cache.blocks.shape[3]");
    r.agrees("num_kv_heads", cache[4], "kv_cache.blocks.shape[4]");
    r.agrees("head_dim", cache[5], "kv_cache.blocks.shape[5]");
    if (r.boolean_or("has_zp", false) && !b.has("qzeros"))
      r.contradiction("has_zp", "zero points need the tensor qzeros, which the file lacks");
  }

  void prepare_outputs(Bundle& b) const override {
    check_inputs(b);
    b.remove_outputs();
    const Tensor& x = b.at("hidden_state");
    b.add("out.output", x.dtype(), {x.shape()[0], params_of(b).desc.q_dim}).poison();
    b.copy_to_output("kv_cache.blocks");
  }

  Status validate(const Bundle& b) const override {
    const Params p = params_of(b);
    MemorySpace space;
    return core::validate_fused_qkv_paged(p.desc, args_of(b, p), &space);
  }

  Status call(Bundle& b, const RunOptions& options) const override {
    const Params p = params_of(b);
    return fused_qkv_paged(p.desc, args_of(b, p), options);
  }

  Status call_planned(Bundle& b, PlannedRun* pr) const override {
    const Params p = params_of(b);
    return plan_and_run(p.desc, args_of(b, p), pr);
  }

  Status plan(const Bundle& b, const PlanOptions& options, std::unique_ptr<PlannedCall>* out) const override {
    return make_planned_call(params_of(b).desc, b, [](const Bundle& r) { return args_of(r, params_of(r)); },
                             options, out);
  }

  static FusedQkvPagedArgs args_of(const Bundle& b, const Params& p) {
    FusedQkvPagedArgs a;
    a.hidden_state = b.at("hidden_state").view();
    a.input_row_offsets = b.at("input_row_offsets").view();
    a.weight = optional_view(b, "weight");
    a.weight_scale = optional_view(b, "weight_scale");
    a.qweight = optional_view(b, "qweight");
    a.scales = optional_view(b, "scales");
    a.qzeros = optional_view(b, "qzeros");
    a.g_idx = optional_view(b, "g_idx");
    a.kv_cache = cache_view(b, "kv_cache", 0, "out.kv_cache.blocks");
    a.layer_idx = p.layer_idx;
    a.output = b.at("out.output").view();
    return a;
  }

  json tolerance(const Bundle& b) const override {
    const Tensor& x = b.at("hidden_state");
    const double u = x.dtype() == DType::bf16 ? kUnitRoundoffBf16 : kUnitRoundoffF32;
    const json bound = {{"bound", "dot"},
                        {"c", kC},
                        {"u_out", u},
                        {"K", x.shape()[1]},
                        {"formula", "|out - ref| <= c*K*2^-24*sum_k|x_k*w_k| + u_out*(|ref| + |out|)"}};
    json cache = bound;
    cache["untouched"] = "exact";  // every element the call does not write equals kv_cache.blocks bit for bit
    return json{{"out.output", bound}, {"out.kv_cache.blocks", cache}};
  }

  std::vector<Comparison> compare(const Bundle& expected, const Bundle& candidate) const override {
    std::vector<Comparison> res;
    const ToleranceReader tol(kName, expected.tolerance, tolerance(expected));
    const double c = tol.number("out.output", "c", 0, 1e6);
    const double u = tol.number("out.output", "u_out", 0, 1);
    const double uc = tol.number("out.kv_cache.blocks", "u_out", 0, 1);
    const double cc = tol.number("out.kv_cache.blocks", "c", 0, 1e6);
    for (const char* n : {"out.output", "out.kv_cache.blocks"}) {
      if (!expected.has(n)) res.push_back(missing(std::string(n) + " (expected)"));
      if (!candidate.has(n)) res.push_back(missing(n));
    }
    if (!res.empty()) return res;

    const Tensor& x = expected.at("hidden_state");
    const Tensor& blocks_in = expected.at("kv_cache.blocks");
    const Tensor& ref_out = expected.at("out.output");
    const Tensor& cand_out = candidate.at("out.output");
    const Tensor& ref_cache = expected.at("out.kv_cache.blocks");
    const Tensor& cand_cache = candidate.at("out.kv_cache.blocks");
    const std::int64_t T = x.shape()[0], K = x.shape()[1];
    const Params p = params_of(expected);
    const std::int64_t q_dim = p.desc.q_dim;
    const std::int64_t layer = p.layer_idx;
    const auto& bs = blocks_in.shape();
    const std::int64_t N = q_dim + cache_columns(blocks_in);
    const std::int64_t nb = bs[0], kvd = bs[1], nl = bs[2], ps = bs[3], hkv = bs[4], hd = bs[5];

    // Σ_k |x[t,k]·w[c,k]| for every (t, c).
    checked_nbytes(DType::f64, {T, N}, std::string(kName) + ": the comparison's bound of out.output");
    std::vector<double> absx(static_cast<std::size_t>(T * K));
    for (std::int64_t i = 0; i < T * K; ++i) absx[i] = std::fabs(x.value(i));
    std::vector<double> sum_abs(static_cast<std::size_t>(T * N), 0.0), wrow;
    const AbsWeightRows weight(expected, N, K);
    for (std::int64_t n = 0; n < N; ++n) {
      weight.row(n, wrow);
      for (std::int64_t t = 0; t < T; ++t) {
        double s = 0;
        for (std::int64_t k = 0; k < K; ++k) s += absx[t * K + k] * wrow[k];
        sum_abs[t * N + n] = s;
      }
    }
    const double dot = std::ldexp(double(K), -24);

    // The Q columns.
    if (ref_out.shape() == cand_out.shape() && ref_out.numel() == T * q_dim) {
      std::vector<double> bound(static_cast<std::size_t>(T * q_dim));
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t j = 0; j < q_dim; ++j) {
          const std::int64_t i = t * q_dim + j;
          bound[i] = c * dot * sum_abs[t * N + j] + u * (std::fabs(ref_out.value(i)) + std::fabs(cand_out.value(i)));
        }
      res.push_back(compare_bound("out.output", ref_out, cand_out, bound));
    } else {
      Comparison bad = missing("out.output");
      bad.detail = "out.output: dtype/shape differ from the expected tensor or from [T, q_dim]";
      res.push_back(bad);
    }

    // The K/V (or latent) columns in the cache; everything else must be untouched.
    for (const Tensor* t : {&ref_cache, &cand_cache}) {
      if (t->dtype() == blocks_in.dtype() && t->shape() == blocks_in.shape()) continue;
      Comparison bad = missing("out.kv_cache.blocks");
      bad.detail = "out.kv_cache.blocks: dtype/shape differ from kv_cache.blocks";
      res.push_back(bad);
      return res;
    }
    std::vector<double> bound(static_cast<std::size_t>(ref_cache.numel()), 0.0);
    std::vector<bool> written(bound.size(), false);
    const Tensor& iro = expected.at("input_row_offsets");
    const Tensor& lut = expected.at("kv_cache.lookup_table");
    const Tensor& lens = expected.at("kv_cache.cache_lengths");
    const std::int64_t B = iro.numel() - 1, max_pages = lut.shape()[1];
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t r0 = iro.data<std::uint32_t>()[b], r1 = iro.data<std::uint32_t>()[b + 1];
      for (std::int64_t t = r0; t < r1; ++t) {
        const std::int64_t pos = std::int64_t(lens.data<std::uint32_t>()[b]) + (t - r0);
        if (pos / ps >= max_pages) continue;
        const std::int64_t blk = lut.data<std::uint32_t>()[b * max_pages + pos / ps];
        if (blk >= nb || layer >= nl) continue;
        for (std::int64_t j = 0; j < N - q_dim; ++j) {
          const std::int64_t kv = j / (hkv * hd), h = (j / hd) % hkv, e = j % hd;
          const std::int64_t i = ((((blk * kvd + kv) * nl + layer) * ps + pos % ps) * hkv + h) * hd + e;
          if (i >= ref_cache.numel()) continue;
          written[i] = true;
          bound[i] = cc * dot * sum_abs[t * N + q_dim + j] +
                     uc * (std::fabs(ref_cache.value(i)) + std::fabs(cand_cache.value(i)));
        }
      }
    }
    res.push_back(compare_bound("out.kv_cache.blocks", ref_cache, cand_cache, bound));

    Comparison untouched;
    untouched.name = "out.kv_cache.blocks (untouched)";
    untouched.kind = "exact";
    const std::size_t es = dtype_size(blocks_in.dtype());
    for (std::int64_t i = 0; i < blocks_in.numel(); ++i) {
      if (written[i] || std::memcmp(blocks_in.bytes() + i * es, cand_cache.bytes() + i * es, es) == 0) continue;
      if (untouched.mismatches++ == 0) {
        untouched.pass = false;
        untouched.worst_index = i;
        untouched.detail = untouched.name + "[" + std::to_string(i) + "]: was " + std::to_string(blocks_in.value(i)) +
                           ", now " + std::to_string(cand_cache.value(i)) + " (an element the call must not write)";
      }
    }
    res.push_back(untouched);
    return res;
  }

  Work work(const Bundle& b) const override {
    const Tensor& x = b.at("hidden_state");
    const Tensor& blocks = b.at("kv_cache.blocks");
    const std::int64_t T = x.shape()[0], K = x.shape()[1];
    const std::int64_t q_dim = params_of(b).desc.q_dim;
    const std::int64_t kv_cols = cache_columns(blocks);
    const double es = double(dtype_size(x.dtype()));
    Work w;
    w.flops = 2.0 * double(T) * double(q_dim + kv_cols) * double(K);
    w.bytes = double(x.nbytes()) + double(T) * double(q_dim + kv_cols) * es;
    for (const char* n : {"input_row_offsets", "weight", "weight_scale", "qweight", "scales", "qzeros", "g_idx",
                          "kv_cache.cache_lengths"})
      if (b.has(n)) w.bytes += double(b.at(n).nbytes());
    return w;
  }
};

const FusedQkvPagedDriver kDriver;
const bool kRegistered = register_driver(&kDriver);

}  // namespace

FusedQkvPagedDesc fused_qkv_paged_desc(const Bundle& b) { return params_of(b).desc; }
FusedQkvPagedArgs fused_qkv_paged_args(const Bundle& b) { return FusedQkvPagedDriver::args_of(b, params_of(b)); }

}  // namespace mlakit::goldens
