#include <cuda_runtime.h>

#include "cuda/runtime.hpp"

namespace mlakit::cuda {

bool device_available(std::string* why) {
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
