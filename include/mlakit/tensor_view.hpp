// Non-owning views of the caller's buffers: dtype, shape, strides (in elements)
// and where the memory lives. Operators read and write through them with no copies.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "mlakit/dtype.hpp"

namespace mlakit {

enum class MemorySpace : std::uint8_t { host, device };

inline constexpr int kMaxRank = 6;

struct TensorView {
  void* data = nullptr;  // inputs are only read; the view is not const so outputs can share the type
  DType dtype = DType::f32;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};  // elements, not bytes
  MemorySpace memory = MemorySpace::host;

  // A row-major contiguous view; `data` may be an input (it is never written through then).
  static TensorView contiguous(const void* data, DType dtype, std::initializer_list<std::int64_t> dims,
                               MemorySpace memory = MemorySpace::host) {
    TensorView v;
    v.data = const_cast<void*>(data);
    v.dtype = dtype;
    v.memory = memory;
    v.rank = 0;
    for (std::int64_t d : dims) {
      if (v.rank < kMaxRank) v.shape[v.rank] = d;
      ++v.rank;
    }
    std::int64_t s = 1;
    for (int i = (v.rank < kMaxRank ? v.rank : kMaxRank) - 1; i >= 0; --i) {
      v.strides[i] = s;
      s *= v.shape[i];
    }
    return v;
  }

  bool present() const { return data != nullptr; }

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank && i < kMaxRank; ++i) n *= shape[i];
    return n;
  }

  bool is_contiguous() const {
    std::int64_t s = 1;
    for (int i = rank - 1; i >= 0; --i) {
      if (shape[i] != 1 && strides[i] != s) return false;
      s *= shape[i];
    }
    return true;
  }

  std::int64_t size_bytes() const { return numel() * std::int64_t(dtype_size(dtype)); }

  // Elements from the first to one past the last the view reaches (non-negative strides): numel()
  // for a contiguous view, more for a padded one; 0 when a dimension is empty.
  std::int64_t span_elements() const {
    std::int64_t last = 0;
    for (int i = 0; i < rank && i < kMaxRank; ++i) {
      if (shape[i] == 0) return 0;
      last += (shape[i] - 1) * strides[i];
    }
    return last + 1;
  }
  std::int64_t span_bytes() const { return span_elements() * std::int64_t(dtype_size(dtype)); }

  template <class T>
  T* as() const { return static_cast<T*>(data); }
};

}  // namespace mlakit
