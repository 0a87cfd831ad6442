// The best library GEMM for the same work, measured in the benchmark's own process, so that every
// GEMM-shaped operator row can say how it compares (`pct_of_library`): OpenBLAS sgemm (f32
// operands, converted beforehand and not timed) on the shapes of the operator's GEMMs:
//   fused_qkv_paged     one T x N x K product (X·Wᵀ)
//   sparse_mla_prefill  per query row, Hq x topk x qk_depth (Q·Kᵀ over its gathered rows) and
//                       Hq x v_depth x topk (P·V); timed on a sample of rows and scaled to all
//   mla_prefill_fp8     the KV projection (buffer_length x H·(nope + v) x latent), then per head a
//                       causal attention in blocks of 64 query rows against the keys the block's
//                       last row sees (Q·Kᵀ over nope + rope, P·V over v); one head timed, x H
// Where the library is absent or the operator has no such form, nothing is reported.
#pragma once

#include <optional>
#include <string>

#include "goldens/common/tensor.hpp"

#include <cstddef>
#include <functional>
#include <vector>

namespace mlakit::bench {

// One product C (m x n) = A (m x k) · Bᵀ (B n x k).
struct Gemm {
  std::size_t m, n, k;
};
// `calls` rounds of the products, their time multiplied by `multiplier` (a sample scaled to the
// whole call, or one head's products times the heads).
struct GemmGroup {
  std::vector<Gemm> gemms;
  std::size_t calls;
  double multiplier;
};
// The GEMMs a library would run for op's call on bundle b (empty: the operator has no such form).
std::vector<GemmGroup> library_gemms(const std::string& op, const goldens::Bundle& b);

// A library bar made ready once (operands filled, weights in the library's layout): each call of
// `round` runs the GEMMs of one operator call and returns their seconds. The benchmark times it in
// turn with the operator's own calls (bench/op_bench.cpp), so that both see the same phase of a
// shared host.
using BarRound = std::function<double()>;
// One group's products, made ready: `once` runs `calls` rounds of them.
using GemmPrepare = std::function<std::function<void()>(const std::vector<Gemm>& gemms, std::size_t calls, int threads)>;
// The groups' products made ready by `prepare`, as one round (each group's time times its multiplier).
BarRound prepare_groups(const std::vector<GemmGroup>& groups, const GemmPrepare& prepare, int threads);

// The library GEMMs of bundle b's call on the back-end's threads, or nothing.
std::optional<BarRound> library_bar(const std::string& op, const goldens::Bundle& b, int threads);
// What the library is ("OpenBLAS ... Haswell"), for the benchmark context.
std::string library_description();

}  // namespace mlakit::bench
