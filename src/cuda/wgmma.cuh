// Warpgroup tensor-core products (sm_90a): wgmma.mma_async m64n16k16, m64n32k16, m64n64k16,
// m64n128k16 and m64n256k16 with bf16 operands read from shared memory through matrix descriptors
// (m64n128k16 and m64n256k16 also with A in registers) and f32 accumulators in registers,
// asynchronous to the issuing threads.
//
// Operand layout in shared memory (PTX ISA, "Asynchronous Warpgroup Level Matrix Shared Memory
// Layout", no swizzle, K-major): core matrices of 8 rows x 8 bf16 (16 bytes a row, 128 contiguous
// bytes). Element (r, k) of an operand of R rows x 16 k lies at byte
//   (r / 8) * sbo + (k / 8) * lbo + (r % 8) * 16 + (k % 8) * 2
// from its start: lbo (the descriptor's leading dimension byte offset) steps to the next core
// matrix along k, sbo (stride dimension byte offset) to the next eight rows. A is 64 rows (M) x 16,
// B N rows (one per output column) x 16.
//
// Accumulator fragment (PTX ISA, wgmma .m64nNk16 D): thread t of the warpgroup, w = t / 32,
// g = (t % 32) / 4, c = t % 4, holds for i < N / 8
//   d[4i], d[4i + 1] = D[16w + g][8i + 2c, + 1]     d[4i + 2], d[4i + 3] = D[16w + g + 8][8i + 2c, + 1]
// (the mma.sync m16n8 layout, one per 8 columns, each warp a band of 16 rows).
//
// MN-major B (m64n256k16_mn below: B stored with its N elements contiguous, e.g. V's rows for
// P·V): a core matrix holds 8 k (16-byte rows) of 8 columns; element (n, k) lies at byte
//   (n / 8) * sbo + (k / 8) * lbo + (k % 8) * 16 + (n % 8) * 2.
//
// Sequence per batch of products: the operands written to shared memory, fence_proxy_async() (the
// products read shared memory through the async proxy), a barrier, wgmma_fence(d) (earlier writes
// of the accumulator registers d done before the products: a reset, a rescale), the products,
// wgmma_commit(), and wgmma_wait<N>() before the registers are read or the operands overwritten
// (the emulation also asks for a barrier between the wait and any thread overwriting them).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mlakit::cuda {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MLAKIT_CUDA_WGMMA_ASM 1
#endif

// The accumulator operands of a product of N columns, N / 2 registers: as the asm statement lists
// them (d[i] .. d[i + N/2 - 1], each "+f") and their places in its text ({%0, .., %(N/2 - 1)}).
#define MLAKIT_WGMMA_D8(d, i)                                                                      \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define MLAKIT_WGMMA_D16(d, i) MLAKIT_WGMMA_D8(d, i), MLAKIT_WGMMA_D8(d, i + 8)
#define MLAKIT_WGMMA_D32(d, i) MLAKIT_WGMMA_D16(d, i), MLAKIT_WGMMA_D16(d, i + 16)
#define MLAKIT_WGMMA_D64(d, i) MLAKIT_WGMMA_D32(d, i), MLAKIT_WGMMA_D32(d, i + 32)
#define MLAKIT_WGMMA_D128(d, i) MLAKIT_WGMMA_D64(d, i), MLAKIT_WGMMA_D64(d, i + 64)
#define MLAKIT_WGMMA_R0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define MLAKIT_WGMMA_R8 "%8, %9, %10, %11, %12, %13, %14, %15"
#define MLAKIT_WGMMA_R16 "%16, %17, %18, %19, %20, %21, %22, %23"
#define MLAKIT_WGMMA_R24 "%24, %25, %26, %27, %28, %29, %30, %31"
#define MLAKIT_WGMMA_R32 "%32, %33, %34, %35, %36, %37, %38, %39"
#define MLAKIT_WGMMA_R40 "%40, %41, %42, %43, %44, %45, %46, %47"
#define MLAKIT_WGMMA_R48 "%48, %49, %50, %51, %52, %53, %54, %55"
#define MLAKIT_WGMMA_R56 "%56, %57, %58, %59, %60, %61, %62, %63"
#define MLAKIT_WGMMA_R64 "%64, %65, %66, %67, %68, %69, %70, %71"
#define MLAKIT_WGMMA_R72 "%72, %73, %74, %75, %76, %77, %78, %79"
#define MLAKIT_WGMMA_R80 "%80, %81, %82, %83, %84, %85, %86, %87"
#define MLAKIT_WGMMA_R88 "%88, %89, %90, %91, %92, %93, %94, %95"
#define MLAKIT_WGMMA_R96 "%96, %97, %98, %99, %100, %101, %102, %103"
#define MLAKIT_WGMMA_R104 "%104, %105, %106, %107, %108, %109, %110, %111"
#define MLAKIT_WGMMA_R112 "%112, %113, %114, %115, %116, %117, %118, %119"
#define MLAKIT_WGMMA_R120 "%120, %121, %122, %123, %124, %125, %126, %127"
// The register lists' bodies, then the lists.
#define MLAKIT_WGMMA_B16 MLAKIT_WGMMA_R0 ", " MLAKIT_WGMMA_R8
#define MLAKIT_WGMMA_B32 MLAKIT_WGMMA_B16 ", " MLAKIT_WGMMA_R16 ", " MLAKIT_WGMMA_R24
#define MLAKIT_WGMMA_B64 \
  MLAKIT_WGMMA_B32 ", " MLAKIT_WGMMA_R32 ", " MLAKIT_WGMMA_R40 ", " MLAKIT_WGMMA_R48 ", " MLAKIT_WGMMA_R56
