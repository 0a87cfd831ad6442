// Driver of op 1 (docs/lightning_indexer.md): the golden-matrix cases, the input generator, the run wrapper, the
// tolerance and the comparison (exact on exact data, the docs/lightning_indexer.md §6 structural check otherwise).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/validators.hpp"
#include "goldens/common/driver.hpp"
#include "goldens/common/params.hpp"
#include "goldens/common/random.hpp"
#include "mlakit/ops/lightning_indexer.hpp"

namespace mlakit::goldens {
namespace {

constexpr const char* kOp = "lightning_indexer";
constexpr const char* kOut = "out.output_indices";

// Selection bound (docs/lightning_indexer.md §6). An optimized back-end accumulates each head's dot (D terms), the
// weighted sum over H heads and two scalings in f32; each computed score is then within
// (D + H + 2)·u·A ≤ H·D·u·A of the exact one (u = 2^-24, A = |k_scale|·Σ_h |q_s[h]|·Σ_d |q·k|, the sum
// of absolute terms), and comparing two scores of one row doubles that. c = 4 covers both with a
// factor 2 to spare: a row fails when an unselected candidate beats a selected one by more than
// c·H·D·u·max_j A_j over the row's candidates.
constexpr double kSelectionC = 4.0;
constexpr double kUnitRoundoff = 0x1p-24;

json selection_tolerance() {
  return json{{"selection",
               {{"c", kSelectionC},
                {"unit_roundoff", kUnitRoundoff},
                {"reduction_length", "num_heads*head_dim"},
                {"terms", "|k_scale|*sum_h |q_s[t,h]|*sum_d |q[t,h,d]*k[j,d]|, max over the row's candidates"}}}};
}

struct Knobs {
  std::vector<std::int64_t> seq_lens, cache_lens;
  std::int64_t H = 0, D = 0, top_k = 0, page_size = 0, num_layers = 1, layer_idx = 0, qg = 0;
  std::int64_t extra_columns = 1, spare_blocks = 2;
  std::string mask, data, ties, weights;
};

Knobs parse_knobs(const json& defaults, const json& overrides) {
  json k;
  std::string why;
  if (!merge_knobs(defaults, overrides, &k, &why)) throw InputError(std::string(kOp) + ": " + why);
  Knobs r;
  r.seq_lens = k.at("seq_lens").get<std::vector<std::int64_t>>();
  r.cache_lens = k.at("cache_lens").get<std::vector<std::int64_t>>();
  r.H = k.at("num_heads").get<std::int64_t>();
  r.D = k.at("head_dim").get<std::int64_t>();
  r.top_k = k.at("top_k").get<std::int64_t>();
  r.page_size = k.at("page_size").get<std::int64_t>();
  r.num_layers = k.at("num_layers").get<std::int64_t>();
  r.layer_idx = k.at("layer_idx").get<std::int64_t>();
  r.qg = k.at("quant_granularity").get<std::int64_t>();
  if (r.qg == 0) r.qg = r.D;
  r.extra_columns = k.at("extra_columns").get<std::int64_t>();
  r.spare_blocks = k.at("spare_blocks").get<std::int64_t>();
  r.mask = k.at("mask").get<std::string>();
  r.data = k.at("data").get<std::string>();
  r.ties = k.at("ties").get<std::string>();
  r.weights = k.at("weights").get<std::string>();
  auto bad = [](const std::string& what) { throw InputError(std::string(kOp) + ": " + what); };
  if (r.seq_lens.size() != r.cache_lens.size()) bad("seq_lens and cache_lens differ in length");
  for (std::size_t i = 0; i < r.seq_lens.size(); ++i)
    if (r.seq_lens[i] < 0 || r.cache_lens[i] < 0) bad("seq_lens and cache_lens must be >= 0");
  if (r.H < 1 || r.D < 1 || r.top_k < 1 || r.page_size < 1 || r.num_layers < 1 || r.qg < 1)
    bad("num_heads, head_dim, top_k, page_size, num_layers and quant_granularity must be positive");
  if (r.layer_idx < 0 || r.layer_idx >= r.num_layers) bad("layer_idx must be in [0, num_layers)");
  if (r.extra_columns < 0 || r.spare_blocks < 0) bad("extra_columns and spare_blocks must be >= 0");
  if (r.mask != "causal" && r.mask != "none") bad("mask must be \"causal\" or \"none\"");
  if (r.data != "random" && r.data != "exact") bad("data must be \"random\" or \"exact\"");
  if (r.ties != "none" && r.ties != "duplicate_keys" && r.ties != "zero_scores")
    bad("ties must be \"none\", \"duplicate_keys\" or \"zero_scores\"");
  if (r.weights != "mixed" && r.weights != "positive" && r.weights != "negative")
    bad("weights must be \"mixed\", \"positive\" or \"negative\"");
  return r;
}

// Parameters of a bundle, read back from its params (golden files carry nothing else).
struct Params {
  std::int64_t H, D, top_k, qg;
  std::uint32_t layer_idx;
  bool causal;
};

// The params of a golden file (docs/golden-format.md §4); page_size restates the cache's page size.
constexpr ParamSpec kParams[] = {
    size_param("num_heads"),         size_param("head_dim"), size_param("top_k"),
    {"mask", ParamKind::text, true, 0, 0, "causal|none"},
    size_param("quant_granularity"), size_param("layer_idx", 0), size_param("page_size", 1, false),
};

constexpr TensorSpec kTensors[] = {
    {"q", 3},
    {"q_s", 2},
    {"input_row_offsets", 1},
    {"k_cache.blocks", 6},
    {"k_cache.scales", 6},
    {"k_cache.lookup_table", 2},
    {"k_cache.cache_lengths", 1},
    {"out.output_indices", 2, false},
};

Params read_params(const Bundle& b) {
  const ParamReader p(kOp, b.params, kParams);
  Params r{};
  r.H = p.integer("num_heads");
  r.D = p.integer("head_dim");
  r.top_k = p.integer("top_k");
  r.qg = p.integer("quant_granularity");
  r.layer_idx = static_cast<std::uint32_t>(p.integer("layer_idx"));
  r.causal = p.text("mask") == "causal";
  return r;
}

// Where logical key position j of sequence s lives in the bundle's cache (layer `layer`).
struct KeyLocator {
  const Tensor* blocks;
  const Tensor* scales;
  const Tensor* lut;
  std::int64_t layer;
  std::int64_t row(std::int64_t s, std::int64_t j) const {  // element offset of K[j, 0]
    const auto& sh = blocks->shape();  // [nb, 1, L, ps, 1, D]
    const std::int64_t ps = sh[3], cols = lut->shape()[1];
    const std::int64_t blk = lut->data<std::uint32_t>()[s * cols + j / ps];
    return ((blk * sh[2] + layer) * ps + j % ps) * sh[5];
  }
  std::int64_t scale(std::int64_t s, std::int64_t j) const { return row(s, j) / blocks->shape()[5]; }
};

KeyLocator locate(const Bundle& b, std::int64_t layer) {
  return KeyLocator{&b.at("k_cache.blocks"), &b.at("k_cache.scales"), &b.at("k_cache.lookup_table"), layer};
}

double fp8(std::uint8_t c) { return static_cast<double>(f8e4m3_to_f32(c)); }

// docs/lightning_indexer.md §6 structural check of one [T, top_k] selection against scores recomputed from b's inputs.
Comparison check_selection(const Bundle& b, const Tensor& out, const std::string& name) {
  Comparison c;
  c.name = name;
  c.kind = "selection";
  const Params p = read_params(b);
  const Tensor& q = b.at("q");
  const Tensor& q_s = b.at("q_s");
  const Tensor& offsets = b.at("input_row_offsets");
  const Tensor& lens = b.at("k_cache.cache_lengths");
  const std::int64_t T = q.shape()[0], H = p.H, D = p.D, top_k = p.top_k;
  if (out.dtype() != DType::i32 || out.shape() != std::vector<std::int64_t>{T, top_k}) {
    c.pass = false;
    c.mismatches = 1;
    c.detail = name + ": expected i32 [" + std::to_string(T) + ", " + std::to_string(top_k) + "]";
    return c;
  }
  const KeyLocator loc = locate(b, p.layer_idx);
  const auto* k8 = loc.blocks->data<std::uint8_t>();
  const auto* ks = loc.scales->data<float>();
  const auto* o = out.data<std::int32_t>();
  // Records a failing row (the first one is described) and returns false.
  auto fail = [&](std::int64_t t, const std::string& why, std::int64_t col) {
    if (c.mismatches++ == 0) {
      c.detail = name + " row " + std::to_string(t) + ": " + why;
      c.worst_index = t * top_k + std::max<std::int64_t>(col, 0);
    }
    c.pass = false;
    return false;
  };
  const std::int64_t B = offsets.numel() - 1;
  std::vector<double> s, abs_terms, qd(H * D), kd(D);
  for (std::int64_t seq = 0; seq < B; ++seq) {
    const std::int64_t first = offsets.data<std::uint32_t>()[seq], last = offsets.data<std::uint32_t>()[seq + 1];
    const std::int64_t cl = lens.data<std::uint32_t>()[seq];
    for (std::int64_t t = first; t < last; ++t) {
      const std::int64_t n = p.causal ? cl + (t - first) + 1 : cl + (last - first);
      s.assign(n, 0.0);
      abs_terms.assign(n, 0.0);
      double max_abs = 0;
      for (std::int64_t e = 0; e < H * D; ++e) qd[e] = fp8(q.data<std::uint8_t>()[t * H * D + e]);
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t kr = loc.row(seq, j);
        for (std::int64_t d = 0; d < D; ++d) kd[d] = fp8(k8[kr + d]);
        const double kscale = ks[loc.scale(seq, j)];
        double total = 0, total_abs = 0;
        for (std::int64_t h = 0; h < H; ++h) {
          double dot = 0, dot_abs = 0;
          for (std::int64_t d = 0; d < D; ++d) {
            const double prod = qd[h * D + d] * kd[d];
            dot += prod;
            dot_abs += std::fabs(prod);
          }
          const double w = q_s.data<float>()[t * H + h];
          total += (std::isnan(dot) ? dot : std::max(dot, 0.0)) * w;
          total_abs += dot_abs * std::fabs(w);
        }
        s[j] = kscale * total;
        abs_terms[j] = std::fabs(kscale) * total_abs;
        if (abs_terms[j] > max_abs) max_abs = abs_terms[j];  // NaN never compares greater
      }
      const double bound = kSelectionC * static_cast<double>(H * D) * kUnitRoundoff * max_abs;
      const std::int64_t m = std::min(top_k, n);
      const std::int32_t* row = o + t * top_k;
      std::vector<char> seen(n, 0);
      bool row_ok = true;
      for (std::int64_t col = 0; col < top_k && row_ok; ++col) {
        const std::int64_t v = row[col];
        if (col >= m) {
          if (v != -1)
            row_ok = fail(t, "column " + std::to_string(col) + " holds " + std::to_string(v) +
                                 " (expected the -1 tail; m=" + std::to_string(m) + ")", col);
        } else if (v < 0 || v >= n) {
          row_ok = fail(t, "column " + std::to_string(col) + " holds " + std::to_string(v) +
                               " (expected a position in [0, " + std::to_string(n) + "))", col);
        } else if (seen[v]) {
          row_ok = fail(t, "position " + std::to_string(v) + " selected twice", col);
        } else {
          seen[v] = 1;
        }
      }
      if (!row_ok) continue;
      // Numbers first (ordered within the bound), then NaNs.
      std::int64_t first_nan = m;
      for (std::int64_t col = 0; col < m; ++col)
        if (std::isnan(s[row[col]])) { first_nan = col; break; }
      for (std::int64_t col = first_nan; col < m && row_ok; ++col)
        if (!std::isnan(s[row[col]])) row_ok = fail(t, "a number follows a NaN score at column " + std::to_string(col), col);
      // No column may outrank an earlier one by more than the bound: compare with the lowest
      // score among the columns before it.
      double lowest_selected = std::numeric_limits<double>::infinity();
      std::int64_t lowest_col = -1;
      for (std::int64_t col = 0; col < first_nan && row_ok; ++col) {
        const double excess = s[row[col]] - lowest_selected - bound;
        if (excess > 0) {
          std::ostringstream w;
          w.precision(17);
          w << "column " << col << " (position " << row[col] << ", score " << s[row[col]] << ") outranks column "
            << lowest_col << " (position " << row[lowest_col] << ", score " << lowest_selected
            << ") by more than the bound " << bound;
          row_ok = fail(t, w.str(), col);
          c.max_abs_err = std::max(c.max_abs_err, excess);
        }
        if (s[row[col]] < lowest_selected) {
          lowest_selected = s[row[col]];
          lowest_col = col;
        }
      }
      if (!row_ok) continue;
      std::int64_t unselected_nan_below = -1;  // the smallest unselected NaN position
      for (std::int64_t j = 0; j < n && row_ok; ++j) {
        if (seen[j]) continue;
        if (std::isnan(s[j])) {
          if (unselected_nan_below < 0) unselected_nan_below = j;
          continue;
        }
        if (first_nan < m) {
          row_ok = fail(t, "position " + std::to_string(j) + " (a number) is left out while a NaN score is selected",
                        first_nan);
        } else if (s[j] - lowest_selected > bound) {
          std::ostringstream w;
          w.precision(17);
          w << "unselected position " << j << " scores " << s[j] << ", above the selected minimum "
            << lowest_selected << " by more than the bound " << bound;
          row_ok = fail(t, w.str(), m - 1);
          c.max_abs_err = std::max(c.max_abs_err, s[j] - lowest_selected);
        }
      }
      // Selected NaNs: the smallest NaN positions, in increasing order.
      for (std::int64_t col = first_nan; col < m && row_ok; ++col) {
        if (col > first_nan && row[col] < row[col - 1])
          row_ok = fail(t, "NaN scores out of position order at column " + std::to_string(col), col);
        else if (unselected_nan_below >= 0 && unselected_nan_below < row[col])
          row_ok = fail(t, "NaN position " + std::to_string(row[col]) + " selected before NaN position " +
                      std::to_string(unselected_nan_below), col);
      }
    }
  }
  return c;
}

class LightningIndexerDriver final : public OpDriver {
 public:
  const char* name() const override { return kOp; }

