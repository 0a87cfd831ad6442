#include "oracle/mla_prefill_fp8.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace mlakit::oracle {
namespace {

using goldens::Bundle;
using goldens::Tensor;
using std::int64_t;

double bits_to_double(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

double bf16_of(double x) { return bits_to_double(round_to_bf16_bits(x)); }

// A flat 2-D matrix of doubles.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> a;
  Mat(int64_t r, int64_t c, double fill = 0) : rows(r), cols(c), a(static_cast<std::size_t>(r * c), fill) {}
  double& operator()(int64_t i, int64_t j) { return a[static_cast<std::size_t>(i * cols + j)]; }
  double operator()(int64_t i, int64_t j) const { return a[static_cast<std::size_t>(i * cols + j)]; }
};

// The f8e4m3 code of v's group-scaled value, re-derived: f32 results are obtained as f64 results
// rounded to f32, which is the correctly rounded f32 result for one +, -, *, / of f32 operands.
struct GroupQuant {
  float sa = 0;
  std::vector<int> codes;
};

GroupQuant quantize(const std::vector<double>& x, const std::string& numerics) {
  double amax = 0;
  for (double e : x)
    if (!std::isnan(e)) amax = std::fmax(amax, std::fabs(e));
  GroupQuant g;
  if (numerics != "max") {
    // DeepSeek's act_quant: floor 1e-4, times f32(1/448); ue8m0: up to the next power of two (log2
    // and ceil, as the source writes it); codes from x / sa.
    const float a = static_cast<float>(std::fmax(amax, static_cast<double>(1e-4f)));
    g.sa = static_cast<float>(static_cast<double>(a) * static_cast<double>(static_cast<float>(1.0 / 448.0)));
    if (numerics == "deepseek_ue8m0") g.sa = static_cast<float>(std::exp2(std::ceil(std::log2(static_cast<double>(g.sa)))));
    for (double e : x) {
      float y = static_cast<float>(e / static_cast<double>(g.sa));
      if (!std::isnan(y)) y = std::fmin(std::fmax(y, -448.0f), 448.0f);
      g.codes.push_back(nearest_fp8_code(y));
    }
    return g;
  }
  g.sa = static_cast<float>(std::fmin(amax, 1200.0) / 448.0);
  float inv = 0;
  if (g.sa != 0) {
    const float r = static_cast<float>(1.0 / static_cast<double>(g.sa));
    inv = std::isinf(r) ? 0.0f : r;
  }
  for (double e : x) {
    float y = static_cast<float>(e * static_cast<double>(inv));
    if (!std::isnan(y)) y = std::fmin(std::fmax(y, -448.0f), 448.0f);
    g.codes.push_back(nearest_fp8_code(y));
  }
  return g;
}

}  // namespace

