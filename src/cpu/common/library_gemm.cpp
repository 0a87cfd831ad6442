#include "cpu/common/library_gemm.hpp"

#include <mutex>
#include <string>

#if MLAKIT_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace mlakit::cpu::library_gemm {
namespace {

RouteSwitch& route() {
  static RouteSwitch r("MLAKIT_LIBRARY_GEMM");
  return r;
}

// Guards OpenBLAS's process-wide thread count while a call depends on it.
[[maybe_unused]] std::mutex& thread_count_lock() {
  static std::mutex m;
  return m;
}

}  // namespace

#if MLAKIT_HAVE_OPENBLAS
bool available() { return true; }

const char* description() {
  static const std::string d = [] {
    std::string s = "OpenBLAS";
    if (const char* cfg = openblas_get_config()) s += std::string(" (") + cfg + ")";
    if (const char* core = openblas_get_corename()) s += std::string(", ") + core;
    return s;
  }();
  return d.c_str();
}

SingleThreaded::SingleThreaded() {
  thread_count_lock().lock();
  saved_ = openblas_get_num_threads();
  if (saved_ != 1) openblas_set_num_threads(1);
}

SingleThreaded::~SingleThreaded() {
  if (saved_ != 1) openblas_set_num_threads(saved_);
  thread_count_lock().unlock();
}

void sgemm_nt(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* b,
              std::size_t ldb, float* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, c, static_cast<int>(ldc));
}

void sgemm_nt_threads(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* b,
                      std::size_t ldb, float* c, std::size_t ldc, int threads) {
  std::lock_guard<std::mutex> hold(thread_count_lock());
  const int saved = openblas_get_num_threads();
  if (saved != threads) openblas_set_num_threads(threads);
  sgemm_nt(m, n, k, a, lda, b, ldb, c, ldc);
  if (saved != threads) openblas_set_num_threads(saved);
}
#else
bool available() { return false; }
const char* description() { return "none (built without OpenBLAS)"; }
SingleThreaded::SingleThreaded() {}
SingleThreaded::~SingleThreaded() {}
void sgemm_nt(std::size_t, std::size_t, std::size_t, const float*, std::size_t, const float*, std::size_t, float*,
              std::size_t) {}
void sgemm_nt_threads(std::size_t, std::size_t, std::size_t, const float*, std::size_t, const float*, std::size_t,
                      float*, std::size_t, int) {}
#endif

Mode mode() { return route().mode(); }
void set_mode(Mode m) { route().set_mode(m); }
bool use_for(std::size_t rows, std::size_t auto_min_rows) { return route().use_for(available(), rows, auto_min_rows); }

}  // namespace mlakit::cpu::library_gemm
