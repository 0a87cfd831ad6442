// Peak probes for the benchmarks: ISA-neutral declarations (no intrinsics).
// Register-resident arithmetic loops and a streaming read, per ISA level, so that kernel
// figures can be reported as a share of what the machine can do.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlakit::simd {

struct PeakKernels {
  const char* level;
  // `iters` trips of independent multiply-add chains held in registers; the result only keeps
  // the work from being optimised away. flops = iters * f32_flops_per_iter.
  float (*f32_fma)(std::size_t iters, float seed);
  double f32_flops_per_iter;
  // bf16 dot products: vdpbf16ps on register operands where the level has it, otherwise the
  // widening path (bf16 loaded from L1, widened by shift/mask, two f32 FMAs per pair).
  float (*bf16_dot)(std::size_t iters, float seed);
  double bf16_flops_per_iter;
  const char* bf16_kind;
  // Sum of n floats read once, front to back (streaming read bandwidth).
  float (*read_sum)(const float* p, std::size_t n);
  // AMX bf16 tiles (amx level only, else nullptr / 0): `iters` trips of independent TDPBF16PS
  // chains on accumulator tiles, 2 * 16 * 16 * 32 flops per instruction.
  float (*amx_bf16)(std::size_t iters, float seed);
  double amx_flops_per_iter;
  // The tile GEMM's step with nothing else (amx level only, else nullptr): per trip the same four
  // products, each operand tile loaded just before its first product, two A tiles from a 32 KiB
  // block (L1) and two B tiles from `b_steps` steps of 2 KiB cycled through (8: 16 KiB, held in
  // L1 beside A; 512: 1 MiB, streamed from L2 with the kernel's prefetch two steps ahead). Against
  // amx_bf16's rate: what the loads cost, and whether B from L2 bounds the kernel.
  float (*amx_bf16_streamed)(std::size_t iters, float seed, std::size_t b_steps);
};

}  // namespace mlakit::simd
