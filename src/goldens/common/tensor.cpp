#include "goldens/common/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "goldens/common/cache_layout.hpp"
#include "goldens/common/device_staging.hpp"
#include "goldens/common/input_error.hpp"

namespace mlakit::goldens {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::int64_t max_tensor_bytes() {
  static const std::int64_t limit = [] {
    constexpr std::int64_t kDefaultMb = 8192;
    const char* env = std::getenv("MLAKIT_MAX_TENSOR_MB");
    if (env == nullptr || *env == '\0') return kDefaultMb << 20;
    char* end = nullptr;
    const long long mb = std::strtoll(env, &end, 10);
    if (*end != '\0' || mb < 1 || mb > (std::numeric_limits<std::int64_t>::max() >> 20)) return kDefaultMb << 20;
    return static_cast<std::int64_t>(mb) << 20;
  }();
  return limit;
}

std::int64_t checked_nbytes(DType dtype, const std::vector<std::int64_t>& shape, const std::string& what) {
  const std::int64_t limit = max_tensor_bytes();
  std::int64_t n = static_cast<std::int64_t>(dtype_size(dtype));
  bool over = false;
  for (std::int64_t d : shape) {
    if (d < 0) throw InputError(what + ": shape " + shape_text(shape) + " has a negative dimension");
    if (d != 0 && n > limit / d) over = true;  // keeps going: a later 0 or negative still decides
    else n *= d;
  }
  for (std::int64_t d : shape)
    if (d == 0) return 0;
  if (over || n > limit)
    throw InputError(what + ": shape " + shape_text(shape) + " needs more than " + std::to_string(limit >> 20) +
                     " MiB (the limit MLAKIT_MAX_TENSOR_MB sets)");
  return n;
}

Tensor::Tensor(DType dtype, std::vector<std::int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  checked_nbytes(dtype_, shape_, std::string("a ").append(dtype_name(dtype_)).append(" tensor"));
  for (std::int64_t d : shape_) numel_ *= d;
  storage_.assign(nbytes() + kGuardBytes, 0);
  std::memset(storage_.data() + nbytes(), kGuardByte, kGuardBytes);
}

Tensor Tensor::borrow(const TensorView& v) {
  Tensor t;
  t.borrowed_ = true;
  t.view_ = v;
  t.dtype_ = v.dtype;
  t.shape_.assign(v.shape.begin(), v.shape.begin() + (v.rank < kMaxRank ? v.rank : kMaxRank));
  t.numel_ = v.numel();
  return t;
}

TensorView Tensor::view() const {
  if (borrowed_) return view_;
  TensorView v;
  v.data = const_cast<std::uint8_t*>(storage_.data());
  v.dtype = dtype_;
  v.rank = static_cast<int>(shape_.size());
  std::int64_t s = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.shape[i] = shape_[i];
    v.strides[i] = s;
    s *= shape_[i];
  }
  if (DeviceStaging* staging = current_staging()) return staging->stage(*this, v);  // cuda runs
  return v;
}

void Tensor::poison() {
  if (borrowed_) return;  // not ours to fill
  const std::int64_t n = numel();
  switch (dtype_) {
    case DType::f32: for (std::int64_t i = 0; i < n; ++i) data<std::uint32_t>()[i] = 0x7FC005A5u; break;
    case DType::f64: for (std::int64_t i = 0; i < n; ++i) data<std::uint64_t>()[i] = 0x7FF80000000005A5ull; break;
    case DType::bf16: for (std::int64_t i = 0; i < n; ++i) data<std::uint16_t>()[i] = 0x7FA5u; break;
    case DType::f16: for (std::int64_t i = 0; i < n; ++i) data<std::uint16_t>()[i] = 0x7DA5u; break;
    default: std::memset(storage_.data(), 0xA5, nbytes()); break;
  }
}

bool Tensor::guard_intact() const {
  if (borrowed_) return true;  // no guard bytes
  for (std::size_t i = nbytes(); i < storage_.size(); ++i)
    if (storage_[i] != kGuardByte) return false;
  return true;
}

bool Tensor::same_bytes(const Tensor& o) const {
  return dtype_ == o.dtype_ && shape_ == o.shape_ && std::memcmp(bytes(), o.bytes(), nbytes()) == 0;
}

double Tensor::value(std::int64_t i) const {
  switch (dtype_) {
    case DType::f32: return data<float>()[i];
    case DType::f64: return data<double>()[i];
    case DType::bf16: return bf16_to_f32(data<std::uint16_t>()[i]);
    case DType::f16: return f16_to_f32(data<std::uint16_t>()[i]);
    case DType::f8e4m3: return f8e4m3_to_f32(data<std::uint8_t>()[i]);
    case DType::i32: return data<std::int32_t>()[i];
    case DType::u32: return data<std::uint32_t>()[i];
    case DType::u8: return data<std::uint8_t>()[i];
    case DType::e8m0: return e8m0_to_f32(data<std::uint8_t>()[i]);
  }
  return 0;
}

Tensor& Bundle::at(const std::string& name) {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw std::out_of_range("bundle has no tensor '" + name + "'");
  return it->second;
}

const Tensor& Bundle::at(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw std::out_of_range("bundle has no tensor '" + name + "'");
  return it->second;
}

Tensor& Bundle::add(const std::string& name, DType dtype, std::vector<std::int64_t> shape) {
  checked_nbytes(dtype, shape, (op.empty() ? std::string() : op + ": ") + "tensor " + name);
  tensors[name] = Tensor(dtype, std::move(shape));
  return tensors[name];
}

Tensor& Bundle::copy_to_output(const std::string& name) {
  tensors["out." + name] = at(name);
  return tensors["out." + name];
}

void Bundle::remove_outputs() {
  for (auto it = tensors.begin(); it != tensors.end();) {
    if (it->first.rfind("out.", 0) == 0) it = tensors.erase(it); else ++it;
  }
}

std::vector<std::string> Bundle::output_names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors)
    if (name.rfind("out.", 0) == 0) names.push_back(name);
  return names;
}

TensorView optional_view(const Bundle& b, const std::string& name) {
  return b.has(name) ? b.at(name).view() : TensorView{};
}

PagedKVCacheView cache_view(const Bundle& b, const std::string& prefix, std::int64_t quant_granularity,
                            const std::string& blocks_name) {
  PagedKVCacheView c;
  const std::string blocks = blocks_name.empty() ? prefix + ".blocks" : blocks_name;
  c.blocks = optional_view(b, blocks);
  c.scales = optional_view(b, prefix + ".scales");
  c.tail = optional_view(b, prefix + ".tail");
  if (CacheRelayout* r = current_relayout()) {  // tests: the same cache in an engine's layout
    c.blocks = r->relaid(blocks, c.blocks);
    c.scales = r->relaid(prefix + ".scales", c.scales);
    c.tail = r->relaid(prefix + ".tail", c.tail);
  }
  c.lookup_table = optional_view(b, prefix + ".lookup_table");
  c.cache_lengths = optional_view(b, prefix + ".cache_lengths");
  c.quant_granularity = quant_granularity;
  return c;
}

}  // namespace mlakit::goldens
