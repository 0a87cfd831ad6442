#include "oracle/fused_qkv_paged.hpp"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace mlakit::testing {
namespace {

using goldens::Bundle;
using goldens::Tensor;

// Values decoded from the bit fields with ldexp (independent of the library's conversion functions).
double decode_bf16_bits(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 7) & 0xFF, m = h & 0x7F;
  if (e == 0xFF) return m ? NAN : (s ? -INFINITY : INFINITY);
  const double mag = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 127 - 7);
  return s ? -mag : mag;
}

double decode_f16_bits(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
  if (e == 0x1F) return m ? NAN : (s ? -INFINITY : INFINITY);
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 15 - 10);
  return s ? -mag : mag;
}

double decode_fp8_bits(std::uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 0xF, m = c & 0x7;
  if (e == 0xF && m == 0x7) return NAN;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 7 - 3);
  return s ? -mag : mag;
}

double element(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data<float>()[i];
    case DType::bf16: return decode_bf16_bits(t.data<std::uint16_t>()[i]);
    case DType::f16: return decode_f16_bits(t.data<std::uint16_t>()[i]);
    case DType::f8e4m3: return decode_fp8_bits(t.data<std::uint8_t>()[i]);
    default: throw std::invalid_argument("oracle: unexpected dtype");
  }
}

constexpr double kBf16Max = 0x1.FEp127;
constexpr double kF32Max = 0x1.FFFFFEp127;

double nearest_bf16(double v) { return round_to_format(v, 8, -133, kBf16Max); }

void put(Tensor& t, std::int64_t i, double v) {
  if (t.dtype() == DType::f32) {
    t.data<float>()[i] = static_cast<float>(round_to_format(v, 24, -149, kF32Max));  // exact conversion
  } else {
    const float f = static_cast<float>(nearest_bf16(v));  // exact: a bf16 value is an f32 value
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    t.data<std::uint16_t>()[i] = static_cast<std::uint16_t>(u >> 16);
  }
}

// The whole weight as a dense f64 [N, K] matrix.
std::vector<double> dequantize(const Bundle& b, std::int64_t N, std::int64_t K) {
  std::vector<double> W(static_cast<std::size_t>(N * K));
  const std::string fmt = b.params.at("weight_format").get<std::string>();
  if (fmt == "dense") {
    const Tensor& w = b.at("weight");
    for (std::int64_t i = 0; i < N * K; ++i) W[i] = element(w, i);
  } else if (fmt == "fp8_block") {
    const Tensor& w = b.at("weight");
    const Tensor& s = b.at("weight_scale");
    for (std::int64_t i = 0; i < N * K; ++i) W[i] = element(w, i);
    // Scale one 128×128 tile at a time (the last tiles are partial).
    for (std::int64_t rb = 0; rb < s.shape()[0]; ++rb)
      for (std::int64_t cb = 0; cb < s.shape()[1]; ++cb) {
        const double sc = s.data<float>()[rb * s.shape()[1] + cb];
        for (std::int64_t n = rb * 128; n < std::min(N, rb * 128 + 128); ++n)
          for (std::int64_t k = cb * 128; k < std::min(K, cb * 128 + 128); ++k) W[n * K + k] *= sc;
      }
  } else {
    const std::int64_t gs = b.params.at("group_size").get<std::int64_t>();
    const bool has_zp = b.params.at("has_zp").get<bool>();
    // v1 checkpoints store z - 1 (spec 06 §D1): the zero point is the nibble plus one.
    const int v1 = b.params.value("zero_format", std::string("v2")) == "v1" ? 1 : 0;
    const std::int64_t G = K / gs;
    // Unpack every 32-bit word into its eight 4-bit fields, low bits first.
    auto unpack = [](std::int32_t word, int out[8]) {
      std::uint32_t u = static_cast<std::uint32_t>(word);
      for (int i = 0; i < 8; ++i, u >>= 4) out[i] = static_cast<int>(u % 16);
    };
    std::vector<int> q(static_cast<std::size_t>(K * N));  // [K, N]
    const Tensor& qw = b.at("qweight");
    for (std::int64_t r = 0; r < K / 8; ++r)
      for (std::int64_t n = 0; n < N; ++n) {
        int f[8];
        unpack(qw.data<std::int32_t>()[r * N + n], f);
        for (int i = 0; i < 8; ++i) q[(8 * r + i) * N + n] = f[i];
      }
    std::vector<int> z(static_cast<std::size_t>(G * N), 8);  // [G, N]
    if (has_zp) {
      const Tensor& qz = b.at("qzeros");
      for (std::int64_t g = 0; g < G; ++g)
        for (std::int64_t c = 0; c < N / 8; ++c) {
          int f[8];
          unpack(qz.data<std::int32_t>()[g * (N / 8) + c], f);
          for (int i = 0; i < 8; ++i) z[g * N + 8 * c + i] = f[i] + v1;
        }
    }
    std::vector<std::int64_t> group(static_cast<std::size_t>(K));
    for (std::int64_t k = 0; k < K; ++k) group[k] = b.has("g_idx") ? b.at("g_idx").data<std::int32_t>()[k] : k / gs;
    const Tensor& sc = b.at("scales");
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t n = 0; n < N; ++n) {
        const std::int64_t g = group[k];
        // (q − z)·scale is exact in f64; the weight is that product rounded to bf16.
        W[n * K + k] = nearest_bf16(double(q[k * N + n] - z[g * N + n]) * element(sc, g * N + n));
      }
  }
  return W;
}

}  // namespace