  json default_knobs() const override {
    return json{{"seq_lens", {24, 8}},
                {"cache_lens", {40, 0}},
                {"num_heads", 64},
                {"head_dim", 128},
                {"top_k", 32},
                {"mask", "causal"},
                {"page_size", 64},
                {"num_layers", 1},
                {"layer_idx", 0},
                {"quant_granularity", 0},   // 0: head_dim
                {"data", "random"},         // "random" | "exact" (every score exact in f32 and distinct)
                {"ties", "none"},           // "none" | "duplicate_keys" (groups of 3) | "zero_scores" (even rows)
                {"weights", "mixed"},       // sign of q_s: "mixed" | "positive" | "negative"
                {"extra_columns", 1},       // sentinel lookup-table columns past the longest sequence
                {"spare_blocks", 2}};       // cache blocks no sequence owns (raised to hold >= 256 elements)
  }

  std::vector<CaseSpec> cases() const override {
    // Small shapes (each well under 0.2 s on the reference). Random cases hold all 256 fp8 codes in
    // q and in the K rows the call reads (NaN 0x7F/0xFF, subnormals, ±0).
    return {
        {"basic_causal", "one sequence, causal, H=4, D=32", {{"seq_lens", {12}}, {"cache_lens", {20}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 8}, {"page_size", 16}}},
        {"ragged_empty_seq", "B=4 ragged with an empty sequence (its table row is all sentinels)", {{"seq_lens", {5, 0, 9, 3}}, {"cache_lens", {11, 0, 4, 30}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 10}, {"page_size", 8}}},
        {"cache_len_zero", "no cached tokens: only this step's keys", {{"seq_lens", {10, 6}}, {"cache_lens", {0, 0}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 6}, {"page_size", 4}}},
        {"page_size_3", "page size 3 (not a power of two), shuffled pages", {{"seq_lens", {7, 4}}, {"cache_lens", {13, 5}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 9}, {"page_size", 3}, {"extra_columns", 3}}},
        {"page_size_48", "page size 48 across several pages", {{"seq_lens", {9}}, {"cache_lens", {100}}, {"num_heads", 2}, {"head_dim", 32}, {"top_k", 16}, {"page_size", 48}}},
        {"top_k_above_candidates", "top_k larger than every row's candidate count: -1 tails", {{"seq_lens", {6, 3}}, {"cache_lens", {5, 0}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 40}, {"page_size", 8}}},
        {"top_k_1", "top_k = 1", {{"seq_lens", {8, 5}}, {"cache_lens", {3, 17}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 1}, {"page_size", 8}}},
        {"mask_none", "mask none: every row sees the whole sequence", {{"seq_lens", {7, 0, 5}}, {"cache_lens", {9, 3, 0}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 12}, {"page_size", 5}, {"mask", "none"}}},
        {"decode", "decode: one token per sequence", {{"seq_lens", {1, 1, 1, 1}}, {"cache_lens", {0, 33, 64, 7}}, {"num_heads", 8}, {"head_dim", 64}, {"top_k", 16}, {"page_size", 16}}},
        {"h1_small_d", "one head, D=16", {{"seq_lens", {20}}, {"cache_lens", {12}}, {"num_heads", 1}, {"head_dim", 16}, {"top_k", 7}, {"page_size", 8}}},
        {"h64_d128", "DeepSeek head shape H=64, D=128", {{"seq_lens", {3, 2}}, {"cache_lens", {17, 6}}, {"num_heads", 64}, {"head_dim", 128}, {"top_k", 8}, {"page_size", 16}}},
        {"quant_granularity_above_d", "quant_granularity 256 > D=128: one scale per token", {{"seq_lens", {4}}, {"cache_lens", {10}}, {"num_heads", 4}, {"head_dim", 128}, {"top_k", 5}, {"page_size", 8}, {"quant_granularity", 256}}},
        {"multi_layer", "3-layer cache, layer_idx 2", {{"seq_lens", {6, 4}}, {"cache_lens", {10, 2}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 8}, {"page_size", 8}, {"num_layers", 3}, {"layer_idx", 2}}},
        {"negative_weights", "every q_s negative: many zero and negative scores", {{"seq_lens", {8}}, {"cache_lens", {12}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 10}, {"page_size", 8}, {"weights", "negative"}}},
        {"duplicate_keys_random", "identical K rows in groups of 3 (exact ties)", {{"seq_lens", {6}}, {"cache_lens", {12}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 9}, {"page_size", 8}, {"ties", "duplicate_keys"}}},
        {"exact_causal", "exact data, causal, H=4, D=32", {{"seq_lens", {9, 4}}, {"cache_lens", {14, 0}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 12}, {"page_size", 8}, {"data", "exact"}}},
        {"exact_none_h64_small_d", "exact data, mask none, H=64, D=16", {{"seq_lens", {5, 3}}, {"cache_lens", {11, 20}}, {"num_heads", 64}, {"head_dim", 16}, {"top_k", 10}, {"page_size", 3}, {"mask", "none"}, {"data", "exact"}}},
        {"exact_h1", "exact data, one head (the position tag alone orders keys)", {{"seq_lens", {7}}, {"cache_lens", {9}}, {"num_heads", 1}, {"head_dim", 16}, {"top_k", 6}, {"page_size", 4}, {"data", "exact"}}},
        {"exact_h64_d128", "exact data, H=64, D=128, multi-layer", {{"seq_lens", {3, 2}}, {"cache_lens", {12, 30}}, {"num_heads", 64}, {"head_dim", 128}, {"top_k", 16}, {"page_size", 16}, {"num_layers", 2}, {"layer_idx", 1}, {"data", "exact"}}},
        {"exact_duplicate_keys", "exact data with identical K rows in groups of 3: ties go to the smaller position", {{"seq_lens", {6, 5}}, {"cache_lens", {10, 4}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 14}, {"page_size", 8}, {"data", "exact"}, {"ties", "duplicate_keys"}}},
        {"exact_zero_scores", "exact data; even rows have q_s = ±0: all scores ±0, order by position", {{"seq_lens", {8}}, {"cache_lens", {6}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 10}, {"page_size", 8}, {"data", "exact"}, {"ties", "zero_scores"}}},
        {"exact_negative_weights", "exact data, every q_s negative", {{"seq_lens", {6, 6}}, {"cache_lens", {7, 3}}, {"num_heads", 8}, {"head_dim", 32}, {"top_k", 8}, {"page_size", 5}, {"data", "exact"}, {"weights", "negative"}}},
        {"exact_top_k_above_candidates", "exact data, top_k above the candidate count, mask none", {{"seq_lens", {4, 0, 2}}, {"cache_lens", {3, 0, 0}}, {"num_heads", 8}, {"head_dim", 32}, {"top_k", 20}, {"page_size", 2}, {"mask", "none"}, {"data", "exact"}}},
    };
  }

