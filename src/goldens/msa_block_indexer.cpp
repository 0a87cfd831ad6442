// Driver of the MSA block indexer (docs/msa_block_indexer.md): golden-matrix cases, generator, runner, tolerance,
// comparison and work estimate.
//
// Data modes (knob "data"):
//  * "random": q and K ~ normal(0, 1) rounded to bf16 (an f8e4m3 cache holds all 256 codes).
//    Compared structurally (docs/msa_block_indexer.md §6) with a per-row score bound.
//  * "exact": small integers (q in [-16, 16], K in [-16, 16]) and a power-of-two scale, so every
//    score is exact in f32 whatever the summation order; q rows are redrawn (up to 200 times) until
//    the competing (not forced, not NaN) block maxima of every (head, row) are distinct, except
//    with "ties" or scale 0, where equal maxima are the point. Ties that remain are still decided
//    exactly by the spec's rule. An f8e4m3 cache still holds all 256 codes; q then shrinks to
//    [-m, m] with Di·m·448 < 2^15 so that sums of multiples of 2^-9 stay exact (Di <= 73).
//    Compared exactly.
// Whether a bundle's scores are exact is decided from its inputs (tolerance()), not from the
// knob, so golden files written by anyone compare the right way.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/validators.hpp"
#include "goldens/common/driver.hpp"
#include "goldens/common/params.hpp"
#include "goldens/common/random.hpp"
#include "mlakit/ops/msa_block_indexer.hpp"

namespace mlakit::goldens {
namespace {

constexpr const char* kName = "msa_block_indexer";
constexpr const char* kOut = "out.out_idxs";
// Structural bound (docs/msa_block_indexer.md §6). An f32 kernel's score of key j differs from the f64 one by at
// most about (Di + 1)·u·|scale|·Σ_d |q_d·k_jd| (Di exact bf16/f8 products summed in any order, then
// the scale product); a block max inherits the bound of its keys, and comparing two blocks doubles
// it. c = 4 allows 2·Di·u per score: the (Di + 1) with a factor of about 2 to spare.
constexpr double kBoundC = 4.0;
constexpr double kUnitRoundoff = 0x1p-24;

constexpr double kInitScore = static_cast<double>(1e30f);
constexpr double kLocalScore = static_cast<double>(1e29f);

struct Params {
  std::int64_t heads = 0, dim = 0, block_size = 0, topk = 0, init = 0, local = 0;
  std::int64_t k_heads = 1;  // Hk; index head h reads K head h / (heads / k_heads)
  bool reduce = false;       // one selection per row over the heads' maximum
  float scale = 0;
  std::uint32_t layer = 0;
  std::int64_t group() const { return heads / k_heads; }
  std::int64_t selections() const { return reduce ? 1 : heads; }
};

// The params of a golden file (docs/golden-format.md §4); page_size restates the cache's page size.
constexpr ParamSpec kParams[] = {
    size_param("num_index_heads"), size_param("idx_head_dim"), size_param("block_size"),
    size_param("topk"),            count_param("init_blocks"),   count_param("local_blocks"),
    float_param("scale"),          size_param("layer_idx", 0),   size_param("page_size", 1, false),
    size_param("num_k_heads", 1, false), {"reduce_heads", ParamKind::boolean, false},
};

constexpr TensorSpec kTensors[] = {
    {"q", 3},
    {"input_row_offsets", 1},
    {"prefix_lens", 1},
    {"k_cache.blocks", 6},
    {"k_cache.scales", 6, false},
    {"k_cache.lookup_table", 2},
    {"k_cache.cache_lengths", 1},
    {"out.out_idxs", 3, false},
};

Params params_of(const Bundle& b) {
  const ParamReader r(kName, b.params, kParams);
  Params p;
  p.heads = r.integer("num_index_heads");
  p.dim = r.integer("idx_head_dim");
  p.block_size = r.integer("block_size");
  p.topk = r.integer("topk");
  p.init = r.integer("init_blocks");
  p.local = r.integer("local_blocks");
  p.scale = static_cast<float>(r.number("scale"));
  p.layer = static_cast<std::uint32_t>(r.integer("layer_idx"));
  p.k_heads = r.integer_or("num_k_heads", 1);
  p.reduce = r.boolean_or("reduce_heads", false);
  return p;
}

// Read access to a bundle's inputs: sequences, q and the cache rows of one layer, in f64.
class Inputs {
 public:
  explicit Inputs(const Bundle& b)
      : p(params_of(b)),
        q_(b.at("q")),
        offsets_(b.at("input_row_offsets")),
        prefix_(b.at("prefix_lens")),
        blocks_(b.at("k_cache.blocks")),
        lut_(b.at("k_cache.lookup_table")) {}

  Params p;
  std::int64_t batch() const { return offsets_.numel() - 1; }
  std::int64_t rows() const { return q_.shape()[0]; }
  std::int64_t row_begin(std::int64_t s) const { return offsets_.data<std::uint32_t>()[s]; }
  std::int64_t row_end(std::int64_t s) const { return offsets_.data<std::uint32_t>()[s + 1]; }
  std::int64_t prefix(std::int64_t s) const { return prefix_.data<std::uint32_t>()[s]; }
  // Key positions sequence s reads (0 when it has no rows).
  std::int64_t keys_read(std::int64_t s) const {
    return row_end(s) == row_begin(s) ? 0 : prefix(s) + row_end(s) - row_begin(s);
  }

  // Flat element index of (position pos of sequence s, K head kh, d = 0) in k_cache.blocks.
  std::int64_t key_index(std::int64_t s, std::int64_t pos, std::int64_t kh = 0) const {
    const auto& sh = blocks_.shape();  // [blocks, 1, layers, page, Hk, Di]
    const std::int64_t cols = lut_.shape()[1];
    const std::int64_t blk = lut_.data<std::uint32_t>()[s * cols + pos / sh[3]];
    return (((blk * sh[2] + p.layer) * sh[3] + pos % sh[3]) * sh[4] + kh) * sh[5];
  }

