// Driver of op 4 (sparse MLA prefill): golden-matrix cases, the generator, the derived tolerance.
//
// Which outputs a call writes: out.output always, out.lse unless the bundle's metadata says
// otherwise, out.max_logits where it says so. The golden format lists out.lse as an output of every
// call, so files carry it by default; any other choice (the "lse" knob false, the "max_logits" knob
// true) is marked by metadata "outputs" (e.g. "out.output,out.max_logits"), which survives
// remove_outputs() and golden files (run() is always handed a bundle without out.*, so the choice
// cannot live in the outputs).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/validators.hpp"
#include "goldens/common/driver.hpp"
#include "goldens/common/params.hpp"
#include "goldens/common/random.hpp"
#include "mlakit/ops/sparse_mla_prefill.hpp"

namespace mlakit::goldens {
namespace {

constexpr const char* kName = "sparse_mla_prefill";
constexpr const char* kOutputsKey = "outputs";  // metadata: the out.* tensors the call writes
constexpr double kU32 = 0x1.0p-24;   // f32 unit roundoff
constexpr double kUbf16 = 0x1.0p-8;  // bf16 unit roundoff

json knob_defaults() {
  return json{
      {"T", 6},                       // query rows, spread over the sequences (their last positions)
      {"num_q_heads", 4},
      {"qk_depth", 576},
      {"v_depth", 512},
      {"indices_stride", 64},
      {"scale", nullptr},             // null: 1/sqrt(qk_depth)
      {"topk_lengths", "random"},     // absent | full | random (1..stride) | some_zero | all_zero
      {"cache_dtype", "bf16"},        // bf16 | f8e4m3
      {"quant_granularity", 0},       // f8e4m3 only; 0 means the quantized width (one scale per row)
      {"tail_size", 0},               // f8e4m3 only: > 0 splits rows, qk_depth − tail_size codes + a bf16 tail (spec 06 §B)
      {"scale_dtype", "f32"},         // f8e4m3 only: f32 | e8m0 (power-of-two scale bytes, FlashMLA MODEL1)
      {"nan_scale", false},           // e8m0: query row 0 selects a row with a 0xFF (NaN) scale; others sit in unread rows
      {"page_size", 64},
      {"seq_lens", json::array({200, 90})},  // cache positions per sequence (this step's rows included)
      {"spare_blocks", 2},            // blocks no sequence owns: num_blocks = owned pages + spare_blocks
      {"num_blocks", 0},              // > 0: the cache's block count instead (spare = num_blocks − owned pages)
      {"num_layers", 1},
      {"layer_idx", 0},
      {"sink", false},
      {"lse", true},
      {"max_logits", false},          // the optional out.max_logits (m of each row and head)
      {"index_dtype", "i32"},         // i32 | u32
      {"invalid_fraction", 0.05},     // slots holding -1
      {"out_of_range_fraction", 0.05},  // slots holding other invalid values (>= num_rows, < -1)
      {"duplicate_fraction", 0.05},   // slots repeating an earlier valid slot of the row
      {"unowned_fraction", 0.1},      // valid slots anywhere in the cache (spare pages, other sequences, page tails)
      {"empty_row_fraction", 0.0},    // query rows whose every slot is invalid
      {"nan_row", false},             // f8e4m3: query row 0 selects a row whose K part holds a NaN code
  };
}

json merged(const json& knobs) {
  json k;
  std::string why;
  if (!merge_knobs(knob_defaults(), knobs, &k, &why)) throw InputError("sparse_mla_prefill: " + why);
  return k;
}

CaseSpec make_case(const char* name, const char* what, json knobs) {
  return CaseSpec{name, what, knobs.is_null() ? json::object() : std::move(knobs)};
}

// Shapes of the general (non-DeepSeek) small cases.
json general(json extra) {
  json k = {{"T", 7}, {"num_q_heads", 3}, {"qk_depth", 40}, {"v_depth", 24}, {"indices_stride", 16},
            {"page_size", 5}, {"seq_lens", json::array({37, 23})}, {"spare_blocks", 3}};
  for (auto it = extra.begin(); it != extra.end(); ++it) k[it.key()] = it.value();
  return k;
}

struct Params {
  SparseMlaPrefillDesc desc;
  std::uint32_t layer_idx = 0;
  std::int64_t quant_granularity = 0;
};

// The params of a golden file (docs/golden-format.md §4). quant_granularity belongs to an FP8 cache, where it
// is required; page_size restates the cache's page size.
constexpr ParamSpec kParams[] = {
    size_param("num_q_heads"), size_param("qk_depth"),     size_param("v_depth"),
    size_param("indices_stride", 0), float_param("scale"), size_param("layer_idx", 0),
    size_param("page_size", 1, false), size_param("quant_granularity", 1, false),
};

constexpr TensorSpec kTensors[] = {
    {"q", 3},
    {"kv_cache.blocks", 6},
    {"kv_cache.scales", 6, false},
    {"kv_cache.tail", 6, false},
    {"kv_cache.lookup_table", 2},
    {"kv_cache.cache_lengths", 1},
    {"indices", 2},
    {"topk_lengths", 1, false},
    {"attn_sink", 1, false},
    {"out.output", 3, false},
    {"out.lse", 2, false},
    {"out.max_logits", 2, false},
};

Params params_of(const Bundle& b) {
  const ParamReader r(kName, b.params, kParams);
  Params p;
  p.desc.num_q_heads = r.integer("num_q_heads");
  p.desc.qk_depth = r.integer("qk_depth");
  p.desc.v_depth = r.integer("v_depth");
  p.desc.indices_stride = r.integer("indices_stride");
  p.desc.scale = static_cast<float>(r.number("scale"));
  p.layer_idx = static_cast<std::uint32_t>(r.integer("layer_idx"));
  p.quant_granularity = r.integer_or("quant_granularity", 0);
  return p;
}

std::int64_t slot(const Tensor& indices, std::int64_t i) {
  if (indices.dtype() == DType::u32) return static_cast<std::int32_t>(indices.data<std::uint32_t>()[i]);
  return indices.data<std::int32_t>()[i];
}

// What the call reads: per query row the slots that are valid, and the rows of layer_idx they hit.
struct Selection {
  std::int64_t T = 0, num_rows = 0, max_valid = 0, total_valid = 0;
  std::vector<std::uint32_t> reads;  // per physical row: how many valid slots name it
};

Selection selection_of(const Bundle& b, const Params& p) {
  Selection s;
  const Tensor& blocks = b.at("kv_cache.blocks");
  const Tensor& idx = b.at("indices");
  s.T = idx.shape()[0];
  s.num_rows = blocks.shape()[0] * blocks.shape()[3];
  s.reads.assign(static_cast<std::size_t>(s.num_rows), 0);
  const std::int64_t stride = p.desc.indices_stride;
  for (std::int64_t t = 0; t < s.T; ++t) {
    std::int64_t len = b.has("topk_lengths") ? b.at("topk_lengths").data<std::uint32_t>()[t] : stride;
    len = std::min(len, stride);
    std::int64_t n = 0;
    for (std::int64_t q = 0; q < len; ++q) {
      const std::int64_t r = slot(idx, t * stride + q);
      if (r < 0 || r >= s.num_rows) continue;
      ++s.reads[static_cast<std::size_t>(r)];
      ++n;
    }
    s.max_valid = std::max(s.max_valid, n);
    s.total_valid += n;
  }
  return s;
}

// Element offset of (row r, column 0) of layer `layer` in the blocks tensor.
std::int64_t row_base(const Tensor& blocks, std::int64_t r, std::int64_t layer) {
  const auto& sh = blocks.shape();
  const std::int64_t ps = sh[3], blk = r / ps, off = r % ps;
  return ((blk * sh[2] + layer) * ps + off) * sh[5];
}

std::int64_t scale_index(const Tensor& blocks, const Tensor& scales, std::int64_t r, std::int64_t layer) {
  const auto& sh = blocks.shape();
  const std::int64_t ps = sh[3], blk = r / ps, off = r % ps;
  return ((blk * sh[2] + layer) * ps + off) * scales.shape()[5];
}

// Row r's column d of layer `layer` as the spec dequantizes it: code · its group's scale, the
// tail after the quantized part, or the bf16 value.
double row_value(const Bundle& b, std::int64_t r, std::int64_t layer, std::int64_t d, std::int64_t granularity) {
  const Tensor& blocks = b.at("kv_cache.blocks");
  const std::int64_t wq = blocks.shape()[5];
  if (d >= wq) {
    const Tensor& tail = b.at("kv_cache.tail");
    const auto& sh = blocks.shape();
    const std::int64_t ps = sh[3], blk = r / ps, off = r % ps;
    return tail.value(((blk * sh[2] + layer) * ps + off) * tail.shape()[5] + d - wq);
  }
  const double x = blocks.value(row_base(blocks, r, layer) + d);
  if (blocks.dtype() != DType::f8e4m3) return x;
  const Tensor& scales = b.at("kv_cache.scales");
  return x * scales.value(scale_index(blocks, scales, r, layer) + d / granularity);
}

// Swaps two bytes of the blocks tensor (keeps the multiset of codes, hence all 256 of them).
void swap_bytes(Tensor& blocks, std::int64_t a, std::int64_t c) {
  std::swap(blocks.data<std::uint8_t>()[a], blocks.data<std::uint8_t>()[c]);
}

class SparseMlaPrefillDriver final : public OpDriver {
 public:
  const char* name() const override { return kName; }
  json default_knobs() const override { return knob_defaults(); }

