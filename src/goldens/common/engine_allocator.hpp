// An allocator that places buffers as a serving engine does.
//  - Every buffer starts on a cache line (64 bytes): a 128-byte cache row then spans two lines, not
//    three (std::vector's default storage is only 16-byte aligned).
//  - Buffers of 4 MiB and more start on a 2 MiB boundary and are advised onto transparent huge
//    pages, as PyTorch's CPU allocator does under THP_MEM_ALLOC_ENABLE and as engines place their KV
//    cache. A decode worker reads the cache in a shuffled page order far past the TLB's reach: on
//    4 KiB pages every 16 KiB cache page costs page walks: 15-18 % of the kernel's sweep of
//    shuffled pages, 10-15 % of op 2 decode on Zen 5 (bench/RESULTS.md). MLAKIT_HUGE_PAGES=0 keeps
//    4 KiB pages, to measure that.
// Used by the golden drivers' tensors and the benchmarks; unaligned pointers are the kernel tests' business.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace mlakit::goldens {

inline bool huge_pages_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("MLAKIT_HUGE_PAGES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return wanted;
}

template <class T>
struct EngineAllocator {
  using value_type = T;
  static constexpr std::size_t kLine = 64;
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;
  static constexpr std::size_t kHugeFrom = 2 * kHugePage;

  EngineAllocator() = default;
  template <class U>
  EngineAllocator(const EngineAllocator<U>&) {}

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (!on_huge_pages(bytes)) return static_cast<T*>(::operator new(bytes, std::align_val_t{kLine}));
    const std::size_t whole = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = ::operator new(whole, std::align_val_t{kHugePage});
#if defined(__linux__)
    ::madvise(p, whole, MADV_HUGEPAGE);  // advice only: 4 KiB pages if the kernel declines
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) {
    ::operator delete(p, std::align_val_t{on_huge_pages(n * sizeof(T)) ? kHugePage : kLine});
  }
  template <class U>
  bool operator==(const EngineAllocator<U>&) const { return true; }

 private:
  static bool on_huge_pages(std::size_t bytes) { return bytes >= kHugeFrom && huge_pages_wanted(); }
};

}  // namespace mlakit::goldens
