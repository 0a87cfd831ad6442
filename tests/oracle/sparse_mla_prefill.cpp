#include "oracle/sparse_mla_prefill.hpp"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <vector>

namespace mlakit::oracle {
namespace {

using goldens::Bundle;
using goldens::Tensor;

// Row-major dense f64 matrix.
struct Matrix {
  std::int64_t rows = 0, cols = 0;
  std::vector<double> a;
  Matrix(std::int64_t r, std::int64_t c) : rows(r), cols(c), a(static_cast<std::size_t>(r * c), 0.0) {}
  double& operator()(std::int64_t i, std::int64_t j) { return a[static_cast<std::size_t>(i * cols + j)]; }
  double operator()(std::int64_t i, std::int64_t j) const { return a[static_cast<std::size_t>(i * cols + j)]; }
};

// C = A · Bᵀ  (A [m, k], B [n, k]).
Matrix matmul_nt(const Matrix& A, const Matrix& B) {
  Matrix C(A.rows, B.rows);
  for (std::int64_t i = 0; i < A.rows; ++i)
    for (std::int64_t j = 0; j < B.rows; ++j) {
      double acc = 0;
      for (std::int64_t k = 0; k < A.cols; ++k) acc += A(i, k) * B(j, k);
      C(i, j) = acc;
    }
  return C;
}

// C = A · B[:, :ncols]  (A [m, k], B [k, >= ncols]).
Matrix matmul_nn(const Matrix& A, const Matrix& B, std::int64_t ncols) {
  Matrix C(A.rows, ncols);
  for (std::int64_t i = 0; i < A.rows; ++i)
    for (std::int64_t k = 0; k < A.cols; ++k) {
      const double x = A(i, k);
      for (std::int64_t j = 0; j < ncols; ++j) C(i, j) += x * B(k, j);
    }
  return C;
}

// NaN-propagating maximum of a range.
double max_of(const double* x, std::int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    m = std::fmax(m, x[i]);
  }
  return m;
}

// f64 -> bf16 bits, rounded once: scale the magnitude so that the bf16 quantum is 1, round to the
// nearest integer (ties to even), scale back.
std::uint16_t bf16_bits(double x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return static_cast<std::uint16_t>(sign | 0x7FC0);
  const double ax = std::fabs(x);
  if (std::isinf(ax)) return static_cast<std::uint16_t>(sign | 0x7F80);
  if (ax == 0) return sign;
  int e = 0;
  std::frexp(ax, &e);                             // ax = f·2^e, f in [0.5, 1)
  const int quantum = e - 8 < -133 ? -133 : e - 8;  // 8 significant bits; subnormal step 2^-133
  const double y = std::ldexp(std::nearbyint(std::ldexp(ax, -quantum)), quantum);
  if (y > static_cast<double>(FLT_MAX)) return static_cast<std::uint16_t>(sign | 0x7F80);
  const float f = static_cast<float>(y);  // exact
  return static_cast<std::uint16_t>(sign | (f32_to_bits(f) >> 16));
}

}  // namespace