  std::vector<CaseSpec> cases() const override {
    std::vector<CaseSpec> v;
    v.push_back(make_case("deepseek_bf16", "DeepSeek latent shape (qk 576, v 512), 4 heads, top_k 64, bf16 cache", {}));
    v.push_back(make_case("deepseek_fp8", "DeepSeek shape, f8e4m3 cache with all 256 codes, one row selecting a NaN code, sink",
                          {{"cache_dtype", "f8e4m3"}, {"nan_row", true}, {"sink", true}, {"spare_blocks", 4}}));
    v.push_back(make_case("general_bf16", "general small shape qk 40, v 24, page 5 (not a power of two)", general({})));
    v.push_back(make_case("general_fp8", "general shape, f8e4m3 cache, quant_granularity 64 > qk_depth, NaN row",
                          general({{"cache_dtype", "f8e4m3"}, {"quant_granularity", 64}, {"spare_blocks", 8},
                                   {"nan_row", true}})));
    v.push_back(make_case("qk512_v512", "qk_depth = v_depth = 512, page 32",
                          {{"num_q_heads", 2}, {"qk_depth", 512}, {"v_depth", 512}, {"indices_stride", 32},
                           {"page_size", 32}, {"seq_lens", json::array({70, 41})}}));
    v.push_back(make_case("single_head_v_eq_qk", "Hq 1, v_depth = qk_depth = 24, page 3",
                          general({{"num_q_heads", 1}, {"qk_depth", 24}, {"v_depth", 24}, {"indices_stride", 8},
                                   {"page_size", 3}})));
    v.push_back(make_case("deepseek_topk256", "DeepSeek shape, top_k 256, two heads, page 48",
                          {{"T", 3}, {"num_q_heads", 2}, {"indices_stride", 256}, {"page_size", 48},
                           {"seq_lens", json::array({400})}, {"topk_lengths", "full"}}));
    v.push_back(make_case("rows_without_valid_slot", "40% of the query rows have every slot invalid (-1 / out of range)",
                          general({{"empty_row_fraction", 0.4}, {"T", 9}})));
    v.push_back(make_case("all_slots_invalid", "every slot of every row invalid: output 0, lse +inf (sink given)",
                          general({{"empty_row_fraction", 1.0}, {"sink", true}, {"topk_lengths", "absent"}})));
    v.push_back(make_case("all_slots_invalid_fp8", "every slot invalid, f8e4m3 cache, DeepSeek shape",
                          {{"empty_row_fraction", 1.0}, {"cache_dtype", "f8e4m3"}, {"T", 3}}));
    v.push_back(make_case("duplicates", "half the slots repeat an earlier valid slot (they count twice)",
                          general({{"duplicate_fraction", 0.5}})));
    v.push_back(make_case("invalid_values", "-1 and out-of-range values (>= num_rows, < -1, INT32_MIN/MAX), i32",
                          general({{"invalid_fraction", 0.3}, {"out_of_range_fraction", 0.3}})));
    v.push_back(make_case("u32_indices", "u32 indices: 0xFFFFFFFF and values >= 2^31 are invalid",
                          general({{"index_dtype", "u32"}, {"invalid_fraction", 0.2}, {"out_of_range_fraction", 0.2},
                                   {"page_size", 7}})));
    v.push_back(make_case("u32_indices_deepseek", "u32 indices, DeepSeek shape, sink",
                          {{"index_dtype", "u32"}, {"sink", true}, {"invalid_fraction", 0.1}}));
    v.push_back(make_case("topk_absent", "no topk_lengths: every slot up to indices_stride is read",
                          general({{"topk_lengths", "absent"}})));
    v.push_back(make_case("topk_full", "topk_lengths present, all equal to indices_stride", general({{"topk_lengths", "full"}})));
    v.push_back(make_case("topk_some_zero", "topk_lengths with zero rows (output 0, lse +inf) and valid slots past the length",
                          general({{"topk_lengths", "some_zero"}, {"T", 9}})));
    v.push_back(make_case("topk_all_zero", "topk_lengths all zero: nothing is read",
                          general({{"topk_lengths", "all_zero"}, {"sink", true}})));
    v.push_back(make_case("sink_with_lse", "attention sink in the denominator only; lse without it",
                          general({{"sink", true}, {"lse", true}})));
    v.push_back(make_case("sink_without_lse", "attention sink, lse not requested", {{"sink", true}, {"lse", false}}));
    v.push_back(make_case("no_lse", "lse not requested", general({{"lse", false}})));
    v.push_back(make_case("max_logits", "max_logits beside lse, with a sink and rows without a valid slot (-inf)",
                          general({{"max_logits", true}, {"sink", true}, {"empty_row_fraction", 0.3}, {"T", 9}})));
    v.push_back(make_case("max_logits_without_lse", "max_logits alone, u32 indices",
                          general({{"max_logits", true}, {"lse", false}, {"index_dtype", "u32"}})));
    v.push_back(make_case("max_logits_fp8_nan_row", "max_logits on an f8e4m3 cache, query row 0 reads a NaN code (NaN)",
                          {{"cache_dtype", "f8e4m3"}, {"nan_row", true}, {"max_logits", true}, {"T", 3}}));
    v.push_back(make_case("multilayer", "3 layers, layer_idx 2", general({{"num_layers", 3}, {"layer_idx", 2}})));
    v.push_back(make_case("multilayer_fp8", "2 layers, layer_idx 1, f8e4m3 cache",
                          general({{"num_layers", 2}, {"layer_idx", 1}, {"cache_dtype", "f8e4m3"}, {"sink", true}})));
    v.push_back(make_case("unowned_rows", "60% of the slots name rows outside their own sequence (spare pages, page tails)",
                          general({{"unowned_fraction", 0.6}, {"num_blocks", 17}})));
    v.push_back(make_case("t_zero", "no query rows (T = 0): a valid call that writes nothing", general({{"T", 0}})));
    v.push_back(make_case("flashmla_v32", "FlashMLA V32 split rows: 512 codes with 4 f32 scales (one per 128) + 64 bf16 rope, all 256 codes, NaN code, sink",
                          {{"cache_dtype", "f8e4m3"}, {"tail_size", 64}, {"quant_granularity", 128}, {"nan_row", true},
                           {"sink", true}, {"spare_blocks", 4}}));
    v.push_back(make_case("flashmla_model1", "FlashMLA MODEL1 split rows: qk 512 = 448 codes with 7 e8m0 scales (one per 64) + 64 bf16, a 0xFF NaN scale",
                          {{"cache_dtype", "f8e4m3"}, {"qk_depth", 512}, {"tail_size", 64}, {"quant_granularity", 64},
                           {"scale_dtype", "e8m0"}, {"nan_scale", true}, {"max_logits", true}, {"spare_blocks", 4}}));
    v.push_back(make_case("split_rows_general", "split rows, general shape: 32 codes (e8m0 per 16) + 8 bf16, v_depth past the codes, page 5",
                          general({{"cache_dtype", "f8e4m3"}, {"v_depth", 36}, {"tail_size", 8}, {"quant_granularity", 16},
                                   {"scale_dtype", "e8m0"}, {"spare_blocks", 8}, {"num_layers", 2}, {"layer_idx", 1}})));
    v.push_back(make_case("grouped_scales_whole_rows", "f8e4m3 whole rows with several f32 scales (granularity 16: 3 per 40-column row, the last partial)",
                          general({{"cache_dtype", "f8e4m3"}, {"quant_granularity", 16}, {"spare_blocks", 8}, {"nan_row", true}})));
    v.push_back(make_case("large_scale", "scale 1.0 with DeepSeek depths: sharp softmax",
                          {{"scale", 1.0}, {"num_q_heads", 2}, {"T", 4}}));
    return v;
  }

