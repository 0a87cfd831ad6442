#include "goldens/common/cache_layout.hpp"

#include <array>
#include <cstring>

#include "mlakit/dtype.hpp"

namespace mlakit::goldens {
namespace {

thread_local CacheRelayout* t_current = nullptr;

// Element strides of a 6-d cache of `shape` stored with its dimensions in `order` (outermost
// first), `pad` unused elements after each step of the outermost dimension and `row_pad` after
// each row (the innermost dimension).
std::array<std::int64_t, 6> strides_of(const std::array<std::int64_t, 6>& shape, const std::array<int, 6>& order,
                                       std::int64_t pad, std::int64_t row_pad) {
  std::array<std::int64_t, 6> st{};
  std::int64_t s = 1;
  for (int k = 5; k >= 0; --k) {
    st[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])] = s;
    s *= shape[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])];
    if (k == 5) s += row_pad;
    if (k == 1) s += pad;
  }
  return st;
}

// Calls f(contiguous element offset, offset in the view) for every element, row by row.
template <class F>
void each_row(const TensorView& v, F&& f) {
  const std::int64_t row = v.shape[5];
  std::int64_t c = 0;
  for (std::int64_t i0 = 0; i0 < v.shape[0]; ++i0)
    for (std::int64_t i1 = 0; i1 < v.shape[1]; ++i1)
      for (std::int64_t i2 = 0; i2 < v.shape[2]; ++i2)
        for (std::int64_t i3 = 0; i3 < v.shape[3]; ++i3)
          for (std::int64_t i4 = 0; i4 < v.shape[4]; ++i4, c += row)
            f(c, i0 * v.strides[0] + i1 * v.strides[1] + i2 * v.strides[2] + i3 * v.strides[3] + i4 * v.strides[4]);
}

}  // namespace

const char* cache_layout_name(CacheLayout l) {
  switch (l) {
    case CacheLayout::contiguous: return "contiguous";
    case CacheLayout::padded_blocks: return "padded_blocks";
    case CacheLayout::kv_interleaved: return "kv_interleaved";
    case CacheLayout::layers_outer: return "layers_outer";
    case CacheLayout::padded_rows: return "padded_rows";
  }
  return "?";
}

CacheRelayout* current_relayout() { return t_current; }

CacheRelayout::CacheRelayout(CacheLayout layout) : layout_(layout), previous_(t_current) {
  t_current = this;
}

CacheRelayout::~CacheRelayout() {
  if (active_) t_current = previous_;
}

TensorView CacheRelayout::relaid(const std::string& name, const TensorView& contiguous) {
  if (layout_ == CacheLayout::contiguous || contiguous.rank != 6 || contiguous.data == nullptr) return contiguous;
  auto it = storage_.find(name);
  if (it != storage_.end()) return it->second.view;
  std::array<std::int64_t, 6> shape{};
  for (std::size_t i = 0; i < 6; ++i) shape[i] = contiguous.shape[i];
  std::array<int, 6> order = {0, 1, 2, 3, 4, 5};
  std::int64_t pad = 0, row_pad = 0;
  if (layout_ == CacheLayout::padded_blocks) pad = 64;
  if (layout_ == CacheLayout::padded_rows) row_pad = 3;
  if (layout_ == CacheLayout::kv_interleaved) order = {0, 2, 1, 3, 4, 5};
  if (layout_ == CacheLayout::layers_outer) order = {2, 0, 1, 3, 4, 5};
  const std::array<std::int64_t, 6> st = strides_of(shape, order, pad, row_pad);
  Storage s;
  s.contiguous = contiguous;
  s.view = contiguous;
  for (std::size_t i = 0; i < 6; ++i) s.view.strides[i] = st[i];
  const std::size_t elem = dtype_size(contiguous.dtype);
  const std::size_t bytes = static_cast<std::size_t>(s.view.span_elements()) * elem;
  s.memory = std::make_unique<std::byte[]>(bytes + 64);
  std::memset(s.memory.get(), 0xA5, bytes + 64);  // the padding holds a pattern no reader may use
  auto* base = s.memory.get() + (64 - reinterpret_cast<std::uintptr_t>(s.memory.get()) % 64) % 64;
  s.view.data = base;
  const std::size_t row = static_cast<std::size_t>(shape[5]) * elem;
  const auto* src = static_cast<const std::byte*>(contiguous.data);
  each_row(s.view, [&](std::int64_t c, std::int64_t v) {
    std::memcpy(base + static_cast<std::size_t>(v) * elem, src + static_cast<std::size_t>(c) * elem, row);
  });
  return storage_.emplace(name, std::move(s)).first->second.view;
}

void CacheRelayout::finish() {
  if (!active_) return;
  for (auto& [name, s] : storage_) {
    if (name.rfind("out.", 0) != 0) continue;
    // Into the memory the contiguous view came from: the bundle's tensor, or its device mirror
    // inside a DeviceStaging scope (the cuda emulation, where device memory is host-addressable).
    auto* dst = static_cast<std::byte*>(s.contiguous.data);
    const std::size_t elem = dtype_size(s.view.dtype);
    const std::size_t row = static_cast<std::size_t>(s.view.shape[5]) * elem;
    const auto* base = static_cast<const std::byte*>(s.view.data);
    each_row(s.view, [&](std::int64_t c, std::int64_t v) {
      std::memcpy(dst + static_cast<std::size_t>(c) * elem, base + static_cast<std::size_t>(v) * elem, row);
    });
  }
  t_current = previous_;
  active_ = false;
}

}  // namespace mlakit::goldens
