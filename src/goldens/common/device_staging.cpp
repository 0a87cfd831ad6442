#include "goldens/common/device_staging.hpp"

#include <cstring>
#include <memory>

#include "goldens/common/driver.hpp"
#include "goldens/common/tensor.hpp"

namespace mlakit::goldens {
namespace {

thread_local DeviceStaging* t_current = nullptr;

bool is_output(const std::string& name) { return name.rfind("out.", 0) == 0; }

Status staging_error(const std::string& what, const std::string& error) {
  return Status::error(StatusCode::internal, "device_staging", "", "device staging: " + what + " (" + error + ")");
}

}  // namespace

DeviceStaging* current_staging() { return t_current; }

DeviceStaging::DeviceStaging(Bundle& bundle, const core::DeviceMemoryOps* ops) : bundle_(bundle), ops_(ops) {
  if (ops_ != nullptr && (ops_->allocate == nullptr || ops_->release == nullptr || ops_->copy_to_device == nullptr ||
                          ops_->copy_to_host == nullptr || ops_->synchronize == nullptr))
    ops_ = nullptr;
  if (ops_ == nullptr) return;
  previous_ = t_current;
  t_current = this;
  installed_ = true;
}

DeviceStaging::~DeviceStaging() {
  release_all();
  if (installed_ && t_current == this) t_current = previous_;
}

void DeviceStaging::release_all() {
  if (ops_ == nullptr) return;
  for (auto& [tensor, m] : mirrors_) {
    std::string ignored;
    ops_->release(m.device, &ignored);
  }
  mirrors_.clear();
}

TensorView DeviceStaging::stage(const Tensor& t, const TensorView& host) {
  if (ops_ == nullptr || t.bytes() == nullptr) return host;
  const std::size_t bytes = t.nbytes() + Tensor::kGuardBytes;
  auto it = mirrors_.find(&t);
  if (it != mirrors_.end() && (it->second.host != t.bytes() || it->second.bytes != bytes)) {
    // The tensor was replaced since it was staged: stage the new storage.
    std::string ignored;
    ops_->release(it->second.device, &ignored);
    mirrors_.erase(it);
    it = mirrors_.end();
  }
  if (it == mirrors_.end()) {
    Mirror m;
    m.host = t.bytes();
    m.bytes = bytes;
    std::string error;
    if (!ops_->allocate(&m.device, bytes, &error)) {
      if (error_.ok()) error_ = staging_error("allocating " + std::to_string(bytes) + " bytes of device memory", error);
      return host;
    }
    if (!ops_->copy_to_device(m.device, t.bytes(), bytes, nullptr, &error)) {
      if (error_.ok()) error_ = staging_error("uploading a tensor", error);
      ops_->release(m.device, &error);
      return host;
    }
    it = mirrors_.emplace(&t, m).first;
  }
  TensorView v = host;
  v.data = it->second.device;
  v.memory = MemorySpace::device;
  return v;
}

Status DeviceStaging::upload_all() {
  if (ops_ == nullptr) return Status::success();
  for (const auto& [name, t] : bundle_.tensors) stage(t, TensorView{});
  return error_;
}

Status DeviceStaging::synchronize() {
  if (ops_ == nullptr) return Status::success();
  std::string error;
  if (!ops_->synchronize(nullptr, &error)) return staging_error("waiting for the device", error);
  return Status::success();
}

Status DeviceStaging::finish() {
  if (ops_ == nullptr) return error_;
  Status result = error_;
  std::string error;
  if (!ops_->synchronize(nullptr, &error) && result.ok()) result = staging_error("waiting for the device", error);
  for (auto& [name, t] : bundle_.tensors) {
    auto it = mirrors_.find(&t);
    if (it == mirrors_.end() || !result.ok()) continue;
    const Mirror& m = it->second;
    if (m.host != t.bytes() || m.bytes != t.nbytes() + Tensor::kGuardBytes) continue;  // replaced after staging
    if (is_output(name)) {
      if (!ops_->copy_to_host(t.bytes(), m.device, m.bytes, nullptr, &error) || !ops_->synchronize(nullptr, &error))
        result = staging_error("copying '" + name + "' back to the host", error);
    } else {
      auto copy = std::make_unique<std::uint8_t[]>(m.bytes);
      if (!ops_->copy_to_host(copy.get(), m.device, m.bytes, nullptr, &error) || !ops_->synchronize(nullptr, &error))
        result = staging_error("reading back input '" + name + "'", error);
      else if (std::memcmp(copy.get(), t.bytes(), m.bytes) != 0)
        result = Status::error(StatusCode::internal, "device_staging", name,
                               "device staging: the device copy of input '" + name + "' was modified by the call");
    }
  }
  release_all();
  if (installed_ && t_current == this) t_current = previous_;
  installed_ = false;
  error_ = result;
  ops_ = nullptr;  // the scope is over; later calls are no-ops
  return result;
}

Status run_driver(const OpDriver& driver, Bundle& b, const RunOptions& options, const core::DeviceMemoryOps* ops) {
  if (options.backend != Backend::cuda) return driver.run(b, options);
  // Without a usable device the entry point itself reports why (there is nothing to stage).
  if (ops == nullptr && backend_available(Backend::cuda)) ops = core::device_memory_ops();
  if (ops == nullptr) return driver.run(b, options);
  DeviceStaging staging(b, ops);
  const Status s = driver.run(b, options);
  const Status staged = staging.error();  // a failed upload: the call saw host memory
  const Status f = staging.finish();
  if (!staged.ok()) return staged;
  if (!s.ok()) return s;
  return f;
}

}  // namespace mlakit::goldens