  CaseSpec default_case() const override {
    return make_case("deepseek_v32", "DeepSeek-V3.2: 128 heads, qk 576, v 512, top_k 1024, page 64, 4 query rows",
                     {{"T", 4}, {"num_q_heads", 128}, {"indices_stride", 1024}, {"seq_lens", json::array({4096})},
                      {"topk_lengths", "full"}, {"scale", 1.0 / std::sqrt(192.0)}, {"invalid_fraction", 0.02},
                      {"out_of_range_fraction", 0.0}, {"duplicate_fraction", 0.0}, {"unowned_fraction", 0.02}});
  }

  std::vector<CaseSpec> bench_cases() const override {
    auto ds = [](std::int64_t T, std::int64_t hq, std::int64_t topk, std::int64_t rows, const char* dtype) {
      return json{{"T", T}, {"num_q_heads", hq}, {"qk_depth", 576}, {"v_depth", 512}, {"indices_stride", topk},
                  {"page_size", 64}, {"seq_lens", json::array({rows})}, {"topk_lengths", "full"},
                  {"scale", 1.0 / std::sqrt(192.0)}, {"cache_dtype", dtype}, {"invalid_fraction", 0.0},
                  {"out_of_range_fraction", 0.0}, {"duplicate_fraction", 0.0}, {"unowned_fraction", 0.0},
                  {"lse", true}};
    };
    return {
        make_case("dsv32_t256", "Hq 128, top_k 2048, 8192 cache rows", ds(256, 128, 2048, 8192, "bf16")),
        make_case("dsv32_t1024", "Hq 128, top_k 2048, 32768 cache rows", ds(1024, 128, 2048, 32768, "bf16")),
        make_case("dsv32_t4096", "Hq 128, top_k 2048, 131072 cache rows", ds(4096, 128, 2048, 131072, "bf16")),
        make_case("dsv32_fp8_t1024", "f8e4m3 cache, Hq 128, top_k 2048, 32768 rows", ds(1024, 128, 2048, 32768, "f8e4m3")),
        make_case("quick_h64_k512", "Hq 64, top_k 512, T 256, 8192 rows", ds(256, 64, 512, 8192, "bf16")),
    };
  }

