// Owned host tensors and bundles of named tensors: one operator call's inputs, parameters and
// outputs. Used by the tests, the benchmarks, the golden files and the mlakit command.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "goldens/common/engine_allocator.hpp"

#include "mlakit/paged_kv_cache.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit::goldens {

using json = nlohmann::json;

class Tensor {
 public:
  static constexpr std::size_t kGuardBytes = 64;
  static constexpr std::uint8_t kGuardByte = 0xCD;

  Tensor() = default;
  // Zero-filled, guard bytes after the data. Throws InputError for a negative dimension, a size
  // that overflows, or more bytes than max_tensor_bytes(): shapes may come from a file.
  Tensor(DType dtype, std::vector<std::int64_t> shape);
  // A view of memory someone else owns (a Python array, an engine's cache): view() returns it as
  // given, strides and memory space included; the tensor never copies, fills or frees it. bytes()
  // and data() point at it (host memory only is meant to be read through them).
  static Tensor borrow(const TensorView& v);
  bool borrowed() const { return borrowed_; }

  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t numel() const { return numel_; }  // kept: fill and compare loops ask per element
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }

  std::uint8_t* bytes() { return borrowed_ ? static_cast<std::uint8_t*>(view_.data) : storage_.data(); }
  const std::uint8_t* bytes() const { return borrowed_ ? static_cast<const std::uint8_t*>(view_.data) : storage_.data(); }
  template <class T> T* data() { return reinterpret_cast<T*>(bytes()); }
  template <class T> const T* data() const { return reinterpret_cast<const T*>(bytes()); }

  // Contiguous host view (writable: the storage is ours). Inside a DeviceStaging scope
  // (device_staging.hpp) it is a view of the tensor's device mirror instead.
  TensorView view() const;

  // Fills the data with a pattern no operator writes by accident: NaN with payload 0x5A5
  // for floats, 0xA5A5A5A5 for integers, 0xA5 bytes otherwise.
  void poison();
  bool guard_intact() const;
  bool same_bytes(const Tensor& other) const;  // dtype, shape and data bytes

  // Element i converted to double (exact for every supported dtype).
  double value(std::int64_t i) const;

 private:
  DType dtype_ = DType::u8;
  std::vector<std::int64_t> shape_;
  std::int64_t numel_ = 1;
  std::vector<std::uint8_t, EngineAllocator<std::uint8_t>> storage_;
  bool borrowed_ = false;
  TensorView view_;  // the borrowed view
};

// "[2, 3]": a shape in messages.
std::string shape_text(const std::vector<std::int64_t>& shape);

// The most bytes one golden-driver tensor may take (MLAKIT_MAX_TENSOR_MB, default 8192 MiB): a file or a
// knob that asks for more gets a clear refusal instead of an out-of-memory kill.
std::int64_t max_tensor_bytes();
// dtype_size(dtype)·Π shape, or an InputError naming `what` (negative, overflowing, over the limit).
std::int64_t checked_nbytes(DType dtype, const std::vector<std::int64_t>& shape, const std::string& what);

struct Bundle {
  std::string op;
  json params = json::object();     // every scalar parameter of the call
  json tolerance = json::object();  // per output, as written to golden files
  std::map<std::string, std::string> metadata;  // case, seed, producer
  std::map<std::string, Tensor> tensors;

  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  Tensor& at(const std::string& name);
  const Tensor& at(const std::string& name) const;
  // Replaces; refuses (InputError naming the tensor) what the Tensor constructor refuses.
  Tensor& add(const std::string& name, DType dtype, std::vector<std::int64_t> shape);
  // For arguments updated in place: copies `name` to "out." + name and returns the copy.
  Tensor& copy_to_output(const std::string& name);
  void remove_outputs();  // drops every "out.*" tensor
  std::vector<std::string> output_names() const;
};

// View of a paged cache stored as <prefix>.blocks / .scales / .lookup_table / .cache_lengths.
// `blocks_name` overrides where the blocks come from (e.g. "out.kv_cache.blocks" for in-place ops).
PagedKVCacheView cache_view(const Bundle& b, const std::string& prefix, std::int64_t quant_granularity = 0,
                            const std::string& blocks_name = "");

// View of an optional tensor: absent if the bundle lacks it.
TensorView optional_view(const Bundle& b, const std::string& name);

}  // namespace mlakit::goldens