  CaseSpec default_case() const override {
    return {"default", "DeepSeek-V3.2 shape (H=64, D=128), ragged prefill over a cache",
            {{"seq_lens", {32, 16}}, {"cache_lens", {192, 320}}, {"num_heads", 64}, {"head_dim", 128}, {"top_k", 128}, {"page_size", 64}}};
  }

  std::vector<CaseSpec> bench_cases() const override {
    std::vector<CaseSpec> v;
    auto add = [&](const std::string& name, const std::string& what, std::vector<std::int64_t> seq,
                   std::vector<std::int64_t> cache, std::int64_t H, std::int64_t ps) {
      v.push_back({name, what, {{"seq_lens", seq}, {"cache_lens", cache}, {"num_heads", H}, {"head_dim", 128}, {"top_k", 2048}, {"page_size", ps}}});
    };
    for (std::int64_t H : {64, 32}) {
      const std::string h = "_h" + std::to_string(H);
      add("prefill_b1_s4096_c0" + h, "prefill, B=1, seq 4096, empty cache", {4096}, {0}, H, 64);
      add("prefill_b1_s4096_c8192" + h, "prefill, B=1, seq 4096, cache 8192", {4096}, {8192}, H, 64);
      add("prefill_b4_s1024_c4096" + h, "prefill, B=4, seq 1024, cache 4096", {1024, 1024, 1024, 1024}, {4096, 4096, 4096, 4096}, H, 64);
      for (std::int64_t c : {8192, 32768, 131072}) {
        add("decode_b1_c" + std::to_string(c) + h, "decode, B=1", {1}, {c}, H, 64);
        add("decode_b32_c" + std::to_string(c) + h, "decode, B=32", std::vector<std::int64_t>(32, 1),
            std::vector<std::int64_t>(32, c), H, 64);
      }
    }
    add("prefill_b1_s4096_c8192_h64_p128", "prefill, page size 128", {4096}, {8192}, 64, 128);
    add("decode_b32_c32768_h64_p128", "decode, page size 128", std::vector<std::int64_t>(32, 1),
        std::vector<std::int64_t>(32, 32768), 64, 128);
    return v;
  }

