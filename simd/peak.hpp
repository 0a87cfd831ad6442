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
};

}  // namespace mlakit::simd
