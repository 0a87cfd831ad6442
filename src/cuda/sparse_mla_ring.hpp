// Op 4's second cuda kernel, for bf16 and fp8 caches (FlashMLA's split rows included): 64 heads per
// block, the gathered rows in a ring of cp.async stages, every tensor-core operand loaded by
// ldmatrix (sparse_mla_ring.cu).
#pragma once

#include "core/common/device_launch.hpp"
#include "core/common/route_switch.hpp"
#include "mlakit/ops/sparse_mla_prefill.hpp"

namespace mlakit::cuda::sparse_mla_ring {

// Whether the ring kernel can take a call: a bf16 cache (qk_depth a multiple of 8) or an fp8 cache
// with qk_depth a multiple of 16 and one scale per row, or codes a multiple of 16, a tail a
// multiple of 8 and scale groups a multiple of 16 columns; rows (and tails) that start 16-byte
// aligned (base and every stride), v_depth <= min(qk_depth, 512), q 16-byte aligned, and the
// block's shared memory within the device's limit.
bool eligible(const SparseMlaPrefillDesc& desc, const SparseMlaPrefillArgs& a);

// Whether a call takes it: MLAKIT_CUDA_SPARSE_MLA_RING ("auto": eligible calls of at least
// kAutoMinHeads heads; "on": every eligible call; "off"), set in process by tests and benchmarks.
inline constexpr std::size_t kAutoMinHeads = 64;
bool takes(const SparseMlaPrefillDesc& desc, const SparseMlaPrefillArgs& a);
core::RouteMode mode();
void set_mode(core::RouteMode m);

// Wide steps: 64 index slots a step in two stages (FlashMLA's sparse prefill steps over 64 rows)
// instead of 32 in three, for bf16 caches on the wgmma products (each warpgroup's scores one
// m64n32k16 product per 16 columns, half the passes over Q a slot), where both stages fit beside Q
// (576 columns: 225.5 KiB). MLAKIT_CUDA_SPARSE_MLA_WIDE ("on": every call that can; "auto" and
// "off": none, until a GPU has measured them), set in process by tests and benchmarks.
core::RouteMode wide_mode();
void set_wide_mode(core::RouteMode m);
long wide_runs();  // calls that took them since the process started

// P in registers: with the products on wgmma and v_depth 512 (bf16 rows or one scale a row), each
// warpgroup's P·V reads the P of its own slots from its score registers and starts before the
// other half's P is published; only that half passes through shared memory (the same bits).
// MLAKIT_CUDA_SPARSE_MLA_P_REGS ("on": every call that can; "auto" and "off": none, until a GPU
// has measured it), set in process by tests and benchmarks.
core::RouteMode p_regs_mode();
void set_p_regs_mode(core::RouteMode m);
long p_regs_runs();  // calls that took it since the process started

// Queues the kernel for an eligible call (the arguments of cuda::sparse_mla_prefill).
Status run(const SparseMlaPrefillDesc& desc, const SparseMlaPrefillArgs& a, const core::DeviceLaunch& launch);

// Calls that ran it since the process started (tests check that a route was taken).
long runs();

}  // namespace mlakit::cuda::sparse_mla_ring
