// An allocator whose storage starts on a cache line (64 bytes), as a serving engine's buffers do
// (its allocator, or the pages of its KV cache): a 128-byte cache row then spans two lines, not
// three. std::vector's default storage is only 16-byte aligned. Used by the harness tensors and the
// benchmarks; unaligned pointers are the kernel tests' business.
#pragma once

#include <cstddef>
#include <new>

namespace mlakit::harness {

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, kAlign); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const { return true; }
};

}  // namespace mlakit::harness