  Bundle generate(const json& knobs_in, std::uint64_t seed) const override {
    const json k = merged(knobs_in);
    Rng rng(seed);
    Bundle b;
    b.op = name();

    const std::int64_t T = k.at("T").get<std::int64_t>();
    const std::int64_t Hq = k.at("num_q_heads").get<std::int64_t>();
    const std::int64_t qk = k.at("qk_depth").get<std::int64_t>();
    const std::int64_t vd = k.at("v_depth").get<std::int64_t>();
    const std::int64_t stride = k.at("indices_stride").get<std::int64_t>();
    const std::int64_t ps = k.at("page_size").get<std::int64_t>();
    const std::int64_t layers = k.at("num_layers").get<std::int64_t>();
    const std::int64_t layer = k.at("layer_idx").get<std::int64_t>();
    const std::string cache_dtype = k.at("cache_dtype").get<std::string>();
    const std::string index_dtype = k.at("index_dtype").get<std::string>();
    const std::string topk_mode = k.at("topk_lengths").get<std::string>();
    const std::vector<std::int64_t> seq_lens = k.at("seq_lens").get<std::vector<std::int64_t>>();
    if (cache_dtype != "bf16" && cache_dtype != "f8e4m3") throw InputError("cache_dtype must be bf16 or f8e4m3");
    if (index_dtype != "i32" && index_dtype != "u32") throw InputError("index_dtype must be i32 or u32");
    if (seq_lens.empty()) throw InputError("seq_lens must name at least one sequence");
    const bool fp8 = cache_dtype == "f8e4m3";
    const float scale = k.at("scale").is_null() ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(qk)))
                                                : k.at("scale").get<float>();
    const std::int64_t wt = k.at("tail_size").get<std::int64_t>();
    const std::string scale_dtype = k.at("scale_dtype").get<std::string>();
    if (wt < 0 || wt >= qk || (wt > 0 && !fp8)) throw InputError("tail_size must be in [0, qk_depth) and needs an f8e4m3 cache");
    if (scale_dtype != "f32" && scale_dtype != "e8m0") throw InputError("scale_dtype must be f32 or e8m0");
    const std::int64_t wq = qk - wt;  // the quantized (or plain) part of a row
    std::int64_t qg = k.at("quant_granularity").get<std::int64_t>();
    if (fp8 && qg == 0) qg = wq;

    b.params = {{"num_q_heads", Hq}, {"qk_depth", qk}, {"v_depth", vd}, {"indices_stride", stride},
                {"scale", scale}, {"layer_idx", layer}, {"page_size", ps}};
    if (fp8) b.params["quant_granularity"] = qg;

    // This step's T rows are the last positions of the sequences, spread as evenly as they fit.
    const std::int64_t B = static_cast<std::int64_t>(seq_lens.size());
    std::vector<std::int64_t> rows_of(B, 0);
    std::int64_t left = T;
    for (bool progress = true; left > 0 && progress;) {
      progress = false;
      for (std::int64_t s = 0; s < B && left > 0; ++s)
        if (rows_of[s] < seq_lens[s]) ++rows_of[s], --left, progress = true;
    }
    if (left > 0) throw InputError("T exceeds the sum of seq_lens");
    std::vector<std::int64_t> cache_lens(B);
    for (std::int64_t s = 0; s < B; ++s) cache_lens[s] = seq_lens[s] - rows_of[s];

