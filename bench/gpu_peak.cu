#include "bench/gpu_peak.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace mlakit::bench {
namespace {

constexpr int kN = 8192;
constexpr int kWarmups = 3;
constexpr int kTimed = 10;

// Random bf16 in [-1, 1): products of zeros run faster on some GPUs than products of data.
__global__ void fill_random(__nv_bfloat16* x, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    x[i] = __float2bfloat16(static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

std::string cuda_error(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

// The probe proper; every resource is released by the caller's guard.
struct Buffers {
  __nv_bfloat16* a = nullptr;
  __nv_bfloat16* b = nullptr;
  __nv_bfloat16* c = nullptr;
  cublasHandle_t handle = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Buffers() {
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    if (handle) cublasDestroy(handle);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
};

GpuPeak measure() {
  GpuPeak g;
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    g.why = e != cudaSuccess ? cuda_error("cudaGetDeviceCount", e) : "no CUDA device";
    return g;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  char desc[384];
  std::snprintf(desc, sizeof desc, "%.200s, %d SMs, %.1f GiB, sm_%d%d, CUDA driver %d.%d, runtime %d.%d", prop.name,
                prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1 << 30), prop.major, prop.minor,
                driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
  g.device = desc;

  Buffers buf;
  const std::size_t bytes = std::size_t(kN) * kN * sizeof(__nv_bfloat16);
  for (__nv_bfloat16** p : {&buf.a, &buf.b, &buf.c})
    if (cudaError_t e = cudaMalloc(p, bytes); e != cudaSuccess) {
      g.why = cuda_error("cudaMalloc", e);
      return g;
    }
  fill_random<<<1024, 256>>>(buf.a, std::int64_t(kN) * kN, 1u);
  fill_random<<<1024, 256>>>(buf.b, std::int64_t(kN) * kN, 2u);
  if (cublasCreate(&buf.handle) != CUBLAS_STATUS_SUCCESS) {
    g.why = "cublasCreate failed";
    return g;
  }
  cudaEventCreate(&buf.start);
  cudaEventCreate(&buf.stop);
  const float one = 1.0f, zero = 0.0f;
  const auto gemm = [&] {
    return cublasGemmEx(buf.handle, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &one, buf.a, CUDA_R_16BF, kN, buf.b,
                        CUDA_R_16BF, kN, &zero, buf.c, CUDA_R_16BF, kN, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  for (int i = 0; i < kWarmups; ++i)
    if (gemm() != CUBLAS_STATUS_SUCCESS) {
      g.why = "cublasGemmEx failed";
      return g;
    }
  cudaEventRecord(buf.start);
  for (int i = 0; i < kTimed; ++i) gemm();
  cudaEventRecord(buf.stop);
  if (cudaError_t e = cudaEventSynchronize(buf.stop); e != cudaSuccess) {
    g.why = cuda_error("matrix products", e);
    return g;
  }
  float ms = 0;
  cudaEventElapsedTime(&ms, buf.start, buf.stop);
  g.bf16_matmul_tflops = 2.0 * kN * double(kN) * kN * kTimed / (ms * 1e-3) * 1e-12;
  g.measured = true;
  return g;
}

}  // namespace

const GpuPeak& gpu_peak() {
  static const GpuPeak p = measure();
  return p;
}

std::string describe(const GpuPeak& p) {
  if (!p.measured) return "gpu peak: n/a (" + p.why + ")";
  char buf[640];
  std::snprintf(buf, sizeof buf, "gpu peak[%s]: bf16 matmul 8192^3 (cuBLAS, f32 accumulation) %.1f TFLOP/s",
                p.device.c_str(), p.bf16_matmul_tflops);
  return buf;
}

}  // namespace mlakit::bench