#define MLAKIT_WGMMA_B128                                                                                      \
  MLAKIT_WGMMA_B64 ", " MLAKIT_WGMMA_R64 ", " MLAKIT_WGMMA_R72 ", " MLAKIT_WGMMA_R80 ", " MLAKIT_WGMMA_R88 ", " \
      MLAKIT_WGMMA_R96 ", " MLAKIT_WGMMA_R104 ", " MLAKIT_WGMMA_R112 ", " MLAKIT_WGMMA_R120
#define MLAKIT_WGMMA_REGS8 "{" MLAKIT_WGMMA_R0 "}"
#define MLAKIT_WGMMA_REGS16 "{" MLAKIT_WGMMA_B16 "}"
#define MLAKIT_WGMMA_REGS32 "{" MLAKIT_WGMMA_B32 "}"
#define MLAKIT_WGMMA_REGS64 "{" MLAKIT_WGMMA_B64 "}"
#define MLAKIT_WGMMA_REGS128 "{" MLAKIT_WGMMA_B128 "}"

// The 64-bit matrix descriptor: start address, lbo and sbo in 16-byte units (bits 0-13, 16-29,
// 32-45), base offset 0 (bits 49-51), no swizzle (bits 62-63 = 0).
__host__ __device__ constexpr std::uint64_t wgmma_desc(std::uint32_t smem_addr, std::uint32_t lbo, std::uint32_t sbo) {
  return static_cast<std::uint64_t>((smem_addr & 0x3FFFFu) >> 4) |
         (static_cast<std::uint64_t>((lbo & 0x3FFFFu) >> 4) << 16) |
         (static_cast<std::uint64_t>((sbo & 0x3FFFFu) >> 4) << 32);
}

#if defined(MLAKIT_CUDA_WGMMA_ASM)
// The descriptor of an operand at `p` in shared memory.
__device__ __forceinline__ std::uint64_t smem_desc(const void* p, std::uint32_t lbo, std::uint32_t sbo) {
  return wgmma_desc(static_cast<std::uint32_t>(__cvta_generic_to_shared(p)), lbo, sbo);
}
#else
// Not reached: the host takes a wgmma kernel only in builds for sm_90a on an sm_90 GPU.
template <int R>
__device__ __forceinline__ void wgmma_unavailable(float (&d)[R]) {
  for (int i = 0; i < R; ++i) d[i] = __int_as_float(0x7fc00000);
}
#endif