  // Keys 0 .. count-1 of K head kh of sequence s, [count, Di].
  std::vector<double> keys(std::int64_t s, std::int64_t count, std::int64_t kh) const {
    std::vector<double> k(static_cast<std::size_t>(count * p.dim));
    for (std::int64_t j = 0; j < count; ++j) {
      const std::int64_t at = key_index(s, j, kh);
      for (std::int64_t d = 0; d < p.dim; ++d) k[j * p.dim + d] = blocks_.value(at + d);
    }
    return k;
  }

  double q(std::int64_t t, std::int64_t h, std::int64_t d) const { return q_.value((t * p.heads + h) * p.dim + d); }

  // Keys 0 .. count-1 of every K head of sequence s.
  std::vector<std::vector<double>> keys(std::int64_t s, std::int64_t count) const {
    std::vector<std::vector<double>> k;
    for (std::int64_t kh = 0; kh < p.k_heads; ++kh) k.push_back(keys(s, count, kh));
    return k;
  }

  // Block scores s[0 .. nb) of selection u of row t (u is the index head; with reduce_heads u = 0
  // and s is the NaN-sticking maximum over heads) with nk visible keys, forced values applied
  // when `forced`; *abs_max (optional) = max over heads and finite keys j < nk of Σ_d |q_d·k_jd|.
  void block_scores(const std::vector<std::vector<double>>& k, std::int64_t t, std::int64_t u, std::int64_t nk,
                    bool forced, std::vector<double>* s, double* abs_max) const {
    const std::int64_t bs = p.block_size, nb = (nk + bs - 1) / bs;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<double> one;
    double amax = 0;
    for (std::int64_t h = first_head(u); h < end_head(u); ++h) {
      std::vector<double>& out = h == first_head(u) ? *s : one;
      head_scores(k[static_cast<std::size_t>(h / p.group())], t, h, nk, &out, &amax);
      if (&out == s) continue;
      for (std::int64_t c = 0; c < nb; ++c)
        (*s)[c] = std::isnan((*s)[c]) || std::isnan(one[c]) ? nan : std::max((*s)[c], one[c]);
    }
    if (forced) {
      for (std::int64_t c = 0; c < nb; ++c) {
        if (c < p.init) (*s)[c] = kInitScore;
        if (c >= nb - p.local) (*s)[c] = kLocalScore;
      }
    }
    if (abs_max) *abs_max = amax;
  }

  // The index heads whose q rows selection u of a row depends on.
  std::int64_t first_head(std::int64_t u) const { return p.reduce ? 0 : u; }
  std::int64_t end_head(std::int64_t u) const { return p.reduce ? p.heads : u + 1; }

  const Tensor& q_tensor() const { return q_; }

 private:
  // Unforced block scores of head h; *amax grows to max over finite keys of Σ_d |q_d·k_jd|.
  void head_scores(const std::vector<double>& k, std::int64_t t, std::int64_t h, std::int64_t nk,
                   std::vector<double>* s, double* amax) const {
    const std::int64_t bs = p.block_size, nb = (nk + bs - 1) / bs;
    std::vector<double> qv(static_cast<std::size_t>(p.dim));
    for (std::int64_t d = 0; d < p.dim; ++d) qv[d] = q(t, h, d);
    s->assign(static_cast<std::size_t>(nb), -std::numeric_limits<double>::infinity());
    for (std::int64_t j = 0; j < nk; ++j) {
      double dot = 0, mag = 0;
      for (std::int64_t d = 0; d < p.dim; ++d) {
        dot += qv[d] * k[j * p.dim + d];
        mag += std::fabs(qv[d] * k[j * p.dim + d]);
      }
      const double score = static_cast<double>(p.scale) * dot;
      double& m = (*s)[j / bs];
      if (std::isnan(score) || std::isnan(m)) m = std::numeric_limits<double>::quiet_NaN();
      else m = std::max(m, score);
      if (std::isfinite(mag)) *amax = std::max(*amax, mag);
    }
  }

