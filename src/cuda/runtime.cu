#include <cuda_runtime.h>

#include "core/common/device_mirror.hpp"
#include "cuda/runtime.hpp"

namespace mlakit::cuda {
namespace {

bool fail(cudaError_t err, std::string* error) {
  if (error) *error = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
  return false;
}

bool copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream, std::string* error) {
  const cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream));
  return err == cudaSuccess || fail(err, error);
}

bool copy_to_device(void* dst, const void* src, std::size_t bytes, void* stream, std::string* error) {
  const cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream));
  return err == cudaSuccess || fail(err, error);
}

bool synchronize_stream(void* stream, std::string* error) {
  const cudaError_t err = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  return err == cudaSuccess || fail(err, error);
}

bool allocate(void** ptr, std::size_t bytes, std::string* error) {
  const cudaError_t err = cudaMalloc(ptr, bytes);
  return err == cudaSuccess || fail(err, error);
}

bool release(void* ptr, std::string* error) {
  const cudaError_t err = cudaFree(ptr);
  return err == cudaSuccess || fail(err, error);
}

const core::DeviceMemoryOps kOps = [] {
  core::DeviceMemoryOps ops;
  ops.name = "cuda";
  ops.copy_to_host = copy_to_host;
  ops.copy_to_device = copy_to_device;
  ops.synchronize = synchronize_stream;
  ops.allocate = allocate;
  ops.release = release;
  return ops;
}();

// Registered at static initialization. This file is always linked when the cuda back-end is built
// (core's backend_available() calls device_available() below), so the registration is too.
const bool kRegistered = (core::set_device_memory_ops(&kOps), true);

}  // namespace

bool device_available(std::string* why) {
  (void)kRegistered;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = std::string("no usable GPU: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error so later queries start clean
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device found";
    return false;
  }
  return true;
}

}  // namespace mlakit::cuda
