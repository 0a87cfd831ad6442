#include "reference/mla_prefill_fp8.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/shared/mla_prefill_fp8_norm.hpp"
#include "core/shared/mla_prefill_fp8_quant.hpp"

namespace mlakit::reference {
namespace {

using std::int64_t;

using mla_prefill_fp8_norm::bf16_once;

double bf16_value(std::uint16_t b) { return static_cast<double>(bf16_to_f32(b)); }
double bf16_round(double d) { return bf16_value(bf16_once(d)); }

// The problem's dimensions and the views, decoded once.
struct Call {
  const MlaPrefillFp8Desc& d;
  const MlaPrefillFp8Args& a;
  int64_t H, nope, rope, v, latent, bn, bk, qk, kv_cols, groups, B, layer;
  const std::uint32_t* iro;
  const std::uint32_t* bro;
  const std::uint32_t* cache_offsets;
  const std::uint32_t* cache_lengths;
  const std::uint32_t* lut;
  int64_t lut_cols, page_size;

  Call(const MlaPrefillFp8Desc& desc, const MlaPrefillFp8Args& args) : d(desc), a(args) {
    H = d.num_heads;
    nope = d.nope;
    rope = d.rope;
    v = d.v;
    latent = d.latent;
    bn = d.bn;
    bk = d.bk;
    qk = nope + rope;
    kv_cols = nope + v;
    groups = (latent + bk - 1) / bk;
    B = a.input_row_offsets.shape[0] - 1;
    layer = a.layer_idx;
    iro = a.input_row_offsets.as<const std::uint32_t>();
    bro = a.buffer_row_offsets.as<const std::uint32_t>();
    cache_offsets = a.cache_offsets.as<const std::uint32_t>();
    cache_lengths = a.kv_cache.cache_lengths.as<const std::uint32_t>();
    lut = a.kv_cache.lookup_table.as<const std::uint32_t>();
    lut_cols = a.kv_cache.lookup_table.shape[1];
    page_size = a.kv_cache.page_size();
  }

  // The cache row [latent | rope] of sequence b at token position pos, in layer_idx.
  std::uint16_t* cache_row(int64_t b, int64_t pos) const {
    const int64_t blk = lut[b * lut_cols + pos / page_size];
    return a.kv_cache.blocks.as<std::uint16_t>() + a.kv_cache.row_offset(blk, 0, layer, pos % page_size, 0);
  }

  double freq(int64_t pos, int64_t col) const {
    const int64_t i = pos * rope + col;
    if (a.freqs_cis.dtype == DType::f32) return a.freqs_cis.as<const float>()[i];
    return bf16_value(a.freqs_cis.as<const std::uint16_t>()[i]);
  }
};

// Step 1 on `rope` bf16 values in place: interleaved pairs rotated by freqs_cis[pos].
void rotate(const Call& c, std::uint16_t* x, int64_t pos) {
  for (int64_t p = 0; p < c.rope / 2; ++p) {
    const double cs = c.freq(pos, 2 * p), sn = c.freq(pos, 2 * p + 1);
    const double x0 = bf16_value(x[2 * p]), x1 = bf16_value(x[2 * p + 1]);
    x[2 * p] = bf16_once(x0 * cs - x1 * sn);
    x[2 * p + 1] = bf16_once(x0 * sn + x1 * cs);
  }
}

// Step 2 on the latent part of one cache row in place: y = bf16(x·r), then bf16(y·gamma).
void normalize(const Call& c, std::uint16_t* x) {
  const auto* gamma = c.a.kv_norm_gamma.as<const std::uint16_t>();
  double sum_sq = 0;
  for (int64_t k = 0; k < c.latent; ++k) sum_sq += bf16_value(x[k]) * bf16_value(x[k]);
  const double r = 1.0 / std::sqrt(sum_sq / static_cast<double>(c.latent) + static_cast<double>(c.d.epsilon));
  for (int64_t k = 0; k < c.latent; ++k) {
    const double y = bf16_round(bf16_value(x[k]) * r);
    x[k] = bf16_once(y * bf16_value(gamma[k]));  // exact product of two bf16 values, one rounding
  }
}

// How far a value computed to within eps of `exact` can round away from bf16(exact).
double rounding_spread(double exact, double eps) {
  const double r = bf16_round(exact);
  return std::max(std::fabs(bf16_round(exact + eps) - r), std::fabs(bf16_round(exact - eps) - r));
}

// Steps 1-2: RoPE on q's rope part and on the new cache rows' rope part, RMSNorm of the new cache
// rows' latent part, all in place.
void mla_prefill_fp8_update(const MlaPrefillFp8Desc& desc, const MlaPrefillFp8Args& args) {
  const Call c(desc, args);
  auto* q = args.q.as<std::uint16_t>();
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t t = c.iro[b]; t < static_cast<int64_t>(c.iro[b + 1]); ++t) {
      const int64_t pos = static_cast<int64_t>(c.cache_lengths[b]) + (t - c.iro[b]);
      for (int64_t h = 0; h < c.H; ++h) rotate(c, q + (t * c.H + h) * c.qk + c.nope, pos);
      std::uint16_t* row = c.cache_row(b, pos);
      rotate(c, row + c.latent, pos);
      if (desc.numerics == MlaNumerics::max) normalize(c, row);
      else
        mla_prefill_fp8_norm::rms_norm_once(row, c.latent, args.kv_norm_gamma.data,
                                            args.kv_norm_gamma.dtype == DType::f32, desc.epsilon);
    }
  }
}

}  // namespace