  const Tensor& q_;
  const Tensor& offsets_;
  const Tensor& prefix_;
  const Tensor& blocks_;
  const Tensor& lut_;
};

// The largest power of two dividing the finite non-zero v.
double lsb(double v) {
  int e = 0;
  const double f = std::frexp(std::fabs(v), &e);  // |v| = f·2^e, f in [0.5, 1)
  auto m = static_cast<std::uint64_t>(std::ldexp(f, 53));
  int tz = 0;
  while ((m & 1u) == 0) {
    m >>= 1;
    ++tz;
  }
  return std::ldexp(1.0, e - 53 + tz);
}

bool power_of_two(double v) {
  int e = 0;
  return std::frexp(std::fabs(v), &e) == 0.5;
}

// True when every score scale·Σ q·k is exact in f32 for any summation order (and with q
// pre-multiplied by the scale): all finite products and partial sums are multiples of
// g = lsb(q)·lsb(k) below 2^24·g, and the power-of-two scale neither overflows nor underflows.
// NaN elements make their scores NaN in every order and are ignored; infinities are not exact.
bool scores_exact(const Bundle& b) {
  const Inputs in(b);
  const double scale = in.p.scale;
  if (scale != 0 && !power_of_two(scale)) return false;
  double qmax = 0, gq = std::numeric_limits<double>::infinity();
  const Tensor& q = in.q_tensor();
  for (std::int64_t i = 0; i < q.numel(); ++i) {
    const double v = q.value(i);
    if (std::isnan(v) || v == 0) continue;
    if (std::isinf(v)) return false;
    qmax = std::max(qmax, std::fabs(v));
    gq = std::min(gq, lsb(v));
  }
  if (qmax == 0) return true;  // every score is ±0 or NaN
  const double dim = static_cast<double>(in.p.dim);
  const Tensor& blocks = b.at("k_cache.blocks");
  double kmax = 0, gk = std::numeric_limits<double>::infinity();
  for (std::int64_t s = 0; s < in.batch(); ++s) {
    for (std::int64_t j = 0; j < in.keys_read(s) * in.p.k_heads; ++j) {
      const std::int64_t at = in.key_index(s, j / in.p.k_heads, j % in.p.k_heads);
      for (std::int64_t d = 0; d < in.p.dim; ++d) {
        const double v = blocks.value(at + d);
        if (std::isnan(v) || v == 0) continue;
        if (std::isinf(v)) return false;
        kmax = std::max(kmax, std::fabs(v));
        gk = std::min(gk, lsb(v));
        if (dim * qmax * kmax >= std::ldexp(gq * gk, 24)) return false;
      }
    }
  }
  if (kmax == 0) return true;
  const double top = dim * qmax * kmax, g = gq * gk;
  if (top >= std::ldexp(1.0, 127)) return false;
  if (scale != 0) {
    const double a = std::fabs(scale);
    if (a * g < std::ldexp(1.0, -149) || a * gq < std::ldexp(1.0, -149)) return false;
    if (a * top >= std::ldexp(1.0, 127) || a * qmax >= std::ldexp(1.0, 127)) return false;
  }
  return true;
}

std::vector<std::int64_t> int_list(const json& j, const char* key) {
  return j.at(key).get<std::vector<std::int64_t>>();
}

void put_bf16(Tensor& t, std::int64_t i, double v) { t.data<std::uint16_t>()[i] = f32_to_bf16(static_cast<float>(v)); }

// Every competing block max of selection u of row t distinct.
bool distinct_maxima(const Inputs& in, const std::vector<std::vector<double>>& k, std::int64_t t, std::int64_t u,
                     std::int64_t nk) {
  std::vector<double> s;
  in.block_scores(k, t, u, nk, false, &s, nullptr);
  const std::int64_t nb = static_cast<std::int64_t>(s.size());
  std::vector<double> live;
  for (std::int64_t c = 0; c < nb; ++c)
    if (c >= in.p.init && c < nb - in.p.local && !std::isnan(s[c])) live.push_back(s[c]);
  std::sort(live.begin(), live.end());
  return std::adjacent_find(live.begin(), live.end()) == live.end();
}

class MsaBlockIndexerDriver final : public OpDriver {
 public:
  const char* name() const override { return kName; }

  json default_knobs() const override {
    return json{{"seq_lens", {5, 0, 9}},
                {"prefix_lens", {7, 4, 12}},
                {"num_index_heads", 2},
                {"idx_head_dim", 32},
                {"block_size", 4},
                {"topk", 4},
                {"init_blocks", 1},
                {"local_blocks", 1},
                {"scale", 0.17677669529663687},  // 1/sqrt(32)
                {"cache_dtype", "bf16"},         // "bf16" or "f8e4m3"
                {"num_layers", 1},
                {"layer_idx", 0},
                {"data", "random"},              // "random" or "exact"
                {"ties", false},                 // exact data: every block repeats block 0's keys
                {"nan_keys", 0},                 // key rows (among those read) given one NaN element
                {"num_k_heads", 1},
                {"reduce_heads", false}};
  }

