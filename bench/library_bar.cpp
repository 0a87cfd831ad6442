#include "bench/library_bar.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/common/library_gemm.hpp"

namespace mlakit::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Gemm {
  std::size_t m, n, k;
};

// Best of three timings of `calls` x the GEMMs (each on its own f32 operands, filled once).
double time_gemms(const std::vector<Gemm>& gemms, std::size_t calls, int threads) {
  std::vector<std::vector<float>> a, b, c;
  for (const Gemm& g : gemms) {
    a.emplace_back(g.m * g.k, 0.5f);
    b.emplace_back(g.n * g.k, 0.25f);
    c.emplace_back(g.m * g.n, 0.0f);
  }
  const auto once = [&] {
    for (std::size_t r = 0; r < calls; ++r)
      for (std::size_t i = 0; i < gemms.size(); ++i)
        cpu::library_gemm::sgemm_nt_threads(gemms[i].m, gemms[i].n, gemms[i].k, a[i].data(), gemms[i].k, b[i].data(),
                                    gemms[i].k, c[i].data(), gemms[i].n, threads);
  };
  once();  // warm-up
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    once();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

std::size_t dim(const goldens::Bundle& b, const char* tensor, int axis) {
  return static_cast<std::size_t>(b.at(tensor).shape()[static_cast<std::size_t>(axis)]);
}

}  // namespace

std::optional<double> library_seconds(const std::string& op, const goldens::Bundle& b, int threads) {
  if (!cpu::library_gemm::available()) return std::nullopt;
  if (op == "fused_qkv_paged") {
    const std::size_t T = dim(b, "hidden_state", 0), K = dim(b, "hidden_state", 1);
    const std::size_t N = static_cast<std::size_t>(b.params.at("q_dim").get<std::int64_t>()) +
                          dim(b, "kv_cache.blocks", 1) * dim(b, "kv_cache.blocks", 4) * dim(b, "kv_cache.blocks", 5);
    if (T == 0) return std::nullopt;
    return time_gemms({{T, N, K}}, 1, threads);
  }
  if (op == "sparse_mla_prefill") {
    const std::size_t T = dim(b, "q", 0), Hq = dim(b, "q", 1), qk = dim(b, "q", 2);
    const std::size_t topk = dim(b, "indices", 1);
    const auto v = static_cast<std::size_t>(b.params.at("v_depth").get<std::int64_t>());
    if (T == 0) return std::nullopt;
    const std::size_t sample = std::min<std::size_t>(T, 8);
    const double s = time_gemms({{Hq, topk, qk}, {Hq, v, topk}}, sample, threads);
    return s * static_cast<double>(T) / static_cast<double>(sample);
  }
  return std::nullopt;
}

std::string library_description() { return cpu::library_gemm::description(); }

}  // namespace mlakit::bench
