#include "bench/peak_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <time.h>

#include "cpu/common/kernels.hpp"
#include "cpu/common/parallel.hpp"
#include "goldens/common/engine_allocator.hpp"

namespace mlakit::bench {
namespace {

volatile float g_sink;

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Runs work(thread_index) on `threads` threads at once and returns the sum over threads of
// units / (that thread's CPU time). CPU time rather than wall time: on a shared machine the
// probe then measures what a core delivers while it runs, not how often it was scheduled.
template <class Fn>
double rate_on_threads(int threads, double units_per_thread, Fn work) {
  std::vector<double> cpu(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const double c0 = thread_cpu_seconds();
      work(t);
      cpu[t] = thread_cpu_seconds() - c0;
    });
  for (auto& th : pool) th.join();
  double rate = 0;
  for (double c : cpu) rate += units_per_thread / std::max(c, 1e-9);
  return rate;
}

// Best of three timings of a register-resident loop; iterations sized to ~0.1 s per thread.
double loop_gflops(float (*loop)(std::size_t, float), double flops_per_iter, int threads) {
  std::size_t iters = 1 << 16;
  for (;;) {  // calibrate on one thread
    const double c0 = thread_cpu_seconds();
    g_sink = loop(iters, 1.0f);
    if (thread_cpu_seconds() - c0 > 0.02) break;
    iters *= 4;
  }
  iters *= 5;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const double r = rate_on_threads(threads, flops_per_iter * static_cast<double>(iters),
                                     [&](int i) { g_sink = loop(iters, 1.0f + static_cast<float>(i)); });
    best = std::max(best, r * 1e-9);
  }
  return best;
}

// The 512 MiB the memory probes read, on the pages the golden drivers give a KV cache (huge pages
// unless MLAKIT_HUGE_PAGES=0), first touched by the `threads` reading threads (their memory
// nodes), not by the allocating one.
class ProbeBuffer {
 public:
  ProbeBuffer(std::size_t n, int threads) : n_(n), p_(goldens::EngineAllocator<float>().allocate(n)) {
    const std::size_t per = (n / threads + 15) / 16 * 16;
    rate_on_threads(threads, 1.0, [&](int t) {
      const std::size_t b = std::min(n, per * t), e = std::min(n, b + per);
      for (std::size_t i = b; i < e; ++i) p_[i] = static_cast<float>(i & 0xFF);
    });
  }
  ~ProbeBuffer() { goldens::EngineAllocator<float>().deallocate(p_, n_); }
  ProbeBuffer(const ProbeBuffer&) = delete;
  ProbeBuffer& operator=(const ProbeBuffer&) = delete;
  const float* data() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  std::size_t n_;
  float* p_;
};
constexpr std::size_t kProbeFloats = (std::size_t{512} << 20) / sizeof(float);

double dram_gbps(float (*read_sum)(const float*, std::size_t), const ProbeBuffer& buf, int threads) {
  const std::size_t n = buf.size(), per = (n / threads + 15) / 16 * 16;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const double r = rate_on_threads(threads, static_cast<double>(per * sizeof(float)), [&](int i) {
      const std::size_t b = std::min(n, per * i), e = std::min(n, b + per);
      g_sink = read_sum(buf.data() + b, e - b);
    });
    best = std::max(best, r * 1e-9);
  }
  return best;
}

double paged_gbps(float (*read_sum)(const float*, std::size_t), const ProbeBuffer& buf, int threads) {
  const std::size_t pages = buf.size() / kPagedReadPageFloats, per = pages / static_cast<std::size_t>(threads);
  const std::vector<std::size_t> order = page_order(pages, true);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const double r = rate_on_threads(threads, static_cast<double>(per * kPagedReadPageFloats * sizeof(float)), [&](int i) {
      const std::size_t first = per * static_cast<std::size_t>(i);
      g_sink = page_walk_sum(read_sum, buf.data(), order.data(), first, first + per, kPagedReadPageFloats, true);
    });
    best = std::max(best, r * 1e-9);
  }
  return best;
}

// The panel GEMM's register tiles on L1-resident operands (one row group x one panel x k 512, A
// packed), each thread its own: the sum over threads of each one's rate over its own wall time,
// best of three. The FMA probe's chains touch no memory and are rated per CPU time; on a shared
// host whose cores slow each other down under load, this is what GEMM work gets from them all.
double gemm_l1_gflops(const simd::GemmKernels& g, int threads) {
  const std::size_t rows = g.panel_rows, cols = g.panel_cols, k = 512, calls = 4000;
  const double flops = 2.0 * static_cast<double>(calls * rows * cols * k);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> wall(static_cast<std::size_t>(threads));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        std::vector<float> ap(rows * k, 0.5f), panel(cols * k, 0.25f), c(rows * cols);
        const auto t0 = std::chrono::steady_clock::now();
        for (std::size_t i = 0; i < calls; ++i) g.gemm_panel_packed(rows, cols, k, ap.data(), panel.data(), c.data(), cols, false);
        wall[static_cast<std::size_t>(t)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        g_sink = c[0];
      });
    for (auto& th : pool) th.join();
    double rate = 0;
    for (double w : wall) rate += flops / std::max(w, 1e-9);
    best = std::max(best, rate * 1e-9);
  }
  return best;
}