__device__ __forceinline__ void fence_proxy_async() {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_fence() {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

// wgmma_fence() with the accumulators the products will write tied to it, so that every earlier
// write of them (a rescale, a reset) is done before it: left free, the compiler may sink such a
// write past the fence, and ptxas then serializes the products (C7515).
template <int R>
__device__ __forceinline__ void wgmma_fence(float (&d)[R]) {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
#else
  (void)d;
#endif
  wgmma_fence();
}

// The same with registers holding A fragments (register-A products) tied to it as well.
template <int R, int Q>
__device__ __forceinline__ void wgmma_fence(float (&d)[R], std::uint32_t (&a)[Q]) {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
#pragma unroll
  for (int i = 0; i < Q; ++i) asm volatile("" : "+r"(a[i])::"memory");
#else
  (void)a;
#endif
  wgmma_fence(d);
}

__device__ __forceinline__ void wgmma_commit() {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::wgmma_commit();
#endif
}

// Returns once all but the newest N committed groups of this thread's products are complete; d:
// the registers they write (tied to the wait so that no read of them moves above it).
template <int N, int R>
__device__ __forceinline__ void wgmma_wait(float (&d)[R]) {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
#elif defined(MLAKIT_CUDA_EMULATION)
  (void)d;
  ::mlakit_cuda_emu::wgmma_wait(N);
#else
  (void)d;
#endif
}

// The same with registers holding A fragments of the products tied to it too: their values are
// kept (the products read them until they complete).
template <int N, int R, int Q>
__device__ __forceinline__ void wgmma_wait(float (&d)[R], std::uint32_t (&a)[Q]) {
  wgmma_wait<N>(d);
#if defined(MLAKIT_CUDA_WGMMA_ASM)
#pragma unroll
  for (int i = 0; i < Q; ++i) asm volatile("" : "+r"(a[i])::"memory");
#else
  (void)a;
#endif
}

// d (+)= A·Bᵀ over 16 k: A 64 x 16 at `a`, B 128 x 16 at `b` (shared memory, 16-byte aligned, the
// layout above with the given lbo and sbo); accumulate == false starts from 0.
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], const std::uint16_t* a, const std::uint16_t* b,
                                                 std::uint32_t lbo, std::uint32_t sbo, bool accumulate) {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
  const std::uint64_t da = smem_desc(a, lbo, sbo), db = smem_desc(b, lbo, sbo);
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      MLAKIT_WGMMA_REGS64 ", %64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      :
        MLAKIT_WGMMA_D64(d, 0)
      : "l"(da), "l"(db), "r"(static_cast<int>(accumulate)));
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::wgmma_bf16(d, 128, a, lbo, sbo, b, lbo, sbo, false, accumulate);
#else
  (void)a, (void)b, (void)lbo, (void)sbo, (void)accumulate;
  wgmma_unavailable(d);
#endif
}

// d (+)= A·B over 16 k with A as above and B 16 k x 256 columns, MN-major (the layout above, its own
// lbo and sbo): 128 accumulators.
__device__ __forceinline__ void wgmma_m64n256k16_mn(float (&d)[128], const std::uint16_t* a, std::uint32_t a_lbo,
                                                    std::uint32_t a_sbo, const std::uint16_t* b, std::uint32_t b_lbo,
                                                    std::uint32_t b_sbo, bool accumulate) {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
  const std::uint64_t da = smem_desc(a, a_lbo, a_sbo), db = smem_desc(b, b_lbo, b_sbo);
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      MLAKIT_WGMMA_REGS128 ", %128, %129, p, 1, 1, 0, 1;\n"
      "}\n"
      :
        MLAKIT_WGMMA_D128(d, 0)
      : "l"(da), "l"(db), "r"(static_cast<int>(accumulate)));
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::wgmma_bf16(d, 256, a, a_lbo, a_sbo, b, b_lbo, b_sbo, true, accumulate);
#else
  (void)a, (void)a_lbo, (void)a_sbo, (void)b, (void)b_lbo, (void)b_sbo, (void)accumulate;
  wgmma_unavailable(d);
#endif
}

// The same with B 16 rows x 16 (d: 8 accumulators).
__device__ __forceinline__ void wgmma_m64n16k16(float (&d)[8], const std::uint16_t* a, const std::uint16_t* b,
                                                std::uint32_t lbo, std::uint32_t sbo, bool accumulate) {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
  const std::uint64_t da = smem_desc(a, lbo, sbo), db = smem_desc(b, lbo, sbo);
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      MLAKIT_WGMMA_REGS8 ", %8, %9, p, 1, 1, 0, 0;\n"
      "}\n"
      : MLAKIT_WGMMA_D8(d, 0)
      : "l"(da), "l"(db), "r"(static_cast<int>(accumulate)));
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::wgmma_bf16(d, 16, a, lbo, sbo, b, lbo, sbo, false, accumulate);
#else
  (void)a, (void)b, (void)lbo, (void)sbo, (void)accumulate;
  wgmma_unavailable(d);
#endif
}

