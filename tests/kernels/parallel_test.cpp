// Scheduling helpers: fixed tiles independent of the thread count, thread control, workspace budget,
// per-thread scratch and call buffers.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "cpu/common/parallel.hpp"
#include "kernels/kernel_list.hpp"

namespace mlakit::kernel_tests {
namespace {

class ThreadsGuard {
 public:
  explicit ThreadsGuard(int n) { cpu::set_num_threads(n); }
  ~ThreadsGuard() { cpu::set_num_threads(0); }
};

TEST(Parallel, EveryIndexExactlyOnceInFixedTiles) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadsGuard g(threads);
    for (std::size_t n : {0, 1, 5, 64, 65, 1000}) {
      for (std::size_t tile : {0, 1, 3, 64, 2000}) {
        std::vector<std::atomic<int>> hits(n);
        std::vector<std::atomic<std::size_t>> tile_begin(n);
        cpu::parallel_for_tiles(n, tile, [&](std::size_t b, std::size_t e) {
          ASSERT_LT(b, e);
          if (tile) {
            ASSERT_EQ(b % tile, 0u);
            ASSERT_TRUE(e - b == tile || e == n);
          }
          for (std::size_t i = b; i < e; ++i) {
            hits[i]++;
            tile_begin[i] = b;
          }
        });
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << "/" << tile << " i=" << i;
      }
    }
  }
}

TEST(Parallel, TwoDimensionalTilesCoverTheGrid) {
  ThreadsGuard g(3);
  const std::size_t n0 = 37, n1 = 23;
  std::vector<std::atomic<int>> hits(n0 * n1);
  cpu::parallel_for_tiles_2d(n0, 8, n1, 5, [&](std::size_t i0, std::size_t i1, std::size_t j0, std::size_t j1) {
    ASSERT_EQ(i0 % 8, 0u);
    ASSERT_EQ(j0 % 5, 0u);
    for (std::size_t i = i0; i < i1; ++i)
      for (std::size_t j = j0; j < j1; ++j) hits[i * n1 + j]++;
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

// A float reduction done per tile: the same bits for any number of threads.
TEST(Parallel, ResultsAreBitwiseIndependentOfThreadCount) {
  const std::size_t n = 100000, tile = 1000;
  std::vector<float> x(n);
  Rng rng(3);
  for (auto& v : x) v = rng.uniform(-1.0f, 1.0f);
  auto run = [&](int threads) {
    ThreadsGuard g(threads);
    std::vector<float> partial(cpu::num_tiles(n, tile));
    cpu::parallel_for_tiles(n, tile, [&](std::size_t b, std::size_t e) {
      float s = 0;
      for (std::size_t i = b; i < e; ++i) s += x[i] * x[i];
      partial[b / tile] = s;
    });
    float total = 0;
    for (float p : partial) total += p;
    return bits_of(total);
  };
  const std::uint32_t one = run(1);
  for (int t : {2, 3, 4, 16}) EXPECT_EQ(run(t), one) << t << " threads";
}

TEST(Parallel, ThreadCountControl) {
  EXPECT_GE(cpu::hardware_threads(), 1);
  {
    ThreadsGuard g(3);
    EXPECT_EQ(cpu::num_threads(), 3);
    std::atomic<int> max_slot{0};
    cpu::parallel_for_each(64, [&](std::size_t) {
      const int s = cpu::thread_slot();
      int cur = max_slot.load();
      while (s > cur && !max_slot.compare_exchange_weak(cur, s)) {
      }
    });
    EXPECT_LT(max_slot.load(), 3);
  }
  cpu::set_num_threads(0);
  EXPECT_GE(cpu::num_threads(), 1);
}

TEST(Parallel, WorkspaceBudget) {
  cpu::set_workspace_budget_bytes(0);
  if (!std::getenv("MLAKIT_WORKSPACE_MB")) {
    EXPECT_EQ(cpu::workspace_budget_bytes(), std::size_t{256} << 20);
  }
  cpu::set_workspace_budget_bytes(1000);
  EXPECT_EQ(cpu::workspace_budget_bytes(), 1000u);
  EXPECT_EQ(cpu::items_within_budget(100, 50), 10u);
  EXPECT_EQ(cpu::items_within_budget(100, 5), 5u);
  EXPECT_EQ(cpu::items_within_budget(5000, 50), 1u);     // at least one item
  EXPECT_EQ(cpu::items_within_budget(5000, 50, 4), 4u);  // at least min_items
  cpu::set_workspace_budget_bytes(0);
}

TEST(Parallel, ThreadScratchIsAlignedAndReused) {
  void* a = cpu::thread_scratch(100, 0);
  void* b = cpu::thread_scratch(50, 0);
  void* c = cpu::thread_scratch(100, 1);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 64, 0u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

// Call buffers: aligned, one per slot, reused while big enough (a call's second use of a slot sees
// the first's contents), each thread its own, and usable again after release.
TEST(Parallel, CallBuffersAreAlignedPerSlotReusedAndPerThread) {
  auto* a = cpu::call_buffer_of<std::uint32_t>(1000, 0);
  auto* c = cpu::call_buffer_of<std::uint32_t>(1000, 7);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c) % 64, 0u);
  EXPECT_NE(a, c);
  for (std::uint32_t i = 0; i < 1000; ++i) a[i] = i * 2654435761u;
  auto* b = cpu::call_buffer_of<std::uint32_t>(500, 0);
  EXPECT_EQ(a, b);
  for (std::uint32_t i = 0; i < 500; ++i) ASSERT_EQ(b[i], i * 2654435761u);
  // Growing gives memory of the new size (written end to end here).
  auto* big = cpu::call_buffer_of<std::uint32_t>(1 << 20, 0);
  for (std::uint32_t i = 0; i < (1u << 20); ++i) big[i] = i;
  EXPECT_EQ(big[(1 << 20) - 1], (1u << 20) - 1);
  // Another thread has its own.
  std::uint32_t* other = nullptr;
  std::thread([&] {
    other = cpu::call_buffer_of<std::uint32_t>(1000, 0);
    other[0] = 7;
  }).join();
  EXPECT_NE(other, big);
  EXPECT_EQ(big[0], 0u);
  cpu::release_call_buffers();
  auto* again = cpu::call_buffer_of<std::uint32_t>(10, 0);
  ASSERT_NE(again, nullptr);
  again[9] = 1;
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(again) % 64, 0u);
  cpu::release_call_buffers();
}

}  // namespace
}  // namespace mlakit::kernel_tests