  Bundle generate(const json& knobs, std::uint64_t seed) const override {
    const Knobs k = parse_knobs(default_knobs(), knobs);
    Rng rng(seed);
    Bundle b;
    b.op = kOp;
    const std::int64_t B = static_cast<std::int64_t>(k.seq_lens.size());
    std::int64_t T = 0;
    std::vector<std::int64_t> needed(B);
    for (std::int64_t s = 0; s < B; ++s) {
      T += k.seq_lens[s];
      needed[s] = k.cache_lens[s] + k.seq_lens[s];
    }
    make_row_offsets(b, "input_row_offsets", k.seq_lens);
    CacheLayout layout;
    layout.page_size = k.page_size;
    layout.kv_dim = 1;
    layout.num_layers = k.num_layers;
    layout.num_kv_heads = 1;
    layout.head_size = k.D;
    layout.dtype = DType::f8e4m3;
    layout.quant_granularity = k.qg;
    // Spare blocks hold at least 256 elements, so that every fp8 code can sit in rows no one reads.
    layout.spare_blocks = std::max(k.spare_blocks, (256 + k.page_size * k.D - 1) / (k.page_size * k.D));
    layout.extra_columns = k.extra_columns;
    make_paged_cache(b, "k_cache", layout, k.cache_lens, needed, rng);

    // Random data everywhere, including rows and layers the call never reads.
    Tensor& blocks = b.at("k_cache.blocks");
    fill_fp8(blocks, rng, 1.0, blocks.numel() >= 256);
    Tensor& scales = b.at("k_cache.scales");
    fill_uniform(scales, rng, 0.004, 0.06);
    Tensor& q = b.add("q", DType::f8e4m3, {T, k.H, k.D});
    fill_fp8(q, rng, 1.0, q.numel() >= 256);
    Tensor& q_s = b.add("q_s", DType::f32, {T, k.H});
    fill_normal(q_s, rng, 0.25);

    const KeyLocator loc = locate(b, k.layer_idx);
    // The key positions this call reads: (sequence, position) for sequences with rows.
    std::vector<std::pair<std::int64_t, std::int64_t>> read;
    for (std::int64_t s = 0; s < B; ++s)
      if (k.seq_lens[s] > 0)
        for (std::int64_t j = 0; j < needed[s]; ++j) read.emplace_back(s, j);

    if (k.data == "exact") {
      fill_exact(b, k, read, rng);
    } else {
      // All 256 codes inside the K rows that are read (the whole-cache fill may have put them elsewhere).
      const std::int64_t slots = static_cast<std::int64_t>(read.size()) * k.D;
      if (slots >= 256) {
        std::vector<std::int64_t> picked;
        while (picked.size() < 256) {
          const std::int64_t p = rng.integer(0, slots - 1);
          if (std::find(picked.begin(), picked.end(), p) == picked.end()) picked.push_back(p);
        }
        for (int code = 0; code < 256; ++code) {
          const auto [s, j] = read[picked[code] / k.D];
          blocks.data<std::uint8_t>()[loc.row(s, j) + picked[code] % k.D] = static_cast<std::uint8_t>(code);
        }
      }
      for (std::int64_t i = 0; i < q_s.numel(); ++i) apply_sign(q_s.data<float>()[i], k.weights);
      if (k.ties == "zero_scores") zero_even_rows(b, k, rng);
    }
    if (k.ties == "duplicate_keys") {
      // Positions 3g+1 and 3g+2 copy position 3g: identical K rows and scales, identical scores.
      for (const auto& [s, j] : read) {
        if (j % 3 == 0) continue;
        const std::int64_t src = j - j % 3;
        std::copy_n(blocks.data<std::uint8_t>() + loc.row(s, src), k.D, blocks.data<std::uint8_t>() + loc.row(s, j));
        scales.data<float>()[loc.scale(s, j)] = scales.data<float>()[loc.scale(s, src)];
      }
    }
    // Every code in the cache tensor as a whole as well (the exact data and the duplicates above may
    // have overwritten the fill's): 256 distinct elements of rows this call does not read.
    place_codes_in_unread_rows(blocks, loc, read, k.D, rng);

    b.params = json{{"num_heads", k.H}, {"head_dim", k.D}, {"top_k", k.top_k}, {"mask", k.mask},
                    {"quant_granularity", k.qg}, {"layer_idx", k.layer_idx}, {"page_size", k.page_size}};
    b.tolerance = json{{kOut, k.data == "exact" ? json{{"exact", true}} : selection_tolerance()}};
    return b;
  }