    // Queries, then the cache with data in every row of every layer (also rows no one reads).
    fill_normal(b.add("q", DType::bf16, {T, Hq, qk}), rng, 1.0);
    CacheLayout L;
    L.page_size = ps;
    L.kv_dim = 1;
    L.num_layers = layers;
    L.num_kv_heads = 1;
    L.head_size = wq;
    L.dtype = fp8 ? DType::f8e4m3 : DType::bf16;
    L.quant_granularity = fp8 ? qg : 0;
    L.spare_blocks = k.at("spare_blocks").get<std::int64_t>();
    if (const std::int64_t want = k.at("num_blocks").get<std::int64_t>(); want > 0) {
      std::int64_t owned_pages = 0;
      for (std::int64_t n : seq_lens) owned_pages += (n + ps - 1) / ps;
      if (want < owned_pages) throw InputError("num_blocks is below the pages the sequences own");
      L.spare_blocks = want - owned_pages;
    }
    make_paged_cache(b, "kv_cache", L, cache_lens, seq_lens, rng);
    Tensor& blocks = b.at("kv_cache.blocks");
    if (fp8) {
      // Codes spread over the whole e4m3 range; the per-row scales bring values to about N(0, 1).
      fill_fp8(blocks, rng, 64.0, blocks.numel() >= 256);
      if (scale_dtype == "e8m0") {  // 2^-7 .. 2^-5: the same spread as the f32 scales
        const auto shape = b.at("kv_cache.scales").shape();
        b.tensors.erase("kv_cache.scales");
        fill_integers(b.add("kv_cache.scales", DType::e8m0, shape), rng, 120, 122);
      } else {
        fill_uniform(b.at("kv_cache.scales"), rng, 0.5 / 64, 2.0 / 64);
      }
      if (wt > 0) {
        const auto& sh = blocks.shape();
        fill_normal(b.add("kv_cache.tail", DType::bf16, {sh[0], sh[1], sh[2], sh[3], sh[4], wt}), rng, 1.0);
      }
    } else {
      fill_normal(blocks, rng, 1.0);
    }
    if (k.at("sink").get<bool>()) fill_uniform(b.add("attn_sink", DType::f32, {Hq}), rng, -1.0, 5.0);

    const std::int64_t nb = blocks.shape()[0];
    const std::int64_t num_rows = nb * ps;
    const Tensor& lut = b.at("kv_cache.lookup_table");
    const std::int64_t cols = lut.shape()[1];
    std::vector<bool> owned(static_cast<std::size_t>(nb), false);
    for (std::int64_t i = 0; i < lut.numel(); ++i)
      if (lut.data<std::uint32_t>()[i] < nb) owned[lut.data<std::uint32_t>()[i]] = true;
    std::vector<std::int64_t> spare;
    for (std::int64_t blk = 0; blk < nb; ++blk)
      if (!owned[static_cast<std::size_t>(blk)]) spare.push_back(blk);

    // topk_lengths.
    std::vector<std::int64_t> len(static_cast<std::size_t>(T), stride);
    if (topk_mode != "absent") {
      Tensor& tl = b.add("topk_lengths", DType::u32, {T});
      for (std::int64_t t = 0; t < T; ++t) {
        std::int64_t n = stride;
        if (topk_mode == "random") n = rng.integer(1, stride);
        else if (topk_mode == "some_zero") n = t % 3 == 1 ? 0 : rng.integer(0, stride);
        else if (topk_mode == "all_zero") n = 0;
        else if (topk_mode != "full") throw InputError("topk_lengths must be absent, full, random, some_zero or all_zero");
        len[static_cast<std::size_t>(t)] = n;
        tl.data<std::uint32_t>()[t] = static_cast<std::uint32_t>(n);
      }
    }

    // Indices: the slots an indexer would choose (distinct earlier-or-same positions of the row's own
    // sequence, mapped through the lookup table), mixed with the edge cases the knobs ask for.
    const double f_inv = k.at("invalid_fraction").get<double>();
    const double f_oob = k.at("out_of_range_fraction").get<double>();
    const double f_dup = k.at("duplicate_fraction").get<double>();
    const double f_unowned = k.at("unowned_fraction").get<double>();
    const double f_empty = k.at("empty_row_fraction").get<double>();
    auto out_of_range = [&]() -> std::int64_t {
      switch (rng.integer(0, 5)) {
        case 0: return num_rows;
        case 1: return num_rows + rng.integer(1, 1000);
        case 2: return std::numeric_limits<std::int32_t>::max();
        case 3: return std::numeric_limits<std::int32_t>::min();
        case 4: return -2;
        default: return -rng.integer(3, 100000);
      }
    };
    std::vector<std::int64_t> idx(static_cast<std::size_t>(T * stride));
    const std::int64_t max_len = *std::max_element(seq_lens.begin(), seq_lens.end());
    std::vector<std::int64_t> stamp(static_cast<std::size_t>(max_len), -1);
    std::int64_t t = 0;
    for (std::int64_t s = 0; s < B; ++s) {
      for (std::int64_t i = 0; i < rows_of[s]; ++i, ++t) {
        const std::int64_t pos = cache_lens[s] + i;  // causal: positions 0..pos are visible
        const bool empty = rng.uniform() < f_empty;
        std::vector<std::int64_t> valid_so_far;
        for (std::int64_t p = 0; p < stride; ++p) {
          std::int64_t& out = idx[static_cast<std::size_t>(t * stride + p)];
          const double u = rng.uniform();
          if (p >= len[static_cast<std::size_t>(t)]) {
            // Past the length: mostly valid rows, which must not be read.
            out = u < 0.6 ? rng.integer(0, num_rows - 1) : u < 0.8 ? -1 : out_of_range();
            continue;
          }
          if (empty) {
            out = u < 0.5 ? -1 : out_of_range();
            continue;
          }
          double c = u;
          if ((c -= f_inv) < 0) {
            out = -1;
          } else if ((c -= f_oob) < 0) {
            out = out_of_range();
          } else if ((c -= f_dup) < 0 && !valid_so_far.empty()) {
            out = valid_so_far[static_cast<std::size_t>(rng.integer(0, std::int64_t(valid_so_far.size()) - 1))];
          } else if ((c -= f_unowned) < 0) {
            if (!spare.empty() && rng.uniform() < 0.5)
              out = spare[static_cast<std::size_t>(rng.integer(0, std::int64_t(spare.size()) - 1))] * ps +
                    rng.integer(0, ps - 1);
            else
              out = rng.integer(0, num_rows - 1);
          } else {
            std::int64_t x = rng.integer(0, pos);
            for (int tries = 0; tries < 8 && stamp[static_cast<std::size_t>(x)] == t; ++tries) x = rng.integer(0, pos);
            stamp[static_cast<std::size_t>(x)] = t;
            out = static_cast<std::int64_t>(lut.data<std::uint32_t>()[s * cols + x / ps]) * ps + x % ps;
          }
          if (out >= 0 && out < num_rows) valid_so_far.push_back(out);
        }
      }
    }