PeakFigures measure(Isa level) {
  const simd::PeakKernels& k = cpu::peak_kernels(level);
  PeakFigures p;
  p.level = k.level;
  p.threads = cpu::num_threads();
  p.f32_gflops_1t = loop_gflops(k.f32_fma, k.f32_flops_per_iter, 1);
  p.f32_gflops_all = loop_gflops(k.f32_fma, k.f32_flops_per_iter, p.threads);
  p.bf16_gflops_1t = loop_gflops(k.bf16_dot, k.bf16_flops_per_iter, 1);
  p.bf16_gflops_all = loop_gflops(k.bf16_dot, k.bf16_flops_per_iter, p.threads);
  p.bf16_kind = k.bf16_kind;
  if (k.amx_bf16) {
    p.amx = true;
    p.amx_gflops_1t = loop_gflops(k.amx_bf16, k.amx_flops_per_iter, 1);
    p.amx_gflops_all = loop_gflops(k.amx_bf16, k.amx_flops_per_iter, p.threads);
  }
  if (const simd::GemmKernels* g = cpu::gemm_kernels_at(level)) {
    p.gemm_l1_gflops_1t = gemm_l1_gflops(*g, 1);
    p.gemm_l1_gflops_all = gemm_l1_gflops(*g, p.threads);
  }
  const ProbeBuffer buf(kProbeFloats, p.threads);
  p.dram_gbps_1t = dram_gbps(k.read_sum, buf, 1);
  p.dram_gbps_all = dram_gbps(k.read_sum, buf, p.threads);
  p.paged_gbps_1t = paged_gbps(k.read_sum, buf, 1);
  p.paged_gbps_all = paged_gbps(k.read_sum, buf, p.threads);
  return p;
}

}  // namespace

std::vector<std::size_t> page_order(std::size_t pages, bool shuffled) {
  std::vector<std::size_t> order(pages);
  for (std::size_t i = 0; i < pages; ++i) order[i] = i;
  if (shuffled) std::shuffle(order.begin(), order.end(), std::mt19937_64(4));
  return order;
}

float page_walk_sum(float (*read_sum)(const float*, std::size_t), const float* base, const std::size_t* order,
                    std::size_t first, std::size_t last, std::size_t page_floats, bool prefetch_next) {
  constexpr std::size_t kChunk = 256;  // floats: 1 KiB, 16 lines
  float sum = 0;
  for (std::size_t i = first; i < last; ++i) {
    const float* page = base + order[i] * page_floats;
    const char* next = prefetch_next && i + 1 < last ? reinterpret_cast<const char*>(base + order[i + 1] * page_floats) : nullptr;
    for (std::size_t c = 0; c < page_floats; c += kChunk) {
      if (next)
        for (std::size_t line = 0; line < kChunk * sizeof(float); line += 64)
          __builtin_prefetch(next + c * sizeof(float) + line, 0, 2);
      sum += read_sum(page + c, kChunk);
    }
  }
  return sum;
}

const PeakFigures& peak(Isa level) {
  static std::mutex mu;
  static std::map<int, PeakFigures> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(static_cast<int>(level));
  if (it == cache.end()) it = cache.emplace(static_cast<int>(level), measure(level)).first;
  return it->second;
}

const PeakFigures& peak() { return peak(active_isa()); }

double relevant_gflops(const PeakFigures& p, Isa level, bool all_threads) {
  // The amx level's best bf16 rate is the tiles', also for its families that still run on
  // vdpbf16ps (gemm): their share of it says how far they are from what the machine does.
  if (level >= Isa::amx && p.amx) return all_threads ? p.amx_gflops_all : p.amx_gflops_1t;
  const bool bf16_dot = level >= Isa::avx512bf16 && p.bf16_kind == "vdpbf16ps";
  if (bf16_dot) return all_threads ? p.bf16_gflops_all : p.bf16_gflops_1t;
  return all_threads ? p.f32_gflops_all : p.f32_gflops_1t;
}

std::string describe(const PeakFigures& p) {
  char amx[128] = "n/a";
  if (p.amx) std::snprintf(amx, sizeof amx, "%.1f / %.1f GFLOP/s", p.amx_gflops_1t, p.amx_gflops_all);
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "peak[%s]: f32 FMA %.1f GFLOP/s (1 thread) %.1f GFLOP/s (%d threads); bf16 dot (%s) %.1f / %.1f "
                "GFLOP/s; AMX bf16 tiles (tdpbf16ps) %s; panel GEMM in L1 (wall time) %.1f / %.1f GFLOP/s; DRAM "
                "read %.1f GB/s (1 thread) %.1f GB/s (%d threads); shuffled 16 KiB pages %.1f / %.1f GB/s",
                p.level.c_str(), p.f32_gflops_1t, p.f32_gflops_all, p.threads, p.bf16_kind.c_str(), p.bf16_gflops_1t,
                p.bf16_gflops_all, amx, p.gemm_l1_gflops_1t, p.gemm_l1_gflops_all, p.dram_gbps_1t, p.dram_gbps_all,
                p.threads, p.paged_gbps_1t, p.paged_gbps_all);
  return buf;
}

}  // namespace mlakit::bench