  std::vector<CaseSpec> cases() const override {
    const json ragged = {{"seq_lens", {5, 0, 9, 3}}, {"prefix_lens", {7, 4, 0, 37}}, {"scale", 0.125}};
    auto with = [](json base, const json& more) {
      for (auto it = more.begin(); it != more.end(); ++it) base[it.key()] = it.value();
      return base;
    };
    return {
        {"prefill_ragged_exact", "prefill, B=4 ragged with an empty sequence, exact scores", with(ragged, {{"data", "exact"}})},
        {"prefill_ragged_random", "prefill, B=4 ragged with an empty sequence, random data", ragged},
        {"decode_exact", "decode: one token per sequence, offsets [0..B], prefix 0 included",
         {{"seq_lens", {1, 1, 1, 1, 1, 1}}, {"prefix_lens", {0, 3, 4, 17, 40, 63}}, {"block_size", 8},
          {"topk", 5}, {"local_blocks", 2}, {"data", "exact"}, {"scale", 0.5}}},
        {"decode_fp8_random", "decode, f8e4m3 cache with all 256 codes, Di=128, Hi=4",
         {{"seq_lens", {1, 1, 1, 1, 1}}, {"prefix_lens", {0, 9, 31, 64, 100}}, {"block_size", 16},
          {"num_index_heads", 4}, {"idx_head_dim", 128}, {"scale", 0.08838834764831845},
          {"cache_dtype", "f8e4m3"}}},
        {"prefix_zero_exact", "one sequence with prefix 0: the causal cut inside the last block",
         {{"seq_lens", {20}}, {"prefix_lens", {0}}, {"topk", 3}, {"data", "exact"}, {"scale", 0.25}}},
        {"block_size_3_exact", "block size 3 (not a power of two)",
         {{"seq_lens", {7, 11}}, {"prefix_lens", {2, 5}}, {"block_size", 3}, {"data", "exact"}, {"scale", 0.125}}},
        {"block_size_48_random", "block size 48, Di=64, a block longer than the sequence",
         {{"seq_lens", {60, 2}}, {"prefix_lens", {50, 130}}, {"block_size", 48}, {"idx_head_dim", 64},
          {"topk", 3}, {"scale", 0.125}}},
        {"block_size_48_exact", "block size 48, exact scores",
         {{"seq_lens", {30, 1}}, {"prefix_lens", {70, 200}}, {"block_size", 48}, {"topk", 3},
          {"data", "exact"}, {"scale", 0.0625}}},
        {"topk_above_nb_exact", "topk larger than the number of blocks: -1 tails",
         {{"seq_lens", {6, 3}}, {"prefix_lens", {10, 30}}, {"block_size", 8}, {"topk", 16}, {"data", "exact"},
          {"scale", 0.125}}},
        {"forced_overlap_exact", "init and local overlap (a block both init and local is local)",
         {{"seq_lens", {12}}, {"prefix_lens", {6}}, {"init_blocks", 3}, {"local_blocks", 3}, {"topk", 5},
          {"data", "exact"}, {"scale", 0.125}}},
        {"forced_cover_all_exact", "init + local cover every block; topk below the forced count",
         {{"seq_lens", {10, 2}}, {"prefix_lens", {5, 0}}, {"init_blocks", 2}, {"local_blocks", 2}, {"topk", 3},
          {"data", "exact"}, {"scale", 0.125}}},
        {"no_forced_exact", "init_blocks = local_blocks = 0",
         {{"init_blocks", 0}, {"local_blocks", 0}, {"data", "exact"}, {"scale", 0.125}}},
        {"init_only_random", "init_blocks = 2, local_blocks = 0", {{"init_blocks", 2}, {"local_blocks", 0}}},
        {"local_only_exact", "init_blocks = 0, local_blocks = 3",
         {{"init_blocks", 0}, {"local_blocks", 3}, {"topk", 5}, {"data", "exact"}, {"scale", 0.125}}},
        {"ties_exact", "every full block has the same maximum: ties go to the smaller block",
         {{"seq_lens", {9, 4}}, {"prefix_lens", {8, 13}}, {"init_blocks", 0}, {"local_blocks", 0}, {"topk", 5},
          {"ties", true}, {"data", "exact"}, {"scale", 0.125}}},
        {"scale_zero", "scale 0: every score is ±0, all blocks tie",
         {{"scale", 0.0}, {"topk", 5}, {"data", "exact"}}},
        {"fp8_all_codes_exact", "f8e4m3 cache with all 256 codes (NaN, subnormals), exact scores, Di=16",
         {{"seq_lens", {6, 5}}, {"prefix_lens", {20, 9}}, {"idx_head_dim", 16}, {"topk", 5},
          {"cache_dtype", "f8e4m3"}, {"data", "exact"}, {"scale", 0.5}}},
        {"fp8_all_codes_random", "f8e4m3 cache with all 256 codes, random data",
         {{"seq_lens", {7, 1, 4}}, {"prefix_lens", {30, 12, 0}}, {"cache_dtype", "f8e4m3"}, {"topk", 5}}},
        {"negative_scale_exact", "negative scale reverses the ranking",
         {{"scale", -0.25}, {"data", "exact"}, {"topk", 5}}},
        {"negative_scale_random", "negative scale, random data, f8e4m3", {{"scale", -0.1}, {"cache_dtype", "f8e4m3"}}},
        {"multi_layer_exact", "3 layers, layer_idx 2",
         {{"num_layers", 3}, {"layer_idx", 2}, {"data", "exact"}, {"scale", 0.125}}},
        {"multi_layer_fp8_random", "2 layers, layer_idx 1, f8e4m3",
         {{"num_layers", 2}, {"layer_idx", 1}, {"cache_dtype", "f8e4m3"}}},
        {"nan_keys_exact", "NaN keys: NaN blocks are never selected, forced blocks stay, rows stop early",
         {{"seq_lens", {6, 4}}, {"prefix_lens", {4, 2}}, {"block_size", 2}, {"topk", 8}, {"nan_keys", 6},
          {"data", "exact"}, {"scale", 0.125}}},
        {"nan_keys_fp8_random", "NaN keys in an f8e4m3 cache, random data",
         {{"seq_lens", {6, 4}}, {"prefix_lens", {9, 2}}, {"block_size", 3}, {"topk", 6}, {"nan_keys", 4},
          {"cache_dtype", "f8e4m3"}}},
        {"sentinel_heavy_exact", "very unequal lengths: page-table rows mostly sentinels",
         {{"seq_lens", {1, 1, 3}}, {"prefix_lens", {0, 70, 2}}, {"block_size", 8}, {"data", "exact"}, {"scale", 0.125}}},
        {"minimax_shaped_random", "Hi=4, Di=128, block 16, topk 8, init 1, local 2",
         {{"seq_lens", {24, 1}}, {"prefix_lens", {150, 200}}, {"num_index_heads", 4}, {"idx_head_dim", 128},
          {"block_size", 16}, {"topk", 8}, {"local_blocks", 2}, {"scale", 0.08838834764831845}}},
        {"grouped_k_heads_exact", "Hi=4 index heads over Hk=2 K heads (heads 0,1 read K head 0; 2,3 head 1)",
         {{"seq_lens", {5, 3}}, {"prefix_lens", {7, 12}}, {"num_index_heads", 4}, {"num_k_heads", 2},
          {"data", "exact"}, {"scale", 0.125}}},
        {"grouped_k_heads_fp8_random", "Hi=8 over Hk=4 K heads, f8e4m3 cache with all 256 codes, Di=64",
         {{"seq_lens", {9, 1}}, {"prefix_lens", {20, 41}}, {"num_index_heads", 8}, {"num_k_heads", 4},
          {"idx_head_dim", 64}, {"block_size", 8}, {"topk", 5}, {"cache_dtype", "f8e4m3"}, {"scale", 0.125}}},
        {"one_k_head_per_index_head_exact", "Hk = Hi = 3: every index head its own K head",
         {{"seq_lens", {4, 6}}, {"prefix_lens", {9, 3}}, {"num_index_heads", 3}, {"num_k_heads", 3},
          {"data", "exact"}, {"scale", 0.25}}},
        {"reduce_heads_exact", "reduce_heads: one selection per row over the maximum of Hi=4 heads",
         {{"seq_lens", {5, 0, 9}}, {"prefix_lens", {7, 4, 12}}, {"num_index_heads", 4}, {"reduce_heads", true},
          {"topk", 5}, {"data", "exact"}, {"scale", 0.125}}},
        {"reduce_heads_nan_exact", "reduce_heads with NaN keys: a NaN in any head's score makes the block NaN",
         {{"seq_lens", {6, 4}}, {"prefix_lens", {4, 2}}, {"block_size", 2}, {"topk", 8}, {"nan_keys", 5},
          {"num_index_heads", 3}, {"reduce_heads", true}, {"data", "exact"}, {"scale", 0.125}}},
        {"reduce_heads_grouped_random", "reduce_heads over Hi=8 heads of Hk=2 K heads, random bf16, decode rows too",
         {{"seq_lens", {12, 1, 1}}, {"prefix_lens", {40, 70, 3}}, {"num_index_heads", 8}, {"num_k_heads", 2},
          {"reduce_heads", true}, {"block_size", 8}, {"topk", 6}, {"scale", 0.125}}},
        {"reduce_heads_fp8_nan_random", "reduce_heads, f8e4m3 cache with all 256 codes and NaN keys, Hk=2",
         {{"seq_lens", {7, 3}}, {"prefix_lens", {9, 30}}, {"num_index_heads", 4}, {"num_k_heads", 2},
          {"reduce_heads", true}, {"block_size", 4}, {"topk", 6}, {"nan_keys", 4}, {"cache_dtype", "f8e4m3"}}},
        {"minimax_m3_shaped_random", "MiniMax-M3 indexer semantics: Hi=8, Hk=2, reduce_heads, Di=128, block 16",
         {{"seq_lens", {40, 1}}, {"prefix_lens", {100, 300}}, {"num_index_heads", 8}, {"num_k_heads", 2},
          {"reduce_heads", true}, {"idx_head_dim", 128}, {"block_size", 16}, {"topk", 8}, {"local_blocks", 2},
          {"scale", 0.08838834764831845}}},
        {"all_empty", "every sequence empty: R = 0, nothing written",
         {{"seq_lens", {0, 0}}, {"prefix_lens", {3, 0}}}},
    };
  }

