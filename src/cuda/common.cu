#include <atomic>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/common.hpp"
#include "cuda/wgmma_route.hpp"

namespace mlakit::cuda {

Status cuda_error(const char* op, const char* what, cudaError_t err) {
  return Status::error(StatusCode::internal, op, "cuda",
                       std::string(op) + ": " + what + " failed: " + cudaGetErrorName(err) + ": " +
                           cudaGetErrorString(err));
}

Status check_launch(const char* op, const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::success();
  return cuda_error(op, (std::string("launching ") + kernel).c_str(), err);
}

Status shared_memory_fits(const char* op, const char* field, const std::string& what, std::size_t bytes,
                          std::size_t limit) {
  if (bytes <= limit) return Status::success();
  return Status::error(StatusCode::unsupported, op, field,
                       std::string(op) + ": " + what + " needs " + std::to_string(bytes) +
                           " bytes of shared memory per block (the GPU has " + std::to_string(limit) + ")");
}

Status exceeds_one_launch(const char* op, const char* field, const std::string& what) {
  return Status::error(StatusCode::unsupported, op, field, std::string(op) + ": " + what + " exceeds one launch");
}

std::size_t max_shared_memory(const char* op, Status* status) {
  int device = 0, bytes = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err != cudaSuccess) {
    *status = cuda_error(op, "querying the shared memory per block", err);
    return 0;
  }
  *status = Status::success();
  // Kernels with dynamic shared memory keep well under 1 KiB of static shared memory on top.
  constexpr int kStaticReserve = 1024;
  return bytes > kStaticReserve ? static_cast<std::size_t>(bytes - kStaticReserve) : 0;
}

Status DeviceBuffer::allocate(const char* op, const char* what, std::size_t bytes, cudaStream_t stream) {
  reset();
  stream_ = stream;
  if (bytes == 0) bytes = 16;  // a valid, distinct pointer even for empty buffers
  const cudaError_t err = cudaMallocAsync(&ptr_, bytes, stream);
  if (err != cudaSuccess) {
    ptr_ = nullptr;
    return cuda_error(op, (std::string("allocating ") + what + " (" + std::to_string(bytes) + " bytes)").c_str(), err);
  }
  return Status::success();
}

void DeviceBuffer::reset() {
  if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);  // stream-ordered: after the kernels that use it
  ptr_ = nullptr;
}

Status copy_device_to_host(const TensorView& src, std::vector<std::uint8_t>* dst, void* stream) {
  const std::size_t bytes = static_cast<std::size_t>(src.size_bytes());
  dst->resize(bytes);
  if (bytes == 0) return Status::success();
  MLAKIT_CUDA_TRY("cuda", "cudaMemcpyAsync (device to host)",
                  cudaMemcpyAsync(dst->data(), src.data, bytes, cudaMemcpyDeviceToHost, as_stream(stream)));
  MLAKIT_CUDA_TRY("cuda", "cudaStreamSynchronize", cudaStreamSynchronize(as_stream(stream)));
  return Status::success();
}

Status copy_host_to_device(const void* src, const TensorView& dst, void* stream) {
  const std::size_t bytes = static_cast<std::size_t>(dst.size_bytes());
  if (bytes == 0) return Status::success();
  MLAKIT_CUDA_TRY("cuda", "cudaMemcpyAsync (host to device)",
                  cudaMemcpyAsync(dst.data, src, bytes, cudaMemcpyHostToDevice, as_stream(stream)));
  MLAKIT_CUDA_TRY("cuda", "cudaStreamSynchronize", cudaStreamSynchronize(as_stream(stream)));
  return Status::success();
}

Status synchronize(void* stream) {
  MLAKIT_CUDA_TRY("cuda", "cudaStreamSynchronize", cudaStreamSynchronize(as_stream(stream)));
  return Status::success();
}

namespace wgmma_route {
namespace {
core::RouteSwitch& route() {
  static core::RouteSwitch r("MLAKIT_CUDA_WGMMA");
  return r;
}
std::atomic<long> g_runs{0};
}  // namespace

core::RouteMode mode() { return route().mode(); }
void set_mode(core::RouteMode m) { route().set_mode(m); }

bool takes(bool by_default) {
  if (!route().use_for(true, 1, by_default ? 1 : SIZE_MAX)) return false;
#if defined(MLAKIT_CUDA_SM90A)
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major == 9;
#else
  return false;
#endif
}

void count() { ++g_runs; }
long runs() { return g_runs.load(); }
}  // namespace wgmma_route

}  // namespace mlakit::cuda
