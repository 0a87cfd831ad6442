// The BLAS library's f32 GEMM, for the cpu back-end's large projections on levels without a bf16
// dot (generic, avx2, avx512), where its sgemm outruns the library's own f32 tiles (measured in
// bench/RESULTS.md, "Op 5 against the library GEMM"). Built in when OpenBLAS is found
// (MLAKIT_WITH_OPENBLAS); otherwise available() is false and every caller keeps its own tiles.
//
// Determinism: a multi-threaded OpenBLAS sgemm gives bits that depend on its thread count, so the
// operators call it single-threaded on fixed tiles of their own (sizes from the problem only),
// their threads running tiles side by side: the same bits for 1, 2 or N threads (tested).
//
// Choice (MLAKIT_LIBRARY_GEMM): "auto" (default) lets an operator take it from its own row
// threshold, "off" never, "on" from a single row (tests use it to run every case through it).
#pragma once

#include <cstddef>

#include "cpu/common/route_switch.hpp"

namespace mlakit::cpu::library_gemm {

using Mode = RouteMode;

bool available();
// "OpenBLAS 0.3.21 (Haswell)", or why it is absent.
const char* description();
Mode mode();
void set_mode(Mode m);  // for tests and benchmarks; MLAKIT_LIBRARY_GEMM sets the start

// Whether a call of `rows` rows of output takes the library GEMM, given the operator's threshold
// for the automatic mode.
bool use_for(std::size_t rows, std::size_t auto_min_rows);

// While one exists, the library's sgemm runs single-threaded (its thread count is process-wide:
// the scope takes a lock, sets one thread and restores the previous count when it ends). The
// operators' tiles call sgemm_nt inside one.
class SingleThreaded {
 public:
  SingleThreaded();
  ~SingleThreaded();
  SingleThreaded(const SingleThreaded&) = delete;
  SingleThreaded& operator=(const SingleThreaded&) = delete;

 private:
  int saved_ = 0;
};

// C[i*ldc + j] = sum_p A[i*lda + p] * B[j*ldb + p] for i < m, j < n (A·Bᵀ, both row-major along the
// reduction, as the simd tiles take them), on the library's current thread count.
void sgemm_nt(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* b,
              std::size_t ldb, float* c, std::size_t ldc);
// The same on `threads` of the library's own threads: the library as a user calls it (the
// benchmarks' bar), not deterministic across thread counts.
void sgemm_nt_threads(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* b,
                      std::size_t ldb, float* c, std::size_t ldc, int threads);

}  // namespace mlakit::cpu::library_gemm
