// Asynchronous global -> shared copies (cp.async, sm_80 and later): a thread queues 16-byte copies,
// closes them into a group with cp_async_commit(), and cp_async_wait<N>() returns once all but its
// newest N groups have landed. Other threads see the data after a barrier that follows the wait.
// Copies of a gather in flight while the tensor cores work on the previous stage hide the
// gather's latency.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mlakit::cuda {

// 16 bytes from `src` (global memory, 16-byte aligned) to `dst` (shared memory, 16-byte aligned);
// with fill == false, 16 zero bytes instead and `src` is not read (it must still be a valid
// address: pass any row of the same tensor).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool fill) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(fill ? 16 : 0) : "memory");
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::cp_async_16(dst, src, fill);
#else
  (void)dst;
  (void)src;
  (void)fill;
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::cp_async_commit();
#endif
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::cp_async_wait(N);
#endif
}

}  // namespace mlakit::cuda