void mla_prefill_fp8_attention(const MlaPrefillFp8Desc& desc, const MlaPrefillFp8Args& args,
                               const MlaPrefillFp8BoundModel* model, double* bound) {
  namespace quant = mla_prefill_fp8_quant;
  const Call c(desc, args);
  const bool want_bound = model != nullptr && bound != nullptr;
  const auto* q = args.q.as<const std::uint16_t>();
  auto* out = args.output.as<std::uint16_t>();
  const auto* w = args.kv_b_proj.as<const std::uint8_t>();
  const auto* w_scale = args.kv_b_proj_scale.as<const float>();
  const double scale = desc.scale;
  const bool round_p = desc.numerics != MlaNumerics::max;  // deepseek: weights normalized, then bf16
  const auto* topk = args.topk_indices.as<const std::int32_t>();
  const int64_t top_k = topk ? args.topk_indices.shape[1] : 0;

  double fp8[256];
  for (int i = 0; i < 256; ++i) fp8[i] = f8e4m3_to_f32(static_cast<std::uint8_t>(i));

  for (int64_t b = 0; b < c.B; ++b) {
    const int64_t first_t = c.iro[b], seq_len = static_cast<int64_t>(c.iro[b + 1]) - first_t;
    if (seq_len == 0) continue;
    const int64_t window = static_cast<int64_t>(c.bro[b + 1]) - c.bro[b];
    const int64_t offset = c.cache_offsets[b];
    const int64_t cache_len = c.cache_lengths[b];
    const int64_t last_pos = cache_len + seq_len - 1;
    // Buffer rows at positions past the last query are gathered (page padding) but never attended:
    // their KV cannot reach the output, so it is not computed.
    const int64_t rows = last_pos < offset ? 0 : std::min(window, last_pos - offset + 1);

    // Steps 3-4: gather the latent parts and quantize each bk-column group (f32, bit-exact).
    std::vector<double> xq(static_cast<std::size_t>(rows * c.latent));  // decoded FP8 codes
    std::vector<float> sa(static_cast<std::size_t>(rows * c.groups));
    std::vector<double> k_rope(static_cast<std::size_t>(rows * c.rope));
    std::vector<float> x(static_cast<std::size_t>(c.latent));
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(c.latent));
    for (int64_t j = 0; j < rows; ++j) {
      const std::uint16_t* row = c.cache_row(b, offset + j);
      for (int64_t k = 0; k < c.latent; ++k) x[k] = bf16_to_f32(row[k]);
      for (int64_t g = 0; g < c.groups; ++g) {
        const int64_t k0 = g * c.bk, n = std::min(c.bk, c.latent - k0);
        sa[j * c.groups + g] = desc.numerics == MlaNumerics::max
                                   ? quant::quantize_group(x.data() + k0, n, codes.data() + k0)
                                   : quant::quantize_group_deepseek(x.data() + k0, n,
                                                                    desc.numerics == MlaNumerics::deepseek_ue8m0,
                                                                    codes.data() + k0);
      }
      for (int64_t k = 0; k < c.latent; ++k) xq[j * c.latent + k] = fp8[codes[k]];
      for (int64_t r = 0; r < c.rope; ++r) k_rope[j * c.rope + r] = bf16_value(row[c.latent + r]);
    }

    for (int64_t h = 0; h < c.H; ++h) {
      // Steps 5-6 for this head's columns: kv[j, d], d < nope -> K_nope, else V.
      std::vector<double> kv(static_cast<std::size_t>(rows * c.kv_cols));
      std::vector<double> kv_spread(want_bound ? kv.size() : 0);
      std::vector<double> wrow(static_cast<std::size_t>(c.latent));
      for (int64_t d = 0; d < c.kv_cols; ++d) {
        const int64_t n = h * c.kv_cols + d;
        for (int64_t k = 0; k < c.latent; ++k) wrow[k] = fp8[w[n * c.latent + k]];
        const float* ws = w_scale + (n / c.bn) * c.groups;
        for (int64_t j = 0; j < rows; ++j) {
          const double* xr = xq.data() + j * c.latent;
          double acc = 0, mag = 0;
          for (int64_t g = 0; g < c.groups; ++g) {
            const int64_t k0 = g * c.bk, k1 = std::min(c.latent, k0 + c.bk);
            double dot = 0, dot_abs = 0;
            for (int64_t k = k0; k < k1; ++k) dot += xr[k] * wrow[k];
            const double s = static_cast<double>(sa[j * c.groups + g]) * static_cast<double>(ws[g]);
            acc += s * dot;
            if (want_bound) {
              for (int64_t k = k0; k < k1; ++k) dot_abs += std::fabs(xr[k] * wrow[k]);
              mag += std::fabs(s) * dot_abs;
            }
          }
          kv[j * c.kv_cols + d] = bf16_round(acc);
          if (want_bound) kv_spread[j * c.kv_cols + d] = rounding_spread(acc, model->kv_eps * mag);
        }
      }

      // Step 7: causal attention of this sequence's queries over the visible buffer rows.
      std::vector<double> score(static_cast<std::size_t>(rows)), score_err(static_cast<std::size_t>(rows));
      std::vector<double> weight_err(round_p && want_bound ? static_cast<std::size_t>(rows) : 0);  // bf16 weights' spread
      std::vector<double> qd(static_cast<std::size_t>(c.qk));
      std::vector<char> chosen(static_cast<std::size_t>(rows));
      std::vector<int64_t> keys;  // the visible keys of the query, ascending
      for (int64_t i = 0; i < seq_len; ++i) {
        const int64_t t = first_t + i, pos = cache_len + i;
        std::uint16_t* o = out + (t * c.H + h) * c.v;
        double* o_bound = want_bound ? bound + (t * c.H + h) * c.v : nullptr;
        const int64_t causal = pos < offset ? 0 : std::min(rows, pos - offset + 1);
        // topk_indices: only the keys whose position the query's row names.
        std::fill(chosen.begin(), chosen.end(), static_cast<char>(topk == nullptr));
        for (int64_t e = 0; e < top_k; ++e) {
          const int64_t j = static_cast<int64_t>(topk[t * top_k + e]) - offset;
          if (topk[t * top_k + e] >= 0 && j >= 0 && j < rows) chosen[j] = 1;
        }
        keys.clear();
        for (int64_t j = 0; j < causal; ++j)
          if (chosen[j]) keys.push_back(j);
        const int64_t visible = static_cast<int64_t>(keys.size());
        if (visible == 0) {  // no key to attend to: the output row is 0
          for (int64_t e = 0; e < c.v; ++e) {
            o[e] = bf16_once(0.0);
            if (o_bound) o_bound[e] = 0;
          }
          continue;
        }
        for (int64_t e = 0; e < c.qk; ++e) qd[e] = bf16_value(q[(t * c.H + h) * c.qk + e]);
        double max_score = -INFINITY, max_abs_sum = 0;
        for (int64_t n = 0; n < visible; ++n) {
          const int64_t j = keys[n];
          const double* kr = kv.data() + j * c.kv_cols;
          double dot = 0, abs_sum = 0, spread = 0;
          for (int64_t e = 0; e < c.nope; ++e) dot += qd[e] * kr[e];
          for (int64_t r = 0; r < c.rope; ++r) dot += qd[c.nope + r] * k_rope[j * c.rope + r];
          score[j] = scale * dot;
          if (score[j] > max_score) max_score = score[j];
          if (want_bound) {
            for (int64_t e = 0; e < c.nope; ++e) {
              abs_sum += std::fabs(qd[e] * kr[e]);
              spread += std::fabs(qd[e]) * kv_spread[j * c.kv_cols + e];
            }
            for (int64_t r = 0; r < c.rope; ++r) abs_sum += std::fabs(qd[c.nope + r] * k_rope[j * c.rope + r]);
            abs_sum *= std::fabs(scale);
            score_err[j] = std::fabs(scale) * spread;
            max_abs_sum = std::max(max_abs_sum, abs_sum);
            score_err[j] += model->score_eps * abs_sum;  // the row maximum's share is added below
          }
        }
        // Softmax in f64. A NaN score makes the sum NaN and with it the whole row (propagation).
        double denom = 0;
        for (const int64_t j : keys) {
          score[j] = std::exp(score[j] - max_score);
          denom += score[j];
        }
        double delta = 0;
        if (want_bound)
          for (const int64_t j : keys) delta = std::max(delta, score_err[j] + model->score_eps * max_abs_sum);
        const double sm = want_bound ? model->softmax_eps_per_key * static_cast<double>(visible) + model->softmax_eps_fixed : 0;
        const double grow = want_bound ? std::exp(2 * delta) * (1 + sm) : 1;
        // deepseek: p_j = bf16(exp(s_j - max) / denom), P·V over those weights, no later division.
        // Another back-end's p_j is within (grow - 1)·p_j of the exact one, so its bf16 weight may
        // round to a neighbour: that spread, times |V_jd|, joins the bound.
        if (round_p)
          for (const int64_t j : keys) {
            const double p = score[j] / denom;
            if (want_bound) weight_err[j] = rounding_spread(p, (grow - 1) * p);
            score[j] = bf16_round(p);
          }
        const double norm = round_p ? 1.0 : denom;
        for (int64_t e = 0; e < c.v; ++e) {
          double acc = 0, weighted_abs = 0, weighted_spread = 0, weight_spread = 0;
          for (const int64_t j : keys) {
            const double vj = kv[j * c.kv_cols + c.nope + e];
            acc += score[j] * vj;
            if (want_bound) {
              weighted_abs += score[j] * std::fabs(vj);
              weighted_spread += score[j] * kv_spread[j * c.kv_cols + c.nope + e];
              if (round_p) weight_spread += weight_err[j] * std::fabs(vj);
            }
          }
          o[e] = bf16_once(acc / norm);
          if (o_bound)
            o_bound[e] = grow * (weighted_spread / norm) + (grow - 1) * (weighted_abs / norm) + weight_spread;
        }
      }
    }
  }
}

void mla_prefill_fp8(const MlaPrefillFp8Desc& desc, const MlaPrefillFp8Args& args) {
  mla_prefill_fp8_update(desc, args);
  mla_prefill_fp8_attention(desc, args);
}

}  // namespace mlakit::reference