  void check_inputs(const Bundle& b) const override {
    check_tensors(kOp, b, kTensors);
    ParamReader(kOp, b.params, kParams).agrees("page_size", b.at("k_cache.blocks").shape()[3], "k_cache.blocks.shape[3]");
  }

  void prepare_outputs(Bundle& b) const override {
    check_inputs(b);
    b.remove_outputs();
    b.add(kOut, DType::i32, {b.at("q").shape()[0], read_params(b).top_k}).poison();
  }

  Status validate(const Bundle& b) const override {
    const Params p = read_params(b);
    MemorySpace space;
    return core::validate_lightning_indexer(desc_of(p), args_of(b, p), &space);
  }

  Status call(Bundle& b, const RunOptions& options) const override {
    const Params p = read_params(b);
    return lightning_indexer(desc_of(p), args_of(b, p), options);
  }

  Status call_planned(Bundle& b, PlannedRun* pr) const override {
    const Params p = read_params(b);
    return plan_and_run(desc_of(p), args_of(b, p), pr);
  }

  Status plan(const Bundle& b, const PlanOptions& options, std::unique_ptr<PlannedCall>* out) const override {
    return make_planned_call(desc_of(read_params(b)), b, [](const Bundle& r) { return args_of(r, read_params(r)); },
                             options, out);
  }

