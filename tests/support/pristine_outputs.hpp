// Device copies of a prepared bundle's outputs (poisoned, in-place arguments as given) and their
// restore by device-to-device copies on a stream. An operator that rewrites its arguments in place
// (mla_prefill_fp8: q and the new cache rows) repeats one result run after run only when each run
// starts from them, as an engine's captured layer does with its own inputs; the copies stay on the
// device, so runs with them still copy nothing to the host and wait on nothing. Header-only: it
// builds against the CUDA runtime and against the CPU emulation's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "goldens/common/driver.hpp"

namespace mlakit::test {

class PristineOutputs {
 public:
  PristineOutputs() = default;
  PristineOutputs(const PristineOutputs&) = delete;
  PristineOutputs& operator=(const PristineOutputs&) = delete;
  ~PristineOutputs() {
    for (const Copy& c : copies_) cudaFree(c.pristine);
  }

  // `staged`: the bundle whose outputs its active DeviceStaging holds on the device; `fresh`: the
  // same outputs on the host as every run must start from. Waits for its uploads.
  cudaError_t make(goldens::Bundle& staged, const goldens::Bundle& fresh) {
    for (const auto& name : fresh.output_names()) {
      const std::size_t bytes = fresh.at(name).nbytes();
      Copy c{staged.at(name).view().data, nullptr, bytes};
      if (const cudaError_t e = cudaMalloc(&c.pristine, bytes); e != cudaSuccess) return e;
      copies_.push_back(c);
      const cudaError_t e = cudaMemcpyAsync(c.pristine, fresh.at(name).bytes(), bytes, cudaMemcpyHostToDevice, nullptr);
      if (e != cudaSuccess) return e;
    }
    return cudaStreamSynchronize(nullptr);
  }

  // Every output back to its pristine bytes, ordered on `stream`.
  cudaError_t restore(cudaStream_t stream) const {
    for (const Copy& c : copies_)
      if (const cudaError_t e = cudaMemcpyAsync(c.output, c.pristine, c.bytes, cudaMemcpyDeviceToDevice, stream);
          e != cudaSuccess)
        return e;
    return cudaSuccess;
  }

 private:
  struct Copy {
    void* output;
    void* pristine;
    std::size_t bytes;
  };
  std::vector<Copy> copies_;
};

}  // namespace mlakit::test
