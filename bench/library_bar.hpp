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
// The best of three timings of once(), after one untimed call (warm-up), in seconds.
double best_of_three(const std::function<void()>& once);
// Seconds of `calls` rounds of the products on `threads` threads, the best of three.
using GemmTimer = std::function<double(const std::vector<Gemm>& gemms, std::size_t calls, int threads)>;
double time_groups(const std::vector<GemmGroup>& groups, const GemmTimer& timer, int threads);

// Seconds the library GEMMs of bundle b's call take on the back-end's threads, or nothing.
std::optional<double> library_seconds(const std::string& op, const goldens::Bundle& b, int threads);
// What the library is ("OpenBLAS ... Haswell"), for the benchmark context.
std::string library_description();

}  // namespace mlakit::bench