  static LightningIndexerDesc desc_of(const Params& p) {
    LightningIndexerDesc d;
    d.num_heads = p.H;
    d.head_dim = p.D;
    d.top_k = p.top_k;
    d.mask = p.causal ? IndexerMask::causal : IndexerMask::none;
    return d;
  }

  static LightningIndexerArgs args_of(const Bundle& b, const Params& p) {
    const Tensor& out = b.at(kOut);
    LightningIndexerArgs a;
    a.q = b.at("q").view();
    a.q_s = b.at("q_s").view();
    a.input_row_offsets = b.at("input_row_offsets").view();
    a.k_cache = cache_view(b, "k_cache", p.qg);
    a.layer_idx = p.layer_idx;
    a.output_indices = out.view();
    return a;
  }

  json tolerance(const Bundle& b) const override {
    // Exact data (every score exact in f32 for any summation order): bit-exact indices. Otherwise
    // the structural check of docs/lightning_indexer.md §6 with the bound described at kSelectionC.
    if (b.tolerance.is_object() && b.tolerance.contains(kOut)) return json{{kOut, b.tolerance.at(kOut)}};
    return json{{kOut, selection_tolerance()}};
  }

  std::vector<Comparison> compare(const Bundle& expected, const Bundle& candidate) const override {
    // The file says whether its data is exact; the selection bound is this driver's own.
    const ToleranceReader tol(kOp, expected.tolerance, json{{kOut, selection_tolerance()}});
    if (tol.flag(kOut, "exact")) return {compare_exact(kOut, expected.at(kOut), candidate.at(kOut))};
    // Structural: the candidate, and the expected output as well (so that a faulty golden output or
    // oracle cannot pass unnoticed), each against scores recomputed here from the inputs.
    return {check_selection(candidate, candidate.at(kOut), kOut),
            check_selection(expected, expected.at(kOut), std::string(kOut) + " (expected)")};
  }