  CaseSpec default_case() const override {
    return {"default", "MiniMax-shaped: Hi=4, Di=128, block 128, topk 16, init 1, local 2; prefill + decode",
            {{"seq_lens", {256, 1, 1}}, {"prefix_lens", {1024, 2048, 3000}}, {"num_index_heads", 4},
             {"idx_head_dim", 128}, {"block_size", 128}, {"topk", 16}, {"init_blocks", 1}, {"local_blocks", 2},
             {"scale", 0.08838834764831845}}};
  }

  std::vector<CaseSpec> bench_cases() const override {
    std::vector<CaseSpec> v;
    for (int heads : {4, 8}) {
      const json base = {{"num_index_heads", heads}, {"idx_head_dim", 128}, {"block_size", 128}, {"topk", 16},
                         {"init_blocks", 1}, {"local_blocks", 2}, {"scale", 0.08838834764831845}};
      auto add = [&](const std::string& name, const std::string& what, std::int64_t batch, std::int64_t seq,
                     std::int64_t cache) {
        json k = base;
        k["seq_lens"] = std::vector<std::int64_t>(static_cast<std::size_t>(batch), seq);
        k["prefix_lens"] = std::vector<std::int64_t>(static_cast<std::size_t>(batch), cache);
        v.push_back({name + "_h" + std::to_string(heads), what + ", Hi=" + std::to_string(heads), k});
      };
      add("prefill_s4096_c0", "prefill B=1 seq 4096, cache 0", 1, 4096, 0);
      add("prefill_s4096_c28672", "prefill B=1 seq 4096, cache 28672", 1, 4096, 28672);
      add("decode_b1_c32768", "decode B=1, cache 32768", 1, 1, 32768);
      add("decode_b1_c131072", "decode B=1, cache 131072", 1, 1, 131072);
      add("decode_b32_c32768", "decode B=32, cache 32768", 32, 1, 32768);
      add("decode_b32_c131072", "decode B=32, cache 131072", 32, 1, 131072);
    }
    // The headline shapes again with an f8e4m3 cache (the key conversion costs more per element).
    for (std::size_t i : {std::size_t{7}, std::size_t{11}}) {  // prefill_s4096_c28672_h8, decode_b32_c131072_h8
      CaseSpec c = v[i];
      c.name += "_fp8";
      c.what += ", f8e4m3 cache";
      c.knobs["cache_dtype"] = "f8e4m3";
      v.push_back(c);
    }
    // MiniMax-M3 semantics: 2 index-K heads for 8 index heads, one selection per row.
    for (std::size_t i : {std::size_t{7}, std::size_t{11}}) {
      CaseSpec c = v[i];
      c.name += "_k2_reduce";
      c.what += ", Hk=2, reduce_heads";
      c.knobs["num_k_heads"] = 2;
      c.knobs["reduce_heads"] = true;
      v.push_back(c);
    }
    return v;
  }