    if (fp8) place_nan_codes(b, idx, len, T, stride, num_rows, layer, layers, wq, k.at("nan_row").get<bool>(), rng);
    if (scale_dtype == "e8m0") place_e8m0_edges(b, idx, len, T, stride, num_rows, layer, k.at("nan_scale").get<bool>(), rng);

    Tensor& it = b.add("indices", index_dtype == "u32" ? DType::u32 : DType::i32, {T, stride});
    for (std::int64_t i = 0; i < T * stride; ++i) {
      const auto v32 = static_cast<std::int32_t>(idx[static_cast<std::size_t>(i)]);
      if (index_dtype == "u32") it.data<std::uint32_t>()[i] = static_cast<std::uint32_t>(v32);
      else it.data<std::int32_t>()[i] = v32;
    }

    const bool lse = k.at("lse").get<bool>(), max_logits = k.at("max_logits").get<bool>();
    if (!lse || max_logits)
      b.metadata[kOutputsKey] = std::string("out.output") + (lse ? ",out.lse" : "") + (max_logits ? ",out.max_logits" : "");
    return b;
  }

  void check_inputs(const Bundle& b) const override {
    check_tensors(kName, b, kTensors);
    const ParamReader r(kName, b.params, kParams);
    const Tensor& blocks = b.at("kv_cache.blocks");
    r.agrees("page_size", blocks.shape()[3], "kv_cache.blocks.shape[3]");
    if (blocks.dtype() == DType::f8e4m3) r.require("quant_granularity", "for an f8e4m3 cache");
  }

  void prepare_outputs(Bundle& b) const override {
    check_inputs(b);
    const auto outputs = b.metadata.find(kOutputsKey);
    const bool want_lse = outputs == b.metadata.end() || outputs->second.find("out.lse") != std::string::npos;
    const bool want_max_logits = outputs != b.metadata.end() && outputs->second.find("out.max_logits") != std::string::npos;
    b.remove_outputs();
    const Params p = params_of(b);
    const std::int64_t T = b.at("q").shape()[0];
    b.add("out.output", DType::bf16, {T, p.desc.num_q_heads, p.desc.v_depth}).poison();
    if (want_lse) b.add("out.lse", DType::f32, {T, p.desc.num_q_heads}).poison();
    if (want_max_logits) b.add("out.max_logits", DType::f32, {T, p.desc.num_q_heads}).poison();
  }

  Status validate(const Bundle& b) const override {
    const Params p = params_of(b);
    MemorySpace space;
    return core::validate_sparse_mla_prefill(p.desc, args_of(b, p), &space);
  }

  Status call(Bundle& b, const RunOptions& options) const override {
    const Params p = params_of(b);
    return sparse_mla_prefill(p.desc, args_of(b, p), options);
  }

  Status call_planned(Bundle& b, PlannedRun* pr) const override {
    const Params p = params_of(b);
    return plan_and_run(p.desc, args_of(b, p), pr);
  }

  Status plan(const Bundle& b, const PlanOptions& options, std::unique_ptr<PlannedCall>* out) const override {
    return make_planned_call(params_of(b).desc, b, [](const Bundle& r) { return args_of(r, params_of(r)); },
                             options, out);
  }

  static SparseMlaPrefillArgs args_of(const Bundle& b, const Params& p) {
    SparseMlaPrefillArgs a;
    a.q = b.at("q").view();
    a.kv_cache = cache_view(b, "kv_cache", p.quant_granularity);
    a.layer_idx = p.layer_idx;
    a.indices = b.at("indices").view();
    a.topk_lengths = optional_view(b, "topk_lengths");
    a.attn_sink = optional_view(b, "attn_sink");
    a.output = b.at("out.output").view();
    a.lse = optional_view(b, "out.lse");
    a.max_logits = optional_view(b, "out.max_logits");
    return a;
  }