  Work work(const Bundle& b) const override {
    const Params p = read_params(b);
    const Tensor& offsets = b.at("input_row_offsets");
    const Tensor& lens = b.at("k_cache.cache_lengths");
    const std::int64_t T = b.at("q").shape()[0];
    double pairs = 0, keys = 0;
    for (std::int64_t s = 0; s + 1 < offsets.numel(); ++s) {
      const double seq = double(offsets.data<std::uint32_t>()[s + 1]) - double(offsets.data<std::uint32_t>()[s]);
      const double cl = lens.data<std::uint32_t>()[s];
      if (seq == 0) continue;
      pairs += p.causal ? seq * cl + seq * (seq + 1) / 2 : seq * (cl + seq);
      keys += cl + seq;
    }
    Work w;
    w.flops = 2.0 * double(p.H) * double(p.D) * pairs;
    w.bytes = double(T) * double(p.H) * double(p.D + 4) + keys * double(p.D + 4) + double(T) * double(p.top_k) * 4;
    return w;
  }

 private:
  static void apply_sign(float& w, const std::string& mode) {
    if (mode == "positive") w = std::fabs(w);
    if (mode == "negative") w = -std::fabs(w);
  }

  // Even rows get q_s = ±0 (random signs): every score of the row is +0 or −0.
  static void zero_even_rows(Bundle& b, const Knobs& k, Rng& rng) {
    Tensor& q_s = b.at("q_s");
    for (std::int64_t t = 0; t < q_s.shape()[0]; t += 2)
      for (std::int64_t h = 0; h < k.H; ++h) q_s.data<float>()[t * k.H + h] = rng.integer(0, 1) ? 0.0f : -0.0f;
  }

