// Scheduling helpers of the cpu back-end (TBB).
//
// Determinism: work is cut into fixed tiles whose boundaries depend only on the problem size and
// the tile size, never on the number of threads; each tile is computed by one thread start to
// end, and tiles never combine their results through floating-point reductions in a
// schedule-dependent order. So outputs are bitwise identical for 1, 2 or N threads.
//
// Threads: the back-end runs its loops in its own task arena of num_threads() threads: the value
// of set_num_threads() if given, else MLAKIT_NUM_THREADS, else every hardware thread. Other TBB
// users in the process are not affected. A planned run may name another arena (the caller's, or
// one of the plan's own size) for the calling thread: see ExecutionScope.
//
// Workspace: operators size their temporary score buffers to at most workspace_budget_bytes()
// (default 256 MiB, MLAKIT_WORKSPACE_MB, set_workspace_budget_bytes()) and chunk the work to fit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include <tbb/task_arena.h>

namespace mlakit::cpu {

// ---- threads ------------------------------------------------------------------------------------
int num_threads();
// n >= 1 sets the count; n <= 0 returns to the default (environment, then hardware).
void set_num_threads(int n);
int hardware_threads();

// ---- deterministic parallel loops -----------------------------------------------------------------
namespace detail {
// Type-erased body: calls fn(ctx, tile_index).
using TileBody = void (*)(void* ctx, std::size_t tile);
void run_tiles(std::size_t num_tiles, TileBody body, void* ctx);
}  // namespace detail

inline std::size_t num_tiles(std::size_t n, std::size_t tile) { return tile == 0 ? 0 : (n + tile - 1) / tile; }
// n rounded up to a multiple of `to` (> 0): row strides of scratch buffers.
inline std::size_t round_up(std::size_t n, std::size_t to) { return num_tiles(n, to) * to; }

// body(begin, end) for the tiles [t*tile, min(n, (t+1)*tile)), t = 0 .. num_tiles-1, in parallel.
template <class Body>
void parallel_for_tiles(std::size_t n, std::size_t tile, Body&& body) {
  if (n == 0) return;
  if (tile == 0) tile = n;
  struct Ctx {
    Body* body;
    std::size_t n, tile;
  } ctx{&body, n, tile};
  detail::run_tiles(
      num_tiles(n, tile),
      [](void* c, std::size_t t) {
        auto* x = static_cast<Ctx*>(c);
        const std::size_t b = t * x->tile;
        const std::size_t e = b + x->tile < x->n ? b + x->tile : x->n;
        (*x->body)(b, e);
      },
      &ctx);
}

// body(i0, i1, j0, j1) over the fixed tile grid of an n0 x n1 index space.
template <class Body>
void parallel_for_tiles_2d(std::size_t n0, std::size_t tile0, std::size_t n1, std::size_t tile1, Body&& body) {
  if (n0 == 0 || n1 == 0) return;
  if (tile0 == 0) tile0 = n0;
  if (tile1 == 0) tile1 = n1;
  const std::size_t t1 = num_tiles(n1, tile1);
  struct Ctx {
    Body* body;
    std::size_t n0, tile0, n1, tile1, t1;
  } ctx{&body, n0, tile0, n1, tile1, t1};
  detail::run_tiles(
      num_tiles(n0, tile0) * t1,
      [](void* c, std::size_t t) {
        auto* x = static_cast<Ctx*>(c);
        const std::size_t a = t / x->t1, b = t % x->t1;
        const std::size_t i0 = a * x->tile0, j0 = b * x->tile1;
        const std::size_t i1 = i0 + x->tile0 < x->n0 ? i0 + x->tile0 : x->n0;
        const std::size_t j1 = j0 + x->tile1 < x->n1 ? j0 + x->tile1 : x->n1;
        (*x->body)(i0, i1, j0, j1);
      },
      &ctx);
}

// body(item) for each index in [0, n): one tile per item (ragged work such as one query row or
// one (sequence, head) pair per item).
template <class Body>
void parallel_for_each(std::size_t n, Body&& body) {
  parallel_for_tiles(n, 1, [&](std::size_t b, std::size_t) { body(b); });
}

// body() on up to num_threads() threads at once, each call on its own: for work that the threads
// claim themselves from a shared counter in a fixed order (each item still computed by one thread
// start to end, so the bits do not depend on who runs it). With one thread, body() runs once and
// must do everything; a body may wait only for items another thread has already claimed.
template <class Body>
void parallel_workers(Body&& body) {
  struct Ctx {
    Body* body;
  } ctx{&body};
  detail::run_tiles(static_cast<std::size_t>(num_threads()), [](void* c, std::size_t) { (*static_cast<Ctx*>(c)->body)(); },
                    &ctx);
}

// Which of the arena's threads runs the caller, in [0, num_threads()): an index for per-thread
// scratch. Outside a parallel loop it is 0.
int thread_slot();

// ---- workspace budget -----------------------------------------------------------------------------
std::size_t workspace_budget_bytes();
// bytes == 0 returns to the default (MLAKIT_WORKSPACE_MB, else 256 MiB).
void set_workspace_budget_bytes(std::size_t bytes);

// How many items of `bytes_per_item` fit the budget, at least `min_items` and at most `total`.
std::size_t items_within_budget(std::size_t bytes_per_item, std::size_t total, std::size_t min_items = 1);

// Per-thread scratch memory, 64-byte aligned, reused across calls: valid until the next call with
// the same slot on the same thread. Slots 0..7 let one kernel hold a few buffers at once.
void* thread_scratch(std::size_t bytes, int slot = 0);

// ---- buffers of an operator call ----------------------------------------------------------------
// Memory for the buffers that one operator call shares among its tasks (keys, values, laid-out
// weights, score chunks), kept by the calling thread and reused by its next calls: fresh memory
// for every call costs a page fault and the kernel's zeroing per 4 KiB (17 % of an MLA prefill
// call with 128 heads). Tasks reach it only through the pointers their call hands them, never
// through this function, so concurrent calls from several threads each have their own, and a task
// of another call that runs on this thread while it waits never touches it. 64-byte aligned,
// contents undefined when the slot grows; slots 0..7. The memory stays with the thread until it
// exits or calls release_call_buffers().
void* call_buffer(std::size_t bytes, int slot);
template <class T>
T* call_buffer_of(std::size_t count, int slot) {
  return static_cast<T*>(call_buffer(count * sizeof(T), slot));
}
void release_call_buffers();

// ---- a planned run's arena and workspace ----------------------------------------------------------
inline constexpr int kCallBufferSlots = 8;
// Bytes per call-buffer slot that a call needs at most (a plan computes them from the call's
// metadata). The caller's workspace holds the slots one after another, each 64-byte aligned.
struct CallBufferSizes {
  std::array<std::size_t, kCallBufferSlots> bytes{};
  std::size_t total() const;  // the workspace bytes that hold them all
  void grow(int slot, std::size_t b) {
    if (b > bytes[static_cast<std::size_t>(slot)]) bytes[static_cast<std::size_t>(slot)] = b;
  }
};

// For the calling thread, until destroyed: parallel loops run in `arena` (when not null) and
// call_buffer() hands out the caller's `workspace` (when not null; laid out as `sizes`). A request
// larger than its slot's share (a sizing that missed it) falls back to the thread's own buffers
// and is counted by workspace_fallbacks(): never unsafe, and a test catches it.
class ExecutionScope {
 public:
  ExecutionScope(tbb::task_arena* arena, void* workspace, const CallBufferSizes* sizes);
  ~ExecutionScope();
  ExecutionScope(const ExecutionScope&) = delete;
  ExecutionScope& operator=(const ExecutionScope&) = delete;

 private:
  tbb::task_arena* saved_arena_;
  void* saved_workspace_;
  const CallBufferSizes* saved_sizes_;
};
long workspace_fallbacks();

}  // namespace mlakit::cpu