  // Tolerance of an optimized back-end against the reference (docs/sparse_mla_prefill.md §6), derived
  // from the three error sources the spec allows, with u = 2^-24 (f32) and u_b = 2^-8 (bf16):
  //
  // Scores. s_p is a length-qk_depth f32 dot product (bf16·bf16 products are exact in f32; the FP8
  // dequantization, the q·row product and the scale add two roundings):
  //   |Δs_p| <= ε_s = (2·qk_depth + 2)·u·|scale|·Σ|q_d·row_d|,  bounded by Cauchy–Schwarz with
  //   Σ|q_d·row_d| <= max‖q[t,h]‖₂ · max‖row‖₂ over the rows the call reads.
  // Weights. p = exp(s − m) in f32: relative error <= ε_s (the m of candidate and reference cancel
  //   between numerator and denominator) + 4u (exp, 2 ulp) + u·|s − m| (the subtraction); then the
  //   spec allows rounding p to bf16 before P·V: relative <= u_b.
  // Output. out = Σ p·v / den; with V = the largest |v| the call reads (den >= 1, Σp <= den):
  //   - bf16 rounding of p:                            <= u_b·V
  //   - p errors δ_p: Σ p·δ_p·(v − out)/den            <= 2·(ε_s + 4u)·V + n·u·V (Σ p·u·|s−m| <= n·u/e)
  //   - P·V accumulated in f32 over n <= top_k slots:  <= 2·n·u·V
  //   - den summed in f32 over n + 1 terms, divided:   <= (n + 2)·u·|out|
  //   Both sides round to bf16 once (<= u_b·|x| each), so with the result r = bf16(x):
  //   atol = (1 + 2^-7)·V·(u_b + 2·ε_s + 8u + 3·n·u),   rtol = (1 + 2^-7)·(2·u_b + (n + 2)·u).
  // Row cosine. The bf16 output roundings move a row by at most 2·u_b of its norm; rounding p to
  //   bf16 moves it by u_b/√3 (RMS) relative to the norm of a softmax average of independent
  //   rows, 3σ <= 2·u_b; the f32 terms are far below that (RMS ~ √n·u). So ‖Δ‖/‖x‖ <= δ = 4·u_b and
  //   cos >= 1 − δ²/2:  min_cosine = 1 − 2^-13.
  // lse = m + log(l) in f32: the max cancels again; |Δ| <= ε_s + 4u + (n + 1)·u (sum) + n·u/e,
  //   plus the f32 addition and both f32 roundings (2u·|lse| each side, |m| <= |lse| + log n):
  //   atol = ε_s + (2·n + 8 + 2·ln(n + 1))·u,   rtol = 4u.
  // max_logits = m, the largest score: a maximum moves by no more than the largest change of its
  //   terms, so |Δm| <= ε_s; both sides round to f32 once (u·|m| each): atol = ε_s, rtol = 2u.
  //   -inf (no valid slot) and NaN (a NaN score) must match exactly.
  json tolerance(const Bundle& b) const override {
    const Params p = params_of(b);
    const std::int64_t qk = p.desc.qk_depth, vd = p.desc.v_depth, Hq = p.desc.num_q_heads;
    const Selection sel = selection_of(b, p);
    double vmax = 0, rmax2 = 0;
    for (std::int64_t r = 0; r < sel.num_rows; ++r) {
      if (sel.reads[static_cast<std::size_t>(r)] == 0) continue;
      double norm2 = 0;
      bool finite = true;
      for (std::int64_t d = 0; d < qk; ++d) {
        const double x = row_value(b, r, p.layer_idx, d, p.quant_granularity);
        if (!std::isfinite(x)) { finite = false; continue; }
        norm2 += x * x;
        if (d < vd) vmax = std::max(vmax, std::fabs(x));
      }
      if (finite) rmax2 = std::max(rmax2, norm2);
    }
    const Tensor& q = b.at("q");
    double qmax2 = 0;
    for (std::int64_t row = 0; row < sel.T * Hq; ++row) {
      double n2 = 0;
      for (std::int64_t d = 0; d < qk; ++d) n2 += q.value(row * qk + d) * q.value(row * qk + d);
      if (std::isfinite(n2)) qmax2 = std::max(qmax2, n2);
    }
    const double n = static_cast<double>(std::max<std::int64_t>(sel.max_valid, 1));
    const double eps_s = (2.0 * qk + 2.0) * kU32 * std::fabs(static_cast<double>(p.desc.scale)) * std::sqrt(qmax2 * rmax2);
    json tol;
    tol["out.output"] = {{"atol", (1 + 0x1.0p-7) * vmax * (kUbf16 + 2 * eps_s + 8 * kU32 + 3 * n * kU32)},
                         {"rtol", (1 + 0x1.0p-7) * (2 * kUbf16 + (n + 2) * kU32)},
                         {"min_cosine", 1.0 - 0x1.0p-13}};
    if (b.has("out.lse"))
      tol["out.lse"] = {{"atol", eps_s + (2 * n + 8 + 2 * std::log(n + 1)) * kU32}, {"rtol", 4 * kU32}};
    if (b.has("out.max_logits")) tol["out.max_logits"] = {{"atol", eps_s}, {"rtol", 2 * kU32}};
    return tol;
  }

  std::vector<Comparison> compare(const Bundle& expected, const Bundle& candidate) const override {
    const json tol = tolerance(expected);
    const std::int64_t vd = params_of(expected).desc.v_depth;
    std::vector<Comparison> out;
    for (const char* name : {"out.output", "out.lse", "out.max_logits"}) {
      if (!expected.has(name)) continue;
      if (!candidate.has(name)) {
        Comparison c;
        c.name = name;
        c.kind = "close";
        c.pass = false;
        c.detail = std::string(name) + " is missing from the candidate";
        out.push_back(c);
        continue;
      }
      const json& t = tol.at(name);
      const bool rows = std::string(name) == "out.output";
      out.push_back(compare_close(name, expected.at(name), candidate.at(name), t.at("atol").get<double>(),
                                  t.at("rtol").get<double>(), rows ? vd : 0,
                                  rows ? t.at("min_cosine").get<double>() : 0.0));
    }
    return out;
  }

  Work work(const Bundle& b) const override {
    const Params p = params_of(b);
    const Selection sel = selection_of(b, p);
    const double Hq = static_cast<double>(p.desc.num_q_heads);
    const double qk = static_cast<double>(p.desc.qk_depth), vd = static_cast<double>(p.desc.v_depth);
    const bool fp8 = b.at("kv_cache.blocks").dtype() == DType::f8e4m3;
    const Tensor& blocks = b.at("kv_cache.blocks");
    const double wq = static_cast<double>(blocks.shape()[5]);
    const double row_bytes = fp8 ? wq + (qk - wq) * 2 + static_cast<double>(b.at("kv_cache.scales").shape()[5] *
                                                                            dtype_size(b.at("kv_cache.scales").dtype()))
                                 : qk * 2;
    const double T = static_cast<double>(sel.T);
    Work w;
    w.flops = 2.0 * Hq * (qk + vd) * static_cast<double>(sel.total_valid);
    w.bytes = static_cast<double>(sel.total_valid) * row_bytes               // gathered rows, shared by the heads
              + T * Hq * qk * 2 + T * static_cast<double>(p.desc.indices_stride) * 4  // q, indices
              + (b.has("topk_lengths") ? T * 4 : 0.0) + T * Hq * vd * 2              // lengths, output
              + (b.has("out.lse") ? T * Hq * 4 : 0.0) + (b.has("out.max_logits") ? T * Hq * 4 : 0.0);
    return w;
  }