  // Exact data: every score is exact in f32 whatever the summation order, and the scores of a row
  // are distinct (unless `ties` asks otherwise). In units of a = 2^-3:
  //   k_scale[j] = a·σ_j,  σ_j ∈ {1, 2}
  //   head 0 is a position tag: q[t,0,·] is 8^k·2^-9 on the last nd dims, 0 elsewhere, and K[j,·] holds
  //   the base-8 digits of τ_j = 2g+1 there (g = j, or j/3 with duplicate keys): dot_0 = τ_j·2^-9 > 0;
  //   heads h >= 1 see only the other dims: q ∈ {0, ±1, ±2} (nnz non-zeros), K ∈ {-2..2}: integer dots;
  //   q_s[t,0] = ±2^e0 with |q_s[t,0]|·τ_max·2^-9 <= 1/4, q_s[t,h] ∈ {±1, ±2}.
  // Score/a = σ_j·(M + f_j) with M an integer and |f_j| < 1/4 of one sign per row: σ_j·f_j is the
  // fractional part and its odd factor τ_j names g, so two positions can tie only within a group of
  // duplicates. All values are multiples of 2^(e0-9) below 2^(14+e0) in magnitude: 23 bits at most.
  // NaN is exact too: about one key in ten holds a NaN code, and where q has >= 256 elements a few
  // rows carry all 256 codes plus a NaN (all their scores are NaN, ranked by position).
  static void fill_exact(Bundle& b, const Knobs& k, const std::vector<std::pair<std::int64_t, std::int64_t>>& read,
                         Rng& rng) {
    const bool dup = k.ties == "duplicate_keys";
    std::int64_t tag_max = 1;
    for (const auto& [s, j] : read) tag_max = std::max(tag_max, 2 * (dup ? j / 3 : j) + 1);
    std::int64_t nd = 1;
    while ((std::int64_t{1} << (3 * nd)) <= tag_max) ++nd;
    const std::int64_t Dm = k.D - nd;  // dims seen by heads >= 1
    if (nd > 6 || Dm < (k.H > 1 ? 1 : 0))
      throw InputError("lightning_indexer: exact data needs head_dim >= " + std::to_string(nd + 1) +
                                  " and at most 2^17 positions");
    int e0 = 7;  // the largest e with 2^e·tag_max <= 128 (exact arithmetic: files regenerate bit for bit)
    while (std::ldexp(static_cast<double>(tag_max), e0) > 128.0) --e0;
    // |M| <= 8·(H-1)·nnz must stay below 2^(14+e0) - 1.
    std::int64_t nnz = Dm;
    if (k.H > 1) {
      const double budget = std::ldexp(1.0, 14 + e0) - 1.0;
      nnz = std::min<std::int64_t>(Dm, static_cast<std::int64_t>(budget / (8.0 * double(k.H - 1))));
      if (nnz < 1) throw InputError("lightning_indexer: exact data does not fit in f32 for this shape");
    }

    Tensor& blocks = b.at("k_cache.blocks");
    Tensor& scales = b.at("k_cache.scales");
    Tensor& q = b.at("q");
    Tensor& q_s = b.at("q_s");
    const KeyLocator loc = locate(b, k.layer_idx);
    for (const auto& [s, j] : read) {
      std::uint8_t* row = blocks.data<std::uint8_t>() + loc.row(s, j);
      for (std::int64_t d = 0; d < Dm; ++d) row[d] = f32_to_f8e4m3(static_cast<float>(rng.integer(-2, 2)));
      std::int64_t tag = 2 * (dup ? j / 3 : j) + 1;
      for (std::int64_t dd = 0; dd < nd; ++dd, tag >>= 3) row[Dm + dd] = f32_to_f8e4m3(static_cast<float>(tag & 7));
      scales.data<float>()[loc.scale(s, j)] = rng.integer(0, 1) ? 0.125f : 0.25f;
    }
    const std::int64_t T = q.shape()[0];
    auto sign = [&]() -> float {
      if (k.weights == "positive") return 1.0f;
      if (k.weights == "negative") return -1.0f;
      return rng.integer(0, 1) ? 1.0f : -1.0f;
    };
    std::vector<std::int64_t> dims(Dm);
    for (std::int64_t t = 0; t < T; ++t) {
      std::uint8_t* qt = q.data<std::uint8_t>() + t * k.H * k.D;
      std::fill(qt, qt + k.H * k.D, std::uint8_t{0});
      for (std::int64_t dd = 0; dd < nd; ++dd) qt[Dm + dd] = f32_to_f8e4m3(std::ldexp(1.0f, static_cast<int>(3 * dd) - 9));
      q_s.data<float>()[t * k.H] = sign() * std::ldexp(1.0f, e0);
      for (std::int64_t h = 1; h < k.H; ++h) {
        for (std::int64_t d = 0; d < Dm; ++d) dims[d] = d;
        rng.shuffle(dims);
        for (std::int64_t i = 0; i < nnz; ++i) {
          const std::int64_t v = rng.integer(1, 2) * (rng.integer(0, 1) ? 1 : -1);
          qt[h * k.D + dims[i]] = f32_to_f8e4m3(static_cast<float>(v));
        }
        q_s.data<float>()[t * k.H + h] = sign() * static_cast<float>(rng.integer(1, 2));
      }
    }
    // A few NaN keys: a NaN code in the row makes the key's score NaN in every query row, so the
    // exact comparison covers the NaN rules too.
    for (const auto& [s, j] : read)
      if (rng.integer(0, 9) == 0)
        blocks.data<std::uint8_t>()[loc.row(s, j) + rng.integer(0, k.D - 1)] = rng.integer(0, 1) ? 0x7F : 0xFF;
    // Every fp8 code in q, as the random data have: a few rows carry them, each with a NaN code
    // too, so all of those rows' scores are NaN (exact, ordered by position) whatever the other codes.
    const std::int64_t per_row = k.H * k.D;
    if (q.numel() >= 256 && per_row >= 2) {
      const std::int64_t rows_needed = (255 + per_row - 2) / (per_row - 1);
      if (rows_needed <= T) {
        std::vector<std::int64_t> rows(T), slots(per_row);
        for (std::int64_t t = 0; t < T; ++t) rows[t] = t;
        rng.shuffle(rows);
        int next_code = 0;
        for (std::int64_t r = 0; r < rows_needed; ++r) {
          std::uint8_t* qt = q.data<std::uint8_t>() + rows[r] * per_row;
          for (std::int64_t i = 0; i < per_row; ++i) slots[i] = i;
          rng.shuffle(slots);
          qt[slots[0]] = 0x7F;
          for (std::int64_t i = 1; i < per_row && next_code < 256; ++i, ++next_code) {
            if (next_code == 0x7F) ++next_code;
            if (next_code < 256) qt[slots[i]] = static_cast<std::uint8_t>(next_code);
          }
        }
      }
    }
    if (k.ties == "zero_scores") zero_even_rows(b, k, rng);
  }

  // 256 distinct elements outside the rows the call reads receive the codes 0x00..0xFF (when there
  // are that many).
  static void place_codes_in_unread_rows(Tensor& blocks, const KeyLocator& loc,
                                         const std::vector<std::pair<std::int64_t, std::int64_t>>& read,
                                         std::int64_t D, Rng& rng) {
    std::vector<char> is_read(blocks.numel() / D, 0);
    for (const auto& [s, j] : read) is_read[loc.row(s, j) / D] = 1;
    std::vector<std::int64_t> unread;
    for (std::int64_t r = 0; r < static_cast<std::int64_t>(is_read.size()); ++r)
      if (!is_read[r]) unread.push_back(r);
    const std::int64_t slots = static_cast<std::int64_t>(unread.size()) * D;
    if (slots < 256) return;
    std::vector<std::int64_t> picked;
    while (picked.size() < 256) {
      const std::int64_t p = rng.integer(0, slots - 1);
      if (std::find(picked.begin(), picked.end(), p) == picked.end()) picked.push_back(p);
    }
    for (int code = 0; code < 256; ++code)
      blocks.data<std::uint8_t>()[unread[picked[code] / D] * D + picked[code] % D] = static_cast<std::uint8_t>(code);
  }
};

const LightningIndexerDriver kDriver;
const bool kRegistered = register_driver(&kDriver);

}  // namespace
}  // namespace mlakit::goldens
