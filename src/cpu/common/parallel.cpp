#include "cpu/common/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

namespace mlakit::cpu {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x <= 0 || x > (1L << 20)) return fallback;  // ignore garbage
  return static_cast<int>(x);
}

int default_threads() { return env_int("MLAKIT_NUM_THREADS", hardware_threads()); }

struct ArenaState {
  std::mutex mu;
  int threads = 0;  // 0: not created yet
  std::shared_ptr<tbb::task_arena> arena;
};

ArenaState& arena_state() {
  static ArenaState s;
  return s;
}

std::atomic<int> g_requested{0};  // set_num_threads value; 0 = default

std::shared_ptr<tbb::task_arena> current_arena() {
  ArenaState& s = arena_state();
  const int want = g_requested.load() > 0 ? g_requested.load() : default_threads();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.arena || s.threads != want) {
    s.arena = std::make_shared<tbb::task_arena>(want);
    s.threads = want;
  }
  return s.arena;
}

std::atomic<std::size_t> g_budget{0};  // 0 = default

std::size_t default_budget() {
  const int mb = env_int("MLAKIT_WORKSPACE_MB", 256);
  return static_cast<std::size_t>(mb) << 20;
}

// N slots of 64-byte aligned memory, each grown to whole 4 KiB pages (at least one, so never null)
// when a request outgrows it; its contents are then undefined.
template <int N>
struct ThreadBuffers {
  void* p[N] = {};
  std::size_t size[N] = {};
  void* get(std::size_t bytes, int slot) {
    if (slot < 0 || slot >= N) slot = 0;
    if (!p[slot] || size[slot] < bytes) {
      if (p[slot]) ::operator delete(p[slot], std::align_val_t(64));
      size[slot] = std::max<std::size_t>(4096, (bytes + 4095) / 4096 * 4096);
      p[slot] = ::operator new(size[slot], std::align_val_t(64));
    }
    return p[slot];
  }
  void release() {
    for (int i = 0; i < N; ++i) {
      if (p[i]) ::operator delete(p[i], std::align_val_t(64));
      p[i] = nullptr;
      size[i] = 0;
    }
  }
  ~ThreadBuffers() { release(); }
};
using ThreadScratch = ThreadBuffers<8>;
using CallBuffers = ThreadBuffers<8>;

CallBuffers& call_buffers() {
  thread_local CallBuffers b;
  return b;
}

// The calling thread's planned-run settings (ExecutionScope).
thread_local tbb::task_arena* t_arena = nullptr;
thread_local void* t_workspace = nullptr;
thread_local const CallBufferSizes* t_sizes = nullptr;
std::atomic<long> g_workspace_fallbacks{0};

std::size_t align64(std::size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

int hardware_threads() {
  // Asked once: the C library reads /sys for it, ~10 us a call, and every parallel loop asks.
  static const int n = [] {
    const unsigned h = std::thread::hardware_concurrency();
    return h ? static_cast<int>(h) : 1;
  }();
  return n;
}

int num_threads() {
  if (t_arena != nullptr) return t_arena->max_concurrency();
  const int r = g_requested.load();
  return r > 0 ? r : default_threads();
}

void set_num_threads(int n) { g_requested.store(n > 0 ? n : 0); }

namespace detail {
void run_tiles(std::size_t tiles, TileBody body, void* ctx) {
  if (tiles == 0) return;
  if (tiles == 1 || num_threads() == 1) {
    for (std::size_t t = 0; t < tiles; ++t) body(ctx, t);
    return;
  }
  std::shared_ptr<tbb::task_arena> own;
  tbb::task_arena* arena = t_arena;
  if (arena == nullptr) {
    own = current_arena();
    arena = own.get();
  }
  arena->execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, tiles, 1),
        [&](const tbb::blocked_range<std::size_t>& r) {
          for (std::size_t t = r.begin(); t != r.end(); ++t) body(ctx, t);
        },
        tbb::simple_partitioner());
  });
}
}  // namespace detail

int thread_slot() {
  const int s = tbb::this_task_arena::current_thread_index();
  return s == tbb::task_arena::not_initialized ? 0 : s;
}

std::size_t workspace_budget_bytes() {
  const std::size_t b = g_budget.load();
  return b ? b : default_budget();
}

void set_workspace_budget_bytes(std::size_t bytes) { g_budget.store(bytes); }

std::size_t items_within_budget(std::size_t bytes_per_item, std::size_t total, std::size_t min_items) {
  std::size_t n = bytes_per_item ? workspace_budget_bytes() / bytes_per_item : total;
  if (n < min_items) n = min_items;
  if (n > total) n = total;
  return n;
}

void* call_buffer(std::size_t bytes, int slot) {
  if (t_workspace != nullptr && slot >= 0 && slot < kCallBufferSlots) {
    if (bytes <= t_sizes->bytes[static_cast<std::size_t>(slot)]) {
      std::size_t at = 0;
      for (int i = 0; i < slot; ++i) at += align64(t_sizes->bytes[static_cast<std::size_t>(i)]);
      return static_cast<unsigned char*>(t_workspace) + at;
    }
    g_workspace_fallbacks.fetch_add(1);
  }
  return call_buffers().get(bytes, slot);
}

std::size_t CallBufferSizes::total() const {
  std::size_t n = 0;
  for (std::size_t b : bytes) n += align64(b);
  return n;
}

ExecutionScope::ExecutionScope(tbb::task_arena* arena, void* workspace, const CallBufferSizes* sizes)
    : saved_arena_(t_arena), saved_workspace_(t_workspace), saved_sizes_(t_sizes) {
  if (arena != nullptr) t_arena = arena;
  if (workspace != nullptr && sizes != nullptr) {
    t_workspace = workspace;
    t_sizes = sizes;
  }
}

ExecutionScope::~ExecutionScope() {
  t_arena = saved_arena_;
  t_workspace = saved_workspace_;
  t_sizes = saved_sizes_;
}

long workspace_fallbacks() { return g_workspace_fallbacks.load(); }

void release_call_buffers() { call_buffers().release(); }

void* thread_scratch(std::size_t bytes, int slot) {
  thread_local ThreadScratch ts;
  return ts.get(bytes, slot);
}

}  // namespace mlakit::cpu
