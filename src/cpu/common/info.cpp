// Public queries and controls of the cpu back-end: CPU model and features, kernel choices, threads,
// the calling thread's call buffers.
#include "core/common/cpu_features.hpp"
#include "cpu/common/kernels.hpp"
#include "cpu/common/parallel.hpp"
#include "mlakit/backend.hpp"

namespace mlakit {

std::string cpu_model() { return core::cpu_info().model; }
std::string cpu_features() { return core::feature_list(core::cpu_info().features); }
std::vector<std::pair<std::string, std::string>> cpu_kernel_choices() { return cpu::kernel_choices(); }
int cpu_threads() { return cpu::num_threads(); }
void set_cpu_threads(int n) { cpu::set_num_threads(n); }
void release_cpu_call_buffers() { cpu::release_call_buffers(); }

}  // namespace mlakit