  Bundle generate(const json& overrides, std::uint64_t seed) const override {
    json k;
    std::string why;
    if (!merge_knobs(default_knobs(), overrides, &k, &why)) throw InputError(std::string(kName) + ": " + why);
    const auto seq = int_list(k, "seq_lens");
    const auto prefix = int_list(k, "prefix_lens");
    if (seq.size() != prefix.size())
      throw InputError(std::string(kName) + ": seq_lens and prefix_lens differ in length");
    const std::int64_t heads = k.at("num_index_heads").get<std::int64_t>();
    const std::int64_t k_heads = k.at("num_k_heads").get<std::int64_t>();
    if (k_heads < 1 || heads % k_heads != 0)
      throw InputError(std::string(kName) + ": num_k_heads must divide num_index_heads");
    const std::int64_t dim = k.at("idx_head_dim").get<std::int64_t>();
    const std::int64_t bs = k.at("block_size").get<std::int64_t>();
    const std::string cache_dtype = k.at("cache_dtype").get<std::string>();
    const std::string data = k.at("data").get<std::string>();
    if (cache_dtype != "bf16" && cache_dtype != "f8e4m3")
      throw InputError(std::string(kName) + ": cache_dtype must be \"bf16\" or \"f8e4m3\"");
    if (data != "random" && data != "exact")
      throw InputError(std::string(kName) + ": data must be \"random\" or \"exact\"");
    const bool exact = data == "exact";
    const bool fp8 = cache_dtype == "f8e4m3";
    const bool ties = k.at("ties").get<bool>();
    if (ties && !exact) throw InputError(std::string(kName) + ": ties needs data=exact");
    float scale = static_cast<float>(k.at("scale").get<double>());
    if (exact && scale != 0) scale = std::copysign(std::ldexp(1.0f, static_cast<int>(std::lround(std::log2(std::fabs(scale))))), scale);

    Rng rng(seed);
    Bundle b;
    b.op = kName;
    const std::int64_t batch = static_cast<std::int64_t>(seq.size());
    std::int64_t rows = 0;
    std::vector<std::int64_t> needed(seq.size());
    for (std::size_t s = 0; s < seq.size(); ++s) {
      rows += seq[s];
      needed[s] = prefix[s] + seq[s];
    }
    make_row_offsets(b, "input_row_offsets", seq);
    Tensor& pl = b.add("prefix_lens", DType::u32, {batch});
    for (std::int64_t s = 0; s < batch; ++s) pl.data<std::uint32_t>()[s] = static_cast<std::uint32_t>(prefix[s]);

    CacheLayout layout;
    layout.page_size = bs;
    layout.kv_dim = 1;
    layout.num_layers = k.at("num_layers").get<std::int64_t>();
    layout.num_kv_heads = k_heads;
    layout.head_size = dim;
    layout.dtype = fp8 ? DType::f8e4m3 : DType::bf16;
    make_paged_cache(b, "k_cache", layout, prefix, needed, rng);

    b.params = json{{"num_index_heads", heads},
                    {"idx_head_dim", dim},
                    {"block_size", bs},
                    {"topk", k.at("topk").get<std::int64_t>()},
                    {"init_blocks", k.at("init_blocks").get<std::int64_t>()},
                    {"local_blocks", k.at("local_blocks").get<std::int64_t>()},
                    {"scale", static_cast<double>(scale)},
                    {"layer_idx", k.at("layer_idx").get<std::uint32_t>()},
                    {"page_size", bs}};
    if (k_heads != 1) b.params["num_k_heads"] = k_heads;
    if (k.at("reduce_heads").get<bool>()) b.params["reduce_heads"] = true;

    // The cache: every element random, rows no one reads included.
    Tensor& blocks = b.at("k_cache.blocks");
    const bool all_codes = fp8 && blocks.numel() >= 256;
    std::int64_t qmax = 16;
    if (!exact) {
      if (fp8) fill_fp8(blocks, rng, 1.0, all_codes);
      else fill_normal(blocks, rng, 1.0);
    } else {
      for (std::int64_t i = 0; i < blocks.numel(); ++i) {
        const float v = static_cast<float>(rng.integer(-16, 16));
        if (fp8) blocks.data<std::uint8_t>()[i] = f32_to_f8e4m3(v);
        else put_bf16(blocks, i, v);
      }
      if (all_codes) {
        // Every code at a distinct random position; q shrinks so the sums stay exact.
        qmax = std::min<std::int64_t>(16, 32767 / (dim * 448));
        if (qmax < 1)
          throw InputError(std::string(kName) +
                                      ": data=exact with an f8e4m3 cache needs idx_head_dim <= 73 "
                                      "(all 256 codes must keep every score exact)");
        std::vector<std::int64_t> spots;
        while (spots.size() < 256) {
          const std::int64_t at = rng.integer(0, blocks.numel() - 1);
          if (std::find(spots.begin(), spots.end(), at) == spots.end()) spots.push_back(at);
        }
        for (int c = 0; c < 256; ++c) blocks.data<std::uint8_t>()[spots[c]] = static_cast<std::uint8_t>(c);
      }
    }
    Tensor& q = b.add("q", DType::bf16, {rows, heads, dim});
    if (exact) {
      for (std::int64_t i = 0; i < q.numel(); ++i) put_bf16(q, i, static_cast<double>(rng.integer(-qmax, qmax)));
    } else {
      fill_normal(q, rng, 1.0);
    }

    const Inputs in(b);
    const std::size_t esize = dtype_size(blocks.dtype());
    if (ties) {  // position p takes the key of position p % block_size
      for (std::int64_t s = 0; s < batch; ++s)
        for (std::int64_t p = bs; p < needed[s]; ++p)
          std::copy_n(blocks.bytes() + in.key_index(s, p % bs) * esize, dim * k_heads * esize,
                      blocks.bytes() + in.key_index(s, p) * esize);
    }
    const std::int64_t nan_keys = k.at("nan_keys").get<std::int64_t>();
    std::int64_t readable = 0;
    for (std::int64_t s = 0; s < batch; ++s) readable += in.keys_read(s);
    // fp8: a NaN never replaces the only copy of a code, so all 256 codes survive.
    std::vector<std::int64_t> code_count(256, 0);
    if (fp8)
      for (std::int64_t i = 0; i < blocks.numel(); ++i) ++code_count[blocks.data<std::uint8_t>()[i]];
    for (std::int64_t n = 0; n < nan_keys && readable > 0; ++n) {
      std::int64_t r = rng.integer(0, readable - 1), s = 0;
      while (r >= in.keys_read(s)) r -= in.keys_read(s++);
      const std::int64_t kh = k_heads > 1 ? rng.integer(0, k_heads - 1) : 0;
      const std::int64_t row = in.key_index(s, r, kh), d0 = rng.integer(0, dim - 1);
      if (!fp8) {
        blocks.data<std::uint16_t>()[row + d0] = 0x7FC0;
        continue;
      }
      for (std::int64_t i = 0; i < dim; ++i) {
        std::uint8_t& code = blocks.data<std::uint8_t>()[row + (d0 + i) % dim];
        if (code_count[code] < 2) continue;
        --code_count[code];
        ++code_count[0x7F];
        code = 0x7F;
        break;
      }
    }

    if (exact && !ties && scale != 0) {  // with scale 0 every block ties by design
      for (std::int64_t s = 0; s < batch; ++s) {
        if (in.keys_read(s) == 0) continue;
        const auto keys = in.keys(s, in.keys_read(s));
        for (std::int64_t t = in.row_begin(s); t < in.row_end(s); ++t) {
          const std::int64_t nk = prefix[s] + (t - in.row_begin(s)) + 1;
          for (std::int64_t u = 0; u < in.p.selections(); ++u) {
            for (int attempt = 0; attempt < 200 && !distinct_maxima(in, keys, t, u, nk); ++attempt)
              for (std::int64_t h = in.first_head(u); h < in.end_head(u); ++h)
                for (std::int64_t d = 0; d < dim; ++d)
                  put_bf16(q, (t * heads + h) * dim + d, static_cast<double>(rng.integer(-qmax, qmax)));
          }
        }
      }
    }
    b.tolerance = tolerance(b);
    if (exact && !b.tolerance.at(kOut).contains("exact"))
      throw std::logic_error(std::string(kName) + ": data=exact produced scores that are not exact in f32");
    return b;
  }

