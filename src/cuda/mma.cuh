// Warp-level BF16 tensor-core products: mma.sync m16n8k16, f32 accumulation (sm_80 and later).
//
// Fragment layout (PTX ISA, "mma.m16n8k16" with .bf16 inputs and .f32 accumulators), per lane with
// g = lane / 4 and c = lane % 4; a 32-bit register holds two bf16, the lower-indexed one in the low
// half:
//   A (16x16, row-major): a0 = A[g][2c, 2c+1]   a1 = A[g+8][2c, 2c+1]
//                         a2 = A[g][2c+8, +9]   a3 = A[g+8][2c+8, +9]
//   B (16x8, k x n):      b0 = B[2c, 2c+1][g]   b1 = B[2c+8, 2c+9][g]
//   C (16x8, f32):        c0, c1 = C[g][2c, 2c+1]   c2, c3 = C[g+8][2c, 2c+1]
// bf16 x bf16 products are exact in f32; every fp8 e4m3 value is a bf16 value, so fp8 data decoded
// to bf16 go through these products exactly as well.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mlakit::cuda {

__device__ __forceinline__ void mma_bf16_16816(float c[4], const std::uint32_t a[4], const std::uint32_t b[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::mma_bf16_16816(c, a, b);  // the tests' CPU emulation (same fragment layout)
#else
  // Not reached: the back-end is built for sm_80+ only (mma.sync with bf16 needs it).
  (void)a;
  (void)b;
  c[0] = c[1] = c[2] = c[3] = __int_as_float(0x7fc00000);
#endif
}

__device__ __forceinline__ std::uint32_t pack_bf16x2(std::uint16_t lo, std::uint16_t hi) {
  return static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
}

// A fragment of rows [m0, m0+16) x columns [k0, k0+16) of a row-major bf16 matrix in shared memory
// with row stride `ld` elements (ld even, k0 even: the pairs are 4-byte aligned).
__device__ __forceinline__ void load_a_rowmajor(std::uint32_t a[4], const std::uint16_t* s, int ld, int m0, int k0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const std::uint16_t* r0 = s + (m0 + g) * ld + k0 + 2 * c;
  const std::uint16_t* r1 = r0 + 8 * ld;
  a[0] = *reinterpret_cast<const std::uint32_t*>(r0);
  a[1] = *reinterpret_cast<const std::uint32_t*>(r1);
  a[2] = *reinterpret_cast<const std::uint32_t*>(r0 + 8);
  a[3] = *reinterpret_cast<const std::uint32_t*>(r1 + 8);
}

// B fragment with B[k][n] = S[n0 + n][k0 + k]: S is row-major with one row per n (a K tile stored
// key by key, a weight tile stored output column by output column).
__device__ __forceinline__ void load_b_nmajor(std::uint32_t b[2], const std::uint16_t* s, int ld, int n0, int k0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const std::uint16_t* r = s + (n0 + g) * ld + k0 + 2 * c;
  b[0] = *reinterpret_cast<const std::uint32_t*>(r);
  b[1] = *reinterpret_cast<const std::uint32_t*>(r + 8);
}

// B fragment with B[k][n] = S[k0 + k][n0 + n]: S is row-major with one row per k (a V tile stored
// key by key, used for P·V). Two 16-bit loads per register.
__device__ __forceinline__ void load_b_kmajor(std::uint32_t b[2], const std::uint16_t* s, int ld, int k0, int n0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const std::uint16_t* r = s + (k0 + 2 * c) * ld + n0 + g;
  b[0] = pack_bf16x2(r[0], r[ld]);
  b[1] = pack_bf16x2(r[8 * ld], r[9 * ld]);
}

// ldmatrix .x4: four 8x8 bf16 matrices from shared memory in one warp instruction. Lane l names
// row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned); r[i] receives matrix i's row lane / 4,
// columns 2·(lane % 4), +1 — the register layout of an mma fragment. With .trans it receives
// column lane / 4 of rows 2·(lane % 4), +1: a k-major tile (V stored key by key) comes out as B
// fragments without 16-bit shuffling.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t r[4], const std::uint16_t* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::ldmatrix_x4(r, row, false);
#else
  (void)row;
  r[0] = r[1] = r[2] = r[3] = 0;
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t r[4], const std::uint16_t* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#elif defined(MLAKIT_CUDA_EMULATION)
  ::mlakit_cuda_emu::ldmatrix_x4(r, row, true);
#else
  (void)row;
  r[0] = r[1] = r[2] = r[3] = 0;
#endif
}

// Row addresses for ldmatrix_x4 (ld: the tile's row stride in elements, a multiple of 8).
// A fragment of rows [m0, m0+16) x columns [k0, k0+16) of a row-major tile (the matrices in the
// order of a0..a3).
__device__ __forceinline__ const std::uint16_t* ldmatrix_a_row(const std::uint16_t* s, int ld, int m0, int k0) {
  const int lane = threadIdx.x & 31;
  return s + (m0 + (lane & 15)) * ld + k0 + ((lane >> 4) << 3);
}
// B fragments of two n tiles, columns [n_first, n_first+8) and [n_second, n_second+8), k in
// [k0, k0+16), of a tile stored one row per n (load_b_nmajor's layout): r[0], r[1] the first
// tile's b0, b1; r[2], r[3] the second's.
__device__ __forceinline__ const std::uint16_t* ldmatrix_b_nmajor_rows(const std::uint16_t* s, int ld, int n_first,
                                                                       int n_second, int k0) {
  const int lane = threadIdx.x & 31;
  return s + ((lane >> 4 ? n_second : n_first) + (lane & 7)) * ld + k0 + (((lane >> 3) & 1) << 3);
}
// The same for two neighbouring n tiles, [n0, n0+16).
__device__ __forceinline__ const std::uint16_t* ldmatrix_b_nmajor_row(const std::uint16_t* s, int ld, int n0, int k0) {
  return ldmatrix_b_nmajor_rows(s, ld, n0, n0 + 8, k0);
}
// The same two tiles from a tile stored one row per k (load_b_kmajor's layout), for ldmatrix_x4_trans.
__device__ __forceinline__ const std::uint16_t* ldmatrix_b_kmajor_row(const std::uint16_t* s, int ld, int k0, int n0) {
  const int lane = threadIdx.x & 31;
  return s + (k0 + (lane & 7) + (((lane >> 3) & 1) << 3)) * ld + n0 + ((lane >> 4) << 3);
}

}  // namespace mlakit::cuda