void sparse_mla_prefill(Bundle& b, bool with_lse, bool with_max_logits) {
  const auto& P = b.params;
  const std::int64_t Hq = P.at("num_q_heads").get<std::int64_t>();
  const std::int64_t qk = P.at("qk_depth").get<std::int64_t>();
  const std::int64_t vd = P.at("v_depth").get<std::int64_t>();
  const std::int64_t stride = P.at("indices_stride").get<std::int64_t>();
  const std::int64_t layer = P.at("layer_idx").get<std::int64_t>();
  const double scale = P.at("scale").get<float>();

  const Tensor& q = b.at("q");
  const Tensor& blocks = b.at("kv_cache.blocks");
  const Tensor* scales = b.has("kv_cache.scales") ? &b.at("kv_cache.scales") : nullptr;
  const Tensor& indices = b.at("indices");
  const Tensor* lengths = b.has("topk_lengths") ? &b.at("topk_lengths") : nullptr;
  const Tensor* sink = b.has("attn_sink") ? &b.at("attn_sink") : nullptr;
  const std::int64_t T = q.shape()[0];
  const std::int64_t num_blocks = blocks.shape()[0], layers = blocks.shape()[2], page = blocks.shape()[3];
  const std::int64_t rows_total = num_blocks * page;

  Tensor out(DType::bf16, {T, Hq, vd});
  Tensor lse(DType::f32, {T, Hq});
  Tensor max_logits(DType::f32, {T, Hq});
  for (std::int64_t t = 0; t < T; ++t) {
    // The slots this query row reads: positions below its length whose i32 value names a row.
    const std::int64_t n_read = lengths ? static_cast<std::int64_t>(lengths->value(t)) : stride;
    std::vector<std::int64_t> sel;
    for (std::int64_t p = 0; p < n_read && p < stride; ++p) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, indices.bytes() + (t * stride + p) * 4, 4);
      const std::int64_t r = static_cast<std::int32_t>(bits);
      if (0 <= r && r < rows_total) sel.push_back(r);
    }
    const std::int64_t n = static_cast<std::int64_t>(sel.size());

    // Dense K [n, qk] (V is its first vd columns) and Q [Hq, qk].
    // A split row (spec 06 §B) is the concatenation [codes · per-column scale | bf16 tail]; the
    // per-column scale vector repeats each group's scale quant_granularity times.
    Matrix K(n, qk), Q(Hq, qk);
    const std::int64_t wq = blocks.shape()[5], wt = qk - wq;
    const std::int64_t gran = scales ? P.at("quant_granularity").get<std::int64_t>() : wq;
    std::vector<double> col_scale(static_cast<std::size_t>(wq));
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t blk = sel[i] / page, off = sel[i] % page;
      const std::int64_t row = (blk * layers + layer) * page + off;  // kv_dim = 1, one head
      for (std::int64_t g = 0, d = 0; d < wq; ++g)
        for (std::int64_t j = 0; j < gran && d < wq; ++j, ++d)
          col_scale[static_cast<std::size_t>(d)] = scales ? scales->value(row * scales->shape()[5] + g) : 1.0;
      for (std::int64_t d = 0; d < wq; ++d) K(i, d) = blocks.value(row * wq + d) * col_scale[static_cast<std::size_t>(d)];
      for (std::int64_t d = 0; d < wt; ++d) K(i, wq + d) = b.at("kv_cache.tail").value(row * wt + d);
    }
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t d = 0; d < qk; ++d) Q(h, d) = q.value((t * Hq + h) * qk + d);

    const Matrix S = matmul_nt(Q, K);  // [Hq, n]
    const std::int64_t cols = n + (sink ? 1 : 0);
    Matrix Pm(Hq, n);
    std::vector<double> logits(static_cast<std::size_t>(cols));
    for (std::int64_t h = 0; h < Hq; ++h) {
      for (std::int64_t i = 0; i < n; ++i) logits[i] = scale * S(h, i);
      if (sink) logits[n] = sink->value(h);
      double l_all = 0, l_valid = 0;
      const double mx = max_of(logits.data(), cols);
      const double mv = max_of(logits.data(), n);
      for (std::int64_t i = 0; i < cols; ++i) l_all += std::exp(logits[i] - mx);
      for (std::int64_t i = 0; i < n; ++i) {
        Pm(h, i) = std::exp(logits[i] - mx) / l_all;  // the sink column's weight is dropped
        l_valid += std::exp(logits[i] - mv);
      }
      lse.data<float>()[t * Hq + h] =
          n == 0 ? std::numeric_limits<float>::infinity() : static_cast<float>(mv + std::log(l_valid));
      max_logits.data<float>()[t * Hq + h] = static_cast<float>(mv);  // -inf over no column
    }
    const Matrix O = matmul_nn(Pm, K, vd);  // [Hq, vd]; zero when n = 0
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t j = 0; j < vd; ++j) out.data<std::uint16_t>()[(t * Hq + h) * vd + j] = bf16_bits(O(h, j));
  }
  b.tensors["out.output"] = out;
  if (with_lse) b.tensors["out.lse"] = lse;
  if (with_max_logits) b.tensors["out.max_logits"] = max_logits;
}

}  // namespace mlakit::oracle