  void check_inputs(const Bundle& b) const override {
    check_tensors(kName, b, kTensors);
    const ParamReader r(kName, b.params, kParams);
    r.agrees("page_size", b.at("k_cache.blocks").shape()[3], "k_cache.blocks.shape[3]");
    // The readers index K heads by num_k_heads: it must divide the index heads and match the cache.
    const Params p = params_of(b);
    if (p.heads % p.k_heads != 0)
      r.contradiction("num_k_heads", "must divide num_index_heads=" + std::to_string(p.heads));
    if (b.at("k_cache.blocks").shape()[4] != p.k_heads)
      r.contradiction("num_k_heads", "k_cache.blocks.shape[4]=" + std::to_string(b.at("k_cache.blocks").shape()[4]) +
                                         "; expected the same value, 1 when absent");
  }

  void prepare_outputs(Bundle& b) const override {
    check_inputs(b);
    b.remove_outputs();
    const Params p = params_of(b);
    b.add(kOut, DType::i32, {p.selections(), b.at("q").shape()[0], p.topk}).poison();
  }

  Status validate(const Bundle& b) const override {
    const Params p = params_of(b);
    MemorySpace space;
    return core::validate_msa_block_indexer(desc_of(p), args_of(b, p), &space);
  }

  Status call(Bundle& b, const RunOptions& options) const override {
    const Params p = params_of(b);
    return msa_block_indexer(desc_of(p), args_of(b, p), options);
  }

  Status call_planned(Bundle& b, PlannedRun* pr) const override {
    const Params p = params_of(b);
    return plan_and_run(desc_of(p), args_of(b, p), pr);
  }

  Status plan(const Bundle& b, const PlanOptions& options, std::unique_ptr<PlannedCall>* out) const override {
    return make_planned_call(desc_of(params_of(b)), b, [](const Bundle& r) { return args_of(r, params_of(r)); },
                             options, out);
  }

  static MsaBlockIndexerDesc desc_of(const Params& p) {
    MsaBlockIndexerDesc d;
    d.num_index_heads = p.heads;
    d.idx_head_dim = p.dim;
    d.block_size = p.block_size;
    d.topk = p.topk;
    d.init_blocks = p.init;
    d.local_blocks = p.local;
    d.scale = p.scale;
    d.num_k_heads = p.k_heads;
    d.reduce_heads = p.reduce;
    return d;
  }

  static MsaBlockIndexerArgs args_of(const Bundle& b, const Params& p) {
    const Tensor& out = b.at(kOut);
    MsaBlockIndexerArgs a;
    a.q = b.at("q").view();
    a.input_row_offsets = b.at("input_row_offsets").view();
    a.prefix_lens = b.at("prefix_lens").view();
    a.k_cache = cache_view(b, "k_cache");
    a.layer_idx = p.layer;
    a.out_idxs = out.view();
    return a;
  }

  json tolerance(const Bundle& b) const override {
    // Exact when every score is exact in f32 (decided from the inputs); otherwise the structural
    // check: count, distinct, in range, -1 tail, forced blocks first, and no block ranked above
    // another by more than c·Di·u·max_j |scale|·Σ_d |q[t,h,d]·k[j,d]| over the row's visible keys.
    if (scores_exact(b)) return json{{kOut, {{"exact", true}}}};
    return json{{kOut,
                 {{"selection",
                   {{"c", kBoundC},
                    {"unit_roundoff", kUnitRoundoff},
                    {"reduction_length", "idx_head_dim"},
                    {"terms", "|scale|*sum_d |q[t,h,d]*k[j,d]|, max over the row's visible keys"}}}}}};
  }

  std::vector<Comparison> compare(const Bundle& expected, const Bundle& candidate) const override {
    if (!expected.has(kOut) || !candidate.has(kOut)) {
      Comparison c;
      c.name = kOut;
      c.kind = "selection";
      c.pass = false;
      c.detail = std::string(kOut) + " is missing from the " + (expected.has(kOut) ? "candidate" : "expected") + " bundle";
      return {c};
    }
    const ToleranceReader tol(kName, expected.tolerance, tolerance(expected));
    if (tol.flag(kOut, "exact")) return {compare_exact(kOut, expected.at(kOut), candidate.at(kOut))};
    const double bound_factor = tol.number_or(kOut, "selection.c", 0, 1e6, kBoundC) *
                                tol.number_or(kOut, "selection.unit_roundoff", 0, 1, kUnitRoundoff);
    // Both sides: a golden file's expected outputs must satisfy the same rules.
    return {structural(expected, candidate.at(kOut), bound_factor, kOut),
            structural(expected, expected.at(kOut), bound_factor, std::string(kOut) + " (expected)")};
  }