 private:
  // Query row 0 reads at least its first slot (which the NaN placements below point at).
  static void first_slot_read(Bundle& b, std::vector<std::int64_t>& len, std::int64_t T, std::int64_t stride) {
    if (T > 0 && stride > 0 && len[0] == 0) {
      len[0] = 1;
      b.at("topk_lengths").data<std::uint32_t>()[0] = 1;
    }
  }

  // The rows of the layer that no valid slot reads, in order; *read flags the others.
  static std::vector<std::int64_t> unread_rows(const std::vector<std::int64_t>& idx, const std::vector<std::int64_t>& len,
                                               std::int64_t T, std::int64_t stride, std::int64_t num_rows,
                                               std::vector<bool>* read) {
    read->assign(static_cast<std::size_t>(num_rows), false);
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t p = 0; p < len[static_cast<std::size_t>(t)]; ++p) {
        const std::int64_t r = idx[static_cast<std::size_t>(t * stride + p)];
        if (r >= 0 && r < num_rows) (*read)[static_cast<std::size_t>(r)] = true;
      }
    std::vector<std::int64_t> unread;
    for (std::int64_t r = 0; r < num_rows; ++r)
      if (!(*read)[static_cast<std::size_t>(r)]) unread.push_back(r);
    return unread;
  }

  // fill_fp8 scatters all 256 codes over the cache, so the NaN codes 0x7F / 0xFF may sit in rows
  // many query rows read, which would turn most outputs into NaN. They are moved (by swapping
  // bytes, so every code stays present) into rows of layer_idx that no valid slot reads, or into
  // another layer; with nan_row, one NaN code goes to the last quantized column (K-only unless the
  // row is split) of an unread row that query row 0's first slot then names. `qk` is the
  // quantized width here.
  void place_nan_codes(Bundle& b, std::vector<std::int64_t>& idx, std::vector<std::int64_t>& len, std::int64_t T,
                       std::int64_t stride, std::int64_t num_rows, std::int64_t layer, std::int64_t layers,
                       std::int64_t qk, bool nan_row, Rng& rng) const {
    Tensor& blocks = b.at("kv_cache.blocks");
    if (nan_row) first_slot_read(b, len, T, stride);
    std::vector<bool> read;
    const std::vector<std::int64_t> unread = unread_rows(idx, len, T, stride, num_rows, &read);
    const std::int64_t row_len = qk;  // the quantized width: one head, kv_dim 1
    auto pick_unread = [&]() { return unread[static_cast<std::size_t>(rng.integer(0, std::int64_t(unread.size()) - 1))]; };
    std::int64_t nan_target = -1;
    if (nan_row && T > 0 && !unread.empty()) nan_target = pick_unread();
    for (std::int64_t i = 0; i < blocks.numel(); ++i) {
      const std::uint8_t c = blocks.data<std::uint8_t>()[i];
      if ((c & 0x7F) != 0x7F) continue;
      const std::int64_t per_layer_row = i / row_len;  // row index over (blk, layer, off)
      const std::int64_t ps = blocks.shape()[3];
      const std::int64_t off = per_layer_row % ps, lay = (per_layer_row / ps) % layers, blk = per_layer_row / ps / layers;
      const std::int64_t r = blk * ps + off;
      if (nan_target >= 0 && c == 0x7F) {
        swap_bytes(blocks, i, row_base(blocks, nan_target, layer) + qk - 1);
        continue;
      }
      if (lay != layer || !read[static_cast<std::size_t>(r)]) continue;
      if (!unread.empty()) {
        swap_bytes(blocks, i, row_base(blocks, pick_unread(), layer) + rng.integer(0, qk - 1));
      } else if (layers > 1) {
        const std::int64_t other = (layer + 1) % layers;
        swap_bytes(blocks, i, row_base(blocks, rng.integer(0, num_rows - 1), other) + rng.integer(0, qk - 1));
      }
    }
    if (nan_target >= 0) idx[0] = nan_target;
  }

  // e8m0 scales: the edge values 0 (2^-127) and 254 (2^127) and 0xFF (NaN) go to rows of layer_idx
  // that no valid slot reads (an overflow there would be the engine's, not the spec's); with
  // nan_scale, one NaN scale goes to an unread row that query row 0's first slot then names (its
  // scores, and so its outputs, are NaN).
  void place_e8m0_edges(Bundle& b, std::vector<std::int64_t>& idx, std::vector<std::int64_t>& len, std::int64_t T,
                        std::int64_t stride, std::int64_t num_rows, std::int64_t layer, bool nan_scale, Rng& rng) const {
    if (nan_scale) first_slot_read(b, len, T, stride);
    std::vector<bool> read;
    const std::vector<std::int64_t> unread = unread_rows(idx, len, T, stride, num_rows, &read);
    if (unread.empty()) return;
    const Tensor& blocks = b.at("kv_cache.blocks");
    Tensor& scales = b.at("kv_cache.scales");
    const std::int64_t per_row = scales.shape()[5];
    auto at = [&](std::int64_t r) { return scales.data<std::uint8_t>() + scale_index(blocks, scales, r, layer); };
    const std::uint8_t edges[] = {0x00, 0xFE, 0xFF};
    for (std::size_t i = 0; i < unread.size() && i < 3 * 4; ++i)
      at(unread[i])[rng.integer(0, per_row - 1)] = edges[i % 3];
    if (nan_scale && T > 0 && stride > 0) {
      const std::int64_t target = unread[static_cast<std::size_t>(rng.integer(0, std::int64_t(unread.size()) - 1))];
      std::uint8_t* row = at(target);
      for (std::int64_t j = 0; j < per_row; ++j) row[j] = static_cast<std::uint8_t>(rng.integer(120, 122));
      row[rng.integer(0, per_row - 1)] = 0xFF;
      idx[0] = target;
    }
  }
};

const SparseMlaPrefillDriver kDriver;
const bool kRegistered = register_driver(&kDriver);

}  // namespace
}  // namespace mlakit::goldens
