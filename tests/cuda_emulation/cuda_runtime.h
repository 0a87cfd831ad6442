// A CPU stand-in for <cuda_runtime.h>: the subset of CUDA that src/cuda uses, so that the cuda
// back-end's kernels compile as C++ and run in the tests on machines without a GPU.
//
// Each thread block runs on one OS thread; each CUDA thread is a fiber (ucontext) that runs until
// it reaches __syncthreads or a warp collective (__shfl_xor_sync, __ballot_sync, __syncwarp,
// mma.sync). A block barrier completes when every live thread of the block waits at one, a warp
// collective when all 32 lanes of the warp wait at the same one; anything else (a barrier in
// divergent code, lanes that exited before a collective) is reported as a deadlock and aborts.
// "Device memory" is host memory, filled with 0xFF bytes (NaN, 0xFFFFFFFF) when allocated so that
// reads of never-written memory show up; a copy whose device side lies outside every allocation
// fails with cudaErrorInvalidValue. Kernels run when launched; streams are ignored (but stream
// synchronizations and copies are counted for the tests).
// mma.sync m16n8k16 is emulated from the PTX fragment layout (documented in src/cuda/mma.cuh),
// with the products summed in f64: the emulation checks the kernels' logic and indexing, not the
// tensor cores' rounding; a NaN result is the canonical NaN (0x7fffffff) whatever NaN went in, as
// on the tensor cores. wgmma.mma_async m64nNk16 (src/cuda/wgmma.cuh) likewise, per thread from its
// operands in shared memory (A also from registers), and asynchronous as cp.async below: its
// accumulators read NaN until the wait for its group, and an operand changed before that wait is
// reported.
// The emulated device is an sm_90 GPU (compute capability 9.x). ldmatrix .x4 (.trans) is a warp collective that reads the rows the lanes
// name (each 16 bytes, 16-byte aligned, not in device memory, and not past the end of the block's
// dynamic shared memory: static __shared__ arrays are plain statics here).
// cp.async copies (src/cuda/async_copy.cuh) land late on purpose: the destination reads as 0xFF
// bytes (NaN) from the issue until the issuing thread's cp.async.wait_group lets its group
// complete, so a kernel that reads a stage before waiting for it, or before the barrier after the
// wait, computes NaN; a thread that exits with copies it never waited for is reported.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#ifndef MLAKIT_CUDA_EMULATION
#error "this header stands in for the CUDA runtime only in the emulation tests"
#endif

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

namespace mlakit_cuda_emu {

void sync_block();
int sync_block_or(int predicate);
unsigned warp_ballot(bool predicate);
std::uint64_t warp_shfl_xor(std::uint64_t bits, int lane_mask);
void warp_sync();
void mma_bf16_16816(float c[4], const std::uint32_t a[4], const std::uint32_t b[2]);
void ldmatrix_x4(std::uint32_t r[4], const void* row, bool trans);
// 16 bytes from global `src` (or 16 zero bytes when !fill) to shared `dst`, completed at a wait.
void cp_async_16(void* dst, const void* src, bool fill);
void cp_async_commit();
void cp_async_wait(int pending_groups);
// wgmma.mma_async m64nNk16 (src/cuda/wgmma.cuh), N = n: the issuing thread's n / 2 accumulators
// read NaN from the issue until a wait completes its group; the operands (shared memory, read
// through their layouts' lbo and sbo; B K-major, or MN-major when b_mn_major) must be unchanged at
// that wait.
void wgmma_bf16(float* d, int n, const std::uint16_t* a, std::uint32_t a_lbo, std::uint32_t a_sbo, const std::uint16_t* b,
                std::uint32_t b_lbo, std::uint32_t b_sbo, bool b_mn_major, bool accumulate);
// The same with A in registers (wgmma's register-A form): a[4] is the issuing lane's share of A's
// 64 x 16, mma.sync's m16n8k16 A fragment per warp (warp w: rows 16w .. 16w + 15), exchanged
// within each warp as its 32 lanes issue; captured at the issue, and the registers must still
// hold those values at the wait for the product (checked there: the hardware reads them until it
// completes).
void wgmma_bf16_rs(float* d, int n, const std::uint32_t a[4], const std::uint16_t* b, std::uint32_t b_lbo,
                   std::uint32_t b_sbo, bool b_mn_major, bool accumulate);
void wgmma_commit();
void wgmma_wait(int pending_groups);
unsigned char* dynamic_shared();
void run_grid(dim3 grid, dim3 block, std::size_t dynamic_smem, const std::function<void()>& thread_body);

// Live allocations of the emulated device (tests check that every call frees what it allocates).
long live_allocations();
// Kernels launched, device-to-host copies and stream synchronizations since the process started.
long launches();
long copies_to_host();
long stream_synchronizations();
// Device allocations made (cudaMalloc and cudaMallocAsync) since the process started.
long allocations_made();
// Called with each device allocation's bytes as it is freed, before they are released (tests read
// a call's temporaries so); an empty function: none. Returns the previous observer.
std::function<void(const unsigned char*, std::size_t)> set_free_observer(
    std::function<void(const unsigned char*, std::size_t)> observer);
// The device count cudaGetDeviceCount reports (1 at start); 0 makes it fail as on a machine
// without a GPU (cudaErrorNoDevice). Returns the previous count.
int set_device_count(int count);
// The order in which a block's threads run between barriers: all warps side by side, a warp
// collective at a time (lockstep, the start), or each warp as far as it can go before the next
// starts, in warp order or reversed. The two serial orders let one warp's writes to shared memory
// (a cp.async issue poisons its destination at once) land before another warp's reads that a
// missing barrier would leave unordered. Returns the previous order.
enum class Schedule { lockstep, warps_in_order, warps_reversed };
Schedule set_schedule(Schedule s);

template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t dynamic_smem, void* /*stream*/, A&&... args) {
  const std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
  run_grid(grid, block, dynamic_smem, [&] { std::apply(kernel, params); });
}

}  // namespace mlakit_cuda_emu

// ---- device intrinsics -----------------------------------------------------------------------
inline void __syncthreads() { mlakit_cuda_emu::sync_block(); }
inline int __syncthreads_or(int p) { return mlakit_cuda_emu::sync_block_or(p); }
inline void __syncwarp(unsigned = 0xffffffffu) { mlakit_cuda_emu::warp_sync(); }
inline unsigned __ballot_sync(unsigned, int predicate) { return mlakit_cuda_emu::warp_ballot(predicate != 0); }
template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = mlakit_cuda_emu::warp_shfl_xor(bits, lane_mask);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {  // fibers never interleave inside a call
  const unsigned old = *p;
  *p = old + v;
  return old;
}
inline unsigned atomicOr(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old | v;
  return old;
}
template <class T>
inline T min(T a, T b) {
  return b < a ? b : a;
}
template <class T>
inline T max(T a, T b) {
  return a < b ? b : a;
}

// ---- runtime API -----------------------------------------------------------------------------
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorNoDevice = 100 };
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct CUstream_st;
using cudaStream_t = CUstream_st*;

const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaMalloc(void** ptr, std::size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocAsync(void** ptr, std::size_t bytes, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
template <class F>
cudaError_t cudaFuncSetAttribute(F*, cudaFuncAttribute, int value) {
  return value <= 232448 ? cudaSuccess : cudaErrorInvalidValue;  // H100 / H200 opt-in limit
}