  Work work(const Bundle& b) const override {
    const Inputs in(b);
    Work w;
    const double kbytes = static_cast<double>(dtype_size(b.at("k_cache.blocks").dtype()));
    for (std::int64_t s = 0; s < in.batch(); ++s) {
      const double n = static_cast<double>(in.row_end(s) - in.row_begin(s));
      const double p0 = static_cast<double>(in.prefix(s));
      // Σ_i (p0 + i + 1) keys per head.
      w.flops += 2.0 * static_cast<double>(in.p.heads * in.p.dim) * (n * p0 + n * (n + 1) / 2);
      w.bytes += static_cast<double>(in.keys_read(s) * in.p.k_heads) * static_cast<double>(in.p.dim) * kbytes;
    }
    w.bytes += static_cast<double>(b.at("q").nbytes()) +
               static_cast<double>(in.p.selections() * in.rows() * in.p.topk) * 4.0 +
               static_cast<double>(b.at("input_row_offsets").nbytes() + b.at("prefix_lens").nbytes());
    return w;
  }

 private:
  // docs/msa_block_indexer.md §6 on random data, per (head, row), from the inputs alone.
  // bound_factor = c·u: a row's bound is bound_factor·Di·|scale|·max_j Σ_d |q_d·k_jd|.
  static Comparison structural(const Bundle& b, const Tensor& got, double bound_factor, const std::string& name) {
    Comparison cmp;
    cmp.name = name;
    cmp.kind = "selection";
    const Inputs in(b);
    const Params& p = in.p;
    if (got.dtype() != DType::i32 || got.shape() != std::vector<std::int64_t>{p.selections(), in.rows(), p.topk}) {
      cmp.pass = false;
      cmp.detail = name + (p.reduce ? ": dtype/shape differ from [1, R, topk] i32" : ": dtype/shape differ from [Hi, R, topk] i32");
      return cmp;
    }
    auto fail = [&](std::int64_t h, std::int64_t t, std::int64_t col, const std::string& why) {
      if (cmp.mismatches++ == 0) {
        cmp.detail = name + " head " + std::to_string(h) + " row " + std::to_string(t) + " column " +
                     std::to_string(col) + ": " + why;
        cmp.worst_index = (h * in.rows() + t) * p.topk + col;
      }
      cmp.pass = false;
    };
    std::vector<double> s;
    std::vector<char> used;
    for (std::int64_t seq = 0; seq < in.batch(); ++seq) {
      if (in.keys_read(seq) == 0) continue;
      const auto keys = in.keys(seq, in.keys_read(seq));
      for (std::int64_t t = in.row_begin(seq); t < in.row_end(seq); ++t) {
        const std::int64_t nk = in.prefix(seq) + (t - in.row_begin(seq)) + 1;
        for (std::int64_t h = 0; h < p.selections(); ++h) {  // h: the selection (index head, or 0 reduced)
          double amax = 0;
          in.block_scores(keys, t, h, nk, true, &s, &amax);
          const std::int64_t nb = static_cast<std::int64_t>(s.size());
          const double bound = bound_factor * static_cast<double>(p.dim) * std::fabs(static_cast<double>(p.scale)) * amax;
          std::int64_t live = 0;
          double real_max = 0;
          std::vector<std::int64_t> forced_order;
          for (std::int64_t blk = 0; blk < nb; ++blk) {
            if (!std::isnan(s[blk])) ++live;
            const bool is_local = blk >= nb - p.local, is_init = blk < p.init;
            if (is_init && !is_local) forced_order.push_back(blk);
            if (!is_init && !is_local && !std::isnan(s[blk])) real_max = std::max(real_max, std::fabs(s[blk]));
          }
          for (std::int64_t blk = std::max<std::int64_t>(0, nb - p.local); blk < nb; ++blk) forced_order.push_back(blk);
          const std::int64_t want = std::min(p.topk, live);
          const std::int32_t* row = got.data<std::int32_t>() + (h * in.rows() + t) * p.topk;
          used.assign(static_cast<std::size_t>(nb), 0);
          double run_min = std::numeric_limits<double>::infinity();
          bool row_ok = true;
          auto reject = [&](std::int64_t col, const std::string& why) {
            row_ok = false;
            fail(h, t, col, why);
          };
          for (std::int64_t col = 0; col < p.topk && row_ok; ++col) {
            const std::int64_t v = row[col];
            if (col >= want) {
              if (v != -1) reject(col, "expected -1 (only " + std::to_string(want) +
                                                                " non-NaN candidates wanted), got " + std::to_string(v));
              continue;
            }
            if (v < 0 || v >= nb) {
              reject(col, "block " + std::to_string(v) + " outside [0, " + std::to_string(nb) + ")");
              continue;
            }
            if (used[v]) {
              reject(col, "block " + std::to_string(v) + " selected twice");
              continue;
            }
            used[v] = 1;
            if (std::isnan(s[v])) {
              reject(col, "block " + std::to_string(v) + " has a NaN score");
              continue;
            }
            if (real_max < 1e28 && col < static_cast<std::int64_t>(forced_order.size()) && v != forced_order[col]) {
              reject(col, "forced block " + std::to_string(forced_order[col]) + " expected, got " +
                                                  std::to_string(v));
              continue;
            }
            const double excess = s[v] - (run_min + bound);
            if (excess > 0) {
              cmp.max_abs_err = std::max(cmp.max_abs_err, excess);
              reject(col, "block " + std::to_string(v) + " scores " + std::to_string(s[v]) +
                                                  " above an earlier pick's " + std::to_string(run_min) +
                                                  " by more than the bound " + std::to_string(bound));
              continue;
            }
            run_min = std::min(run_min, s[v]);
          }
          if (!row_ok || want < p.topk) continue;
          for (std::int64_t blk = 0; blk < nb; ++blk) {
            if (used[blk] || std::isnan(s[blk])) continue;
            const double excess = s[blk] - (run_min + bound);
            if (excess > 0) {
              cmp.max_abs_err = std::max(cmp.max_abs_err, excess);
              fail(h, t, p.topk - 1, "unselected block " + std::to_string(blk) + " scores " + std::to_string(s[blk]) +
                                          " above the selected minimum " + std::to_string(run_min) +
                                          " by more than the bound " + std::to_string(bound));
              break;
            }
          }
        }
      }
    }
    return cmp;
  }
};

const MsaBlockIndexerDriver kDriver;
const bool kRegistered = register_driver(&kDriver);

}  // namespace
}  // namespace mlakit::goldens