// The same with B 64 rows x 16 (d: 32 accumulators).
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const std::uint16_t* a, const std::uint16_t* b,
                                                std::uint32_t lbo, std::uint32_t sbo, bool accumulate) {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
  const std::uint64_t da = smem_desc(a, lbo, sbo), db = smem_desc(b, lbo, sbo);
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      MLAKIT_WGMMA_REGS32 ", %32, %33, p, 1, 1, 0, 0;\n"
      "}\n"
      :
        MLAKIT_WGMMA_D32(d, 0)
      : "l"(da), "l"(db), "r"(static_cast<int>(accumulate)));
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::wgmma_bf16(d, 64, a, lbo, sbo, b, lbo, sbo, false, accumulate);
#else
  (void)a, (void)b, (void)lbo, (void)sbo, (void)accumulate;
  wgmma_unavailable(d);
#endif
}

// The same with B 256 rows x 16 (d: 128 accumulators).
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], const std::uint16_t* a, const std::uint16_t* b,
                                                 std::uint32_t lbo, std::uint32_t sbo, bool accumulate) {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
  const std::uint64_t da = smem_desc(a, lbo, sbo), db = smem_desc(b, lbo, sbo);
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      MLAKIT_WGMMA_REGS128 ", %128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      :
        MLAKIT_WGMMA_D128(d, 0)
      : "l"(da), "l"(db), "r"(static_cast<int>(accumulate)));
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::wgmma_bf16(d, 256, a, lbo, sbo, b, lbo, sbo, false, accumulate);
#else
  (void)a, (void)b, (void)lbo, (void)sbo, (void)accumulate;
  wgmma_unavailable(d);
#endif
}


// The same with B 32 rows x 16 (d: 16 accumulators).
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[16], const std::uint16_t* a, const std::uint16_t* b,
                                                std::uint32_t lbo, std::uint32_t sbo, bool accumulate) {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
  const std::uint64_t da = smem_desc(a, lbo, sbo), db = smem_desc(b, lbo, sbo);
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      MLAKIT_WGMMA_REGS16 ", %16, %17, p, 1, 1, 0, 0;\n"
      "}\n"
      : MLAKIT_WGMMA_D16(d, 0)
      : "l"(da), "l"(db), "r"(static_cast<int>(accumulate)));
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::wgmma_bf16(d, 32, a, lbo, sbo, b, lbo, sbo, false, accumulate);
#else
  (void)a, (void)b, (void)lbo, (void)sbo, (void)accumulate;
  wgmma_unavailable(d);
#endif
}

// d (+)= A·B over 16 k with A in registers and B 16 k x 128 columns, MN-major (its own lbo and
// sbo): a, this thread's share of A (64 x 16), is mma.sync's m16n8k16 A fragment for the 16 rows
// of its warp, so the accumulator fragment of an earlier product, rounded to bf16 and packed in
// pairs, is the A of the next without any exchange. The registers a must hold their values until
// the wait for this product.
__device__ __forceinline__ void wgmma_m64n128k16_rs_mn(float (&d)[64], const std::uint32_t (&a)[4], const std::uint16_t* b,
                                                       std::uint32_t b_lbo, std::uint32_t b_sbo, bool accumulate) {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
  const std::uint64_t db = smem_desc(b, b_lbo, b_sbo);
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      MLAKIT_WGMMA_REGS64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n"
      "}\n"
      :
        MLAKIT_WGMMA_D64(d, 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(static_cast<int>(accumulate)));
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::wgmma_bf16_rs(d, 128, a, b, b_lbo, b_sbo, true, accumulate);
#else
  (void)a, (void)b, (void)b_lbo, (void)b_sbo, (void)accumulate;
  wgmma_unavailable(d);
#endif
}

// The same with B 16 k x 256 columns (d: 128 accumulators), e.g. P·V of a 64-row P whose scores
// this warpgroup computed, over 256 columns of V.
__device__ __forceinline__ void wgmma_m64n256k16_rs_mn(float (&d)[128], const std::uint32_t (&a)[4], const std::uint16_t* b,
                                                       std::uint32_t b_lbo, std::uint32_t b_sbo, bool accumulate) {
#if defined(MLAKIT_CUDA_WGMMA_ASM)
  const std::uint64_t db = smem_desc(b, b_lbo, b_sbo);
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      MLAKIT_WGMMA_REGS128 ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n"
      "}\n"
      :
        MLAKIT_WGMMA_D128(d, 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(static_cast<int>(accumulate)));
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::wgmma_bf16_rs(d, 256, a, b, b_lbo, b_sbo, true, accumulate);
#else
  (void)a, (void)b, (void)b_lbo, (void)b_sbo, (void)accumulate;
  wgmma_unavailable(d);
#endif
}

}  // namespace mlakit::cuda
