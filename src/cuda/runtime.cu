#include <cuda_runtime.h>

#include "core/common/device_kernels.hpp"
#include "core/common/device_mirror.hpp"
#include "cuda/fused_qkv_paged.hpp"
#include "cuda/lightning_indexer.hpp"
#include "cuda/mla_prefill_fp8.hpp"
#include "cuda/msa_block_indexer.hpp"
#include "cuda/runtime.hpp"
#include "cuda/sparse_mla_prefill.hpp"

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

const core::DeviceKernels kKernels = [] {
  core::DeviceKernels k;
  k.name = "cuda";
  k.available = device_available;
  k.lightning_indexer = lightning_indexer;
  k.remap_indices_to_rows = remap_indices_to_rows;
  k.msa_block_indexer = msa_block_indexer;
  k.mla_prefill_fp8 = mla_prefill_fp8;
  k.sparse_mla_prefill = sparse_mla_prefill;
  k.fused_qkv_paged = fused_qkv_paged;
  return k;
}();

// Registered at static initialization. This file is always linked when the cuda back-end is built
// (core's backend_available() calls device_available() below), so the registration is too, and
// through it every launcher's object file.
const bool kRegistered = (core::set_device_memory_ops(&kOps), core::set_device_kernels(&kKernels), true);

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
