// The GPU side of the peak probe: the dense bf16 matrix-product rate of the GPU the cuda back-end
// runs on, measured in the benchmark's own process (cuBLAS, 8192 x 8192 x 8192, bf16 inputs and
// output, f32 accumulation: what torch.matmul runs for bf16), so that cuda rows report their share
// of it. Built with the CUDA back-end; elsewhere (or without a GPU) `measured` is false and `why`
// says why.
#pragma once

#include <string>

namespace mlakit::bench {

struct GpuPeak {
  bool measured = false;
  std::string why;          // when not measured
  std::string device;       // name, SM count, memory, driver and runtime versions
  double bf16_matmul_tflops = 0;
};

// Measured once per process (the first call takes about a second).
const GpuPeak& gpu_peak();

std::string describe(const GpuPeak& p);

}  // namespace mlakit::bench