double round_to_format(double v, int precision, int min_exp, double max_finite) {
  if (std::isnan(v) || std::isinf(v) || v == 0) return v;
  int e = 0;
  std::frexp(v, &e);  // |v| = m·2^e, m in [0.5, 1)
  const int quantum = std::max(e - precision, min_exp);
  const int saved = std::fegetround();
  std::fesetround(FE_TONEAREST);
  const double r = std::ldexp(std::nearbyint(std::ldexp(v, -quantum)), quantum);
  std::fesetround(saved);
  if (std::fabs(r) > max_finite) return v < 0 ? -INFINITY : INFINITY;
  return r;
}

void fused_qkv_paged_oracle(Bundle& b) {
  const Tensor& x = b.at("hidden_state");
  const std::int64_t T = x.shape()[0], K = x.shape()[1];
  const std::int64_t q_dim = b.params.at("q_dim").get<std::int64_t>();
  const std::int64_t layer = b.params.at("layer_idx").get<std::int64_t>();
  const Tensor& blocks = b.at("kv_cache.blocks");
  const auto& s = blocks.shape();
  const std::int64_t kv_dim = s[1], layers = s[2], ps = s[3], heads = s[4], hd = s[5];
  const std::int64_t N = q_dim + kv_dim * heads * hd;

  const std::vector<double> W = dequantize(b, N, K);
  std::vector<double> X(static_cast<std::size_t>(T * K));
  for (std::int64_t i = 0; i < T * K; ++i) X[i] = element(x, i);

  // Y = X·Wᵀ in f64.
  std::vector<double> Y(static_cast<std::size_t>(T * N), 0.0);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (std::int64_t k = 0; k < K; ++k) acc += X[t * K + k] * W[n * K + k];
      Y[t * N + n] = acc;
    }

  Tensor& out = b.add("out.output", x.dtype(), {T, q_dim});
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t c = 0; c < q_dim; ++c) put(out, t * q_dim + c, Y[t * N + c]);

  // Scatter the remaining columns: token → (sequence, position) → (page, offset).
  Tensor& cache = b.copy_to_output("kv_cache.blocks");
  const Tensor& iro = b.at("input_row_offsets");
  const Tensor& lut = b.at("kv_cache.lookup_table");
  const Tensor& lens = b.at("kv_cache.cache_lengths");
  const std::int64_t batch = iro.numel() - 1, cols = lut.shape()[1];
  for (std::int64_t seq = 0; seq < batch; ++seq) {
    const std::int64_t begin = iro.data<std::uint32_t>()[seq], end = iro.data<std::uint32_t>()[seq + 1];
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t position = lens.data<std::uint32_t>()[seq] + (t - begin);
      const std::int64_t page = lut.data<std::uint32_t>()[seq * cols + position / ps];
      const std::int64_t slot = position % ps;
      for (std::int64_t kv = 0; kv < kv_dim; ++kv)
        for (std::int64_t h = 0; h < heads; ++h)
          for (std::int64_t d = 0; d < hd; ++d) {
            const std::int64_t col = q_dim + (kv * heads + h) * hd + d;
            const std::int64_t at = ((((page * kv_dim + kv) * layers + layer) * ps + slot) * heads + h) * hd + d;
            put(cache, at, Y[t * N + col]);
          }
    }
  }
}

}  // namespace mlakit::testing
