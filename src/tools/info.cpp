// `mlakit info`: version, CPU model and features, ISA levels, kernel choices, back-ends, threads.
#include <cstdio>
#include <string>

#include "mlakit/backend.hpp"
#include "mlakit/version.hpp"
#include "tools/commands.hpp"

namespace mlakit::tools {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print version, CPU model and features, ISA levels, kernels, back-ends and threads");
  cmd->callback([] {
    const std::string model = cpu_model();
    std::printf("mlakit %s\n", version());
    std::printf("cpu model        : %s\n", model.empty() ? "(unknown)" : model.c_str());
    std::printf("cpu features     : %s\n", cpu_features().c_str());
    std::printf("isa supported    : %s\n", isa_name(cpu_supported_isa()));
    std::printf("isa cap          : %s (MLAKIT_MAX_ISA)\n", isa_name(max_isa()));
    std::printf("isa in use       : %s\n", isa_name(active_isa()));
    for (const auto& [family, choice] : cpu_kernel_choices())
      std::printf("kernel %-10s: %s\n", family.c_str(), choice.c_str());
    for (Backend b : {Backend::reference, Backend::cpu, Backend::cuda}) {
      std::string why;
      const bool ok = backend_available(b, &why);
      std::printf("backend %-9s: %s%s\n", backend_name(b), ok ? "available" : "unavailable: ", ok ? "" : why.c_str());
    }
    std::printf("threads          : %d (MLAKIT_NUM_THREADS)\n", cpu_threads());
    exit_status() = 0;
  });
}

}  // namespace mlakit::tools
