#include "bench/library_bar.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/common/cpu_features.hpp"
#include "cpu/common/library_gemm.hpp"

namespace mlakit::bench {
namespace {

using Clock = std::chrono::steady_clock;

// `calls` x the GEMMs on f32 operands filled once; all GEMMs share buffers of the largest one's
// size (the values do not change a BLAS's speed), so that many small products (op 3's causal
// blocks) need no more memory than the largest.
std::function<void()> prepare_sgemm(const std::vector<Gemm>& gemms, std::size_t calls, int threads) {
  std::size_t a_n = 1, b_n = 1, c_n = 1;
  for (const Gemm& g : gemms) {
    a_n = std::max(a_n, g.m * g.k);
    b_n = std::max(b_n, g.n * g.k);
    c_n = std::max(c_n, g.m * g.n);
  }
  auto a = std::make_shared<std::vector<float>>(a_n, 0.5f), b = std::make_shared<std::vector<float>>(b_n, 0.25f),
       c = std::make_shared<std::vector<float>>(c_n, 0.0f);
  return [=] {
    for (std::size_t r = 0; r < calls; ++r)
      for (const Gemm& g : gemms)
        cpu::library_gemm::sgemm_nt_threads(g.m, g.n, g.k, a->data(), g.k, b->data(), g.k, c->data(), g.n, threads);
  };
}

std::size_t dim(const goldens::Bundle& b, const char* tensor, int axis) {
  return static_cast<std::size_t>(b.at(tensor).shape()[static_cast<std::size_t>(axis)]);
}

}  // namespace

std::vector<GemmGroup> library_gemms(const std::string& op, const goldens::Bundle& b) {
  if (op == "fused_qkv_paged") {
    const std::size_t T = dim(b, "hidden_state", 0), K = dim(b, "hidden_state", 1);
    const std::size_t N = static_cast<std::size_t>(b.params.at("q_dim").get<std::int64_t>()) +
                          dim(b, "kv_cache.blocks", 1) * dim(b, "kv_cache.blocks", 4) * dim(b, "kv_cache.blocks", 5);
    if (T == 0) return {};
    return {{{{T, N, K}}, 1, 1.0}};
  }
  if (op == "sparse_mla_prefill") {
    const std::size_t T = dim(b, "q", 0), Hq = dim(b, "q", 1), qk = dim(b, "q", 2);
    const std::size_t topk = dim(b, "indices", 1);
    const auto v = static_cast<std::size_t>(b.params.at("v_depth").get<std::int64_t>());
    if (T == 0) return {};
    const std::size_t sample = std::min<std::size_t>(T, 8);
    return {{{{Hq, topk, qk}, {Hq, v, topk}}, sample, static_cast<double>(T) / static_cast<double>(sample)}};
  }
  if (op == "mla_prefill_fp8") {
    // The KV projection of the whole window, then per head a causal attention as a library would
    // run it: blocks of 64 query rows, each against the keys its last row sees (Q·Kᵀ and P·V).
    const auto& P = b.params;
    const auto H = static_cast<std::size_t>(P.at("num_heads").get<std::int64_t>());
    const auto nope = static_cast<std::size_t>(P.at("nope").get<std::int64_t>());
    const auto rope = static_cast<std::size_t>(P.at("rope").get<std::int64_t>());
    const auto v = static_cast<std::size_t>(P.at("v").get<std::int64_t>());
    const auto latent = static_cast<std::size_t>(P.at("latent").get<std::int64_t>());
    const auto BL = static_cast<std::size_t>(P.at("buffer_length").get<std::int64_t>());
    const goldens::Tensor& iro = b.at("input_row_offsets");
    const goldens::Tensor& bro = b.at("buffer_row_offsets");
    std::vector<Gemm> attention;
    for (std::int64_t s = 0; s + 1 < iro.numel(); ++s) {
      const auto rows = static_cast<std::size_t>(iro.value(s + 1) - iro.value(s));
      const auto window = static_cast<std::size_t>(bro.value(s + 1) - bro.value(s));
      const std::size_t before = window >= rows ? window - rows : 0;  // cached positions ahead of the rows
      for (std::size_t q0 = 0; q0 < rows; q0 += 64) {
        const std::size_t m = std::min<std::size_t>(64, rows - q0), keys = std::min(window, before + q0 + m);
        attention.push_back({m, keys, nope + rope});
        attention.push_back({m, v, keys});
      }
    }
    if (BL == 0 || attention.empty()) return {};
    return {{{{BL, H * (nope + v), latent}}, 1, 1.0}, {attention, 1, static_cast<double>(H)}};
  }
  return {};
}

BarRound prepare_groups(const std::vector<GemmGroup>& groups, const GemmPrepare& prepare, int threads) {
  std::vector<std::pair<std::function<void()>, double>> parts;
  for (const GemmGroup& g : groups) parts.emplace_back(prepare(g.gemms, g.calls, threads), g.multiplier);
  return [parts = std::move(parts)] {
    double s = 0;
    for (const auto& [once, multiplier] : parts) {
      const auto t0 = Clock::now();
      once();
      s += multiplier * std::chrono::duration<double>(Clock::now() - t0).count();
    }
    return s;
  };
}

std::optional<BarRound> library_bar(const std::string& op, const goldens::Bundle& b, int threads) {
  if (!cpu::library_gemm::available()) return std::nullopt;
  const std::vector<GemmGroup> groups = library_gemms(op, b);
  if (groups.empty()) return std::nullopt;
  return prepare_groups(groups, prepare_sgemm, threads);
}

std::string library_description() {
  std::string d = cpu::library_gemm::description();
  // OpenBLAS builds that do not know the CPU fall back to their SSE3 kernels: a weak bar.
  if (d.find("Prescott") != std::string::npos && core::cpu_info().has(core::kAvx2))
    d += " -- generic kernels on an AVX2/AVX-512 CPU: rerun with OPENBLAS_CORETYPE (e.g. SkylakeX, Haswell)";
  return d;
}

}  // namespace mlakit::bench