double fp8_code_value(int code) {
  const int sign = code >> 7, exp = (code >> 3) & 15, man = code & 7;
  if (exp == 15 && man == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = exp == 0 ? man / 512.0 : (1.0 + man / 8.0) * std::pow(2.0, exp - 7);
  return sign ? -mag : mag;
}

int nearest_fp8_code(float y) {
  static const std::array<double, 128> values = [] {
    std::array<double, 128> t{};
    for (int c = 0; c < 128; ++c) t[static_cast<std::size_t>(c)] = fp8_code_value(c);
    return t;
  }();
  if (std::isnan(y)) return 0x7F;
  const double m = std::fabs(static_cast<double>(y));
  int best = 0;
  for (int c = 1; c <= 0x7E; ++c) {
    const double dc = std::fabs(values[static_cast<std::size_t>(c)] - m);
    const double db = std::fabs(values[static_cast<std::size_t>(best)] - m);
    if (dc < db || (dc == db && (c & 1) == 0)) best = c;
  }
  return best | (std::signbit(y) ? 0x80 : 0);
}

void mla_prefill_fp8(Bundle& b) {
  const auto& p = b.params;
  const int64_t H = p.at("num_heads"), nope = p.at("nope"), rope = p.at("rope"), v = p.at("v"),
                latent = p.at("latent"), bn = p.at("bn"), bk = p.at("bk"), layer = p.at("layer_idx");
  const double scale = p.at("scale").get<double>(), eps = p.at("epsilon").get<double>();
  const std::string numerics = p.value("numerics", std::string("max"));
  const bool deepseek = numerics != "max";
  const int64_t qk = nope + rope, hs = latent + rope, N = H * (nope + v);

  Tensor& q = b.copy_to_output("q");
  Tensor& blocks = b.copy_to_output("kv_cache.blocks");
  const Tensor& iro = b.at("input_row_offsets");
  const Tensor& bro = b.at("buffer_row_offsets");
  const Tensor& co = b.at("cache_offsets");
  const Tensor& freqs = b.at("freqs_cis");
  const Tensor& gamma = b.at("kv_norm_gamma");
  const Tensor& lut = b.at("kv_cache.lookup_table");
  const Tensor& lens = b.at("kv_cache.cache_lengths");
  const Tensor& w = b.at("kv_b_proj");
  const Tensor& ws = b.at("kv_b_proj_scale");
  const int64_t T = q.shape()[0], B = iro.numel() - 1;
  const int64_t layers = blocks.shape()[2], ps = blocks.shape()[3], lut_cols = lut.shape()[1];
  auto u = [](const Tensor& t, int64_t i) { return static_cast<int64_t>(t.data<std::uint32_t>()[i]); };
  auto row = [&](int64_t s, int64_t pos) {
    return blocks.data<std::uint16_t>() + ((u(lut, s * lut_cols + pos / ps) * layers + layer) * ps + pos % ps) * hs;
  };
  auto rotate = [&](std::uint16_t* x, int64_t pos) {
    for (int64_t i = 0; i < rope / 2; ++i) {
      const std::complex<double> z(bits_to_double(x[2 * i]), bits_to_double(x[2 * i + 1]));
      const std::complex<double> f(freqs.value(pos * rope + 2 * i), freqs.value(pos * rope + 2 * i + 1));
      const std::complex<double> r = z * f;
      x[2 * i] = round_to_bf16_bits(r.real());
      x[2 * i + 1] = round_to_bf16_bits(r.imag());
    }
  };

  // Steps 1-2 on every new token.
  for (int64_t s = 0; s < B; ++s) {
    for (int64_t t = u(iro, s); t < u(iro, s + 1); ++t) {
      const int64_t pos = u(lens, s) + t - u(iro, s);
      for (int64_t h = 0; h < H; ++h) rotate(q.data<std::uint16_t>() + (t * H + h) * qk + nope, pos);
      std::uint16_t* r = row(s, pos);
      rotate(r + latent, pos);
      double mean_sq = 0;
      for (int64_t k = 0; k < latent; ++k) mean_sq += bits_to_double(r[k]) * bits_to_double(r[k]) / static_cast<double>(latent);
      const double rms = std::sqrt(mean_sq + eps);
      for (int64_t k = 0; k < latent; ++k)
        r[k] = deepseek ? round_to_bf16_bits(gamma.value(k) * (bits_to_double(r[k]) / rms))  // one rounding
                        : round_to_bf16_bits(bf16_of(bits_to_double(r[k]) / rms) * gamma.value(k));
    }
  }

  // The weight as a dense f64 matrix W·scale.
  Mat wd(N, latent);
  const int64_t scale_cols = ws.shape()[1];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < latent; ++k)
      wd(n, k) = fp8_code_value(w.data<std::uint8_t>()[n * latent + k]) * ws.value((n / bn) * scale_cols + k / bk);

  Tensor& out = b.add("out.output", DType::bf16, {T, H, v});
  for (int64_t s = 0; s < B; ++s) {
    const int64_t nb = u(bro, s + 1) - u(bro, s), off = u(co, s), first = u(iro, s), sl = u(iro, s + 1) - first;
    const int64_t cl = u(lens, s);
    // Gathered latent rows, quantized group by group, dequantized: X.
    Mat x(nb, latent), kr(nb, rope);
    for (int64_t j = 0; j < nb; ++j) {
      const std::uint16_t* r = row(s, off + j);
      for (int64_t g = 0; g * bk < latent; ++g) {
        std::vector<double> vals;
        for (int64_t k = g * bk; k < std::min(latent, (g + 1) * bk); ++k) vals.push_back(bits_to_double(r[k]));
        const GroupQuant qg = quantize(vals, numerics);
        for (std::size_t i = 0; i < vals.size(); ++i)
          x(j, g * bk + static_cast<int64_t>(i)) = fp8_code_value(qg.codes[i]) * static_cast<double>(qg.sa);
      }
      for (int64_t e = 0; e < rope; ++e) kr(j, e) = bits_to_double(r[latent + e]);
    }
    // KV = X·Wᵀ, rounded to bf16.
    Mat kv(nb, N);
    for (int64_t j = 0; j < nb; ++j)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < latent; ++k) acc += x(j, k) * wd(n, k);
        kv(j, n) = bf16_of(acc);
      }
    // Per head: S = scale·Q·Kᵀ over [sl × nb], mask, softmax, O = P·V.
    for (int64_t h = 0; h < H; ++h) {
      Mat S(sl, nb), P(sl, nb);
      std::vector<std::vector<bool>> visible(static_cast<std::size_t>(sl), std::vector<bool>(static_cast<std::size_t>(nb)));
      const Tensor* topk = b.has("topk_indices") ? &b.at("topk_indices") : nullptr;
      for (int64_t i = 0; i < sl; ++i)
        for (int64_t j = 0; j < nb; ++j) {
          visible[i][j] = off + j <= cl + i;
          if (topk) {  // DeepSeek-V3.2's index mask: the position must be one of the query's top-k
            bool listed = false;
            for (int64_t e = 0; e < topk->shape()[1]; ++e)
              listed = listed || topk->data<std::int32_t>()[(first + i) * topk->shape()[1] + e] == off + j;
            visible[i][j] = visible[i][j] && listed;
          }
          double dot = 0;
          for (int64_t e = 0; e < qk; ++e) {
            const double qe = q.value(((first + i) * H + h) * qk + e);
            const double ke = e < nope ? kv(j, h * (nope + v) + e) : kr(j, e - nope);
            dot += qe * ke;
          }
          S(i, j) = scale * dot;
        }
      for (int64_t i = 0; i < sl; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        bool any = false, nan = false;
        for (int64_t j = 0; j < nb; ++j)
          if (visible[i][j]) {
            any = true;
            nan |= std::isnan(S(i, j));
            mx = std::fmax(mx, S(i, j));
          }
        double sum = 0;
        for (int64_t j = 0; j < nb; ++j)
          if (visible[i][j]) sum += (P(i, j) = nan ? std::nan("") : std::exp(S(i, j) - mx));
        for (int64_t j = 0; j < nb; ++j) P(i, j) = deepseek ? bf16_of(P(i, j) / sum) : P(i, j) / sum;
        for (int64_t d = 0; d < v; ++d) {
          double o = 0;
          for (int64_t j = 0; j < nb; ++j)
            if (visible[i][j]) o += P(i, j) * kv(j, h * (nope + v) + nope + d);
          out.data<std::uint16_t>()[((first + i) * H + h) * v + d] = any ? round_to_bf16_bits(o) : std::uint16_t{0};
        }
      }
    }
  }
}

}  // namespace mlakit::oracle
