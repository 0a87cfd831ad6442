// Device staging for the drivers: runs an operator on device memory with the drivers unchanged.
//
// While a DeviceStaging scope is active on a thread, Tensor::view() on that thread returns a view
// of a device mirror of the tensor (uploaded on first use, memory = device) instead of the host
// storage. finish() copies the mirrors of the bundle's out.* tensors back into the host tensors,
// guard bytes included (so the host-side guard check also sees device overruns), checks that the
// mirrors of the inputs still hold the bytes uploaded, and frees everything; the destructor frees
// whatever is left. Scopes nest (the innermost one serves view()).
//
// The memory functions are core::device_memory_ops() (registered by the cuda back-end) unless
// others are given; without any, the scope is inactive and view() keeps returning host views.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/common/device_mirror.hpp"
#include "mlakit/backend.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit::goldens {

class Tensor;
struct Bundle;
class OpDriver;

class DeviceStaging {
 public:
  explicit DeviceStaging(Bundle& bundle, const core::DeviceMemoryOps* ops = core::device_memory_ops());
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  bool active() const { return ops_ != nullptr; }

  // Uploads every tensor of the bundle now (e.g. before a timed run). Optional.
  Status upload_all();
  // Waits for the default stream (the one the drivers run on).
  Status synchronize();
  // Copies the out.* mirrors back, checks the input mirrors, frees every mirror and ends the
  // scope (view() serves host views again). The first failure is returned; later calls are no-ops.
  Status finish();

  // Device view of `t` (uploading it on first use); `host` is t's host view. Used by Tensor::view().
  TensorView stage(const Tensor& t, const TensorView& host);

  std::size_t mirror_count() const { return mirrors_.size(); }
  // The first failure of stage() (which cannot return one): the call then got a host view.
  const Status& error() const { return error_; }

 private:
  struct Mirror {
    void* device = nullptr;
    const std::uint8_t* host = nullptr;  // the host storage it was uploaded from
    std::size_t bytes = 0;               // data + guard bytes
  };
  void release_all();

  Bundle& bundle_;
  const core::DeviceMemoryOps* ops_;
  DeviceStaging* previous_ = nullptr;
  bool installed_ = false;
  Status error_;  // first failure of stage() (it cannot return one)
  std::map<const Tensor*, Mirror> mirrors_;
};

// The innermost active scope of this thread, or null.
DeviceStaging* current_staging();

// driver.run(b, options) with the tensors staged in device memory when options.backend is cuda
// and a device is usable (the outputs come back into b); otherwise driver.run(b, options) as is.
// `ops` (tests) stages with those memory functions whatever the device.
Status run_driver(const OpDriver& driver, Bundle& b, const RunOptions& options,
                  const core::DeviceMemoryOps* ops = nullptr);

}  // namespace mlakit::goldens
