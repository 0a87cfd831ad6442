// Back-ends, their availability, and the CPU instruction-set level.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mlakit {

enum class Backend { automatic, reference, cpu, cuda };

const char* backend_name(Backend b);
bool parse_backend(const std::string& text, Backend* out);

// Whether the back-end can run here; when not, `why` says why.
bool backend_available(Backend b, std::string* why = nullptr);

// CPU instruction-set levels, lowest first. The level in use is the highest the
// CPU (and OS) supports, capped by MLAKIT_MAX_ISA or set_max_isa().
enum class Isa { generic = 0, avx2, avx512, avx512bf16, amx };

const char* isa_name(Isa i);
bool parse_isa(const std::string& text, Isa* out);
Isa cpu_supported_isa();  // what this CPU can run, uncapped
Isa active_isa();         // what the cpu back-end uses now
// Process-wide cap for tests and tools; the environment variable sets the initial cap.
void set_max_isa(Isa cap);
Isa max_isa();  // the cap now in force

// What the cpu back-end sees and picks here (for tools and logs).
std::string cpu_model();
std::string cpu_features();  // space-separated feature names detected and enabled by the OS
// Each simd kernel family and the level (and tile) chosen for active_isa().
std::vector<std::pair<std::string, std::string>> cpu_kernel_choices();
int cpu_threads();            // threads the cpu back-end uses (MLAKIT_NUM_THREADS or set_cpu_threads)
void set_cpu_threads(int n);  // n <= 0: every hardware thread
// The cpu back-end keeps the buffers a call shares among its tasks (about the workspace budget,
// MLAKIT_WORKSPACE_MB, at most; more for MLA prefill windows of many thousand rows) with the
// calling thread, for its next calls; this frees the calling thread's now (they are freed anyway
// when the thread exits). Its next call allocates afresh.
void release_cpu_call_buffers();

struct RunOptions {
  Backend backend = Backend::automatic;
  void* cuda_stream = nullptr;  // cudaStream_t for the cuda back-end; null = default stream
};

}  // namespace mlakit
