// `mlakit info`: version, CPU, ISA levels, back-ends, threads.
#include <cstdio>
#include <string>

#include <tbb/info.h>

#include "core/common/cpu_features.hpp"
#include "mlakit/backend.hpp"
#include "mlakit/version.hpp"
#include "tools/commands.hpp"

namespace mlakit::tools {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print version, CPU model and features, ISA levels, back-ends and threads");
  cmd->callback([] {
    const auto& cpu = core::cpu_info();
    std::printf("mlakit %s\n", version());
    std::printf("cpu model        : %s\n", cpu.model.empty() ? "(unknown)" : cpu.model.c_str());
    std::printf("cpu features     : %s\n", core::feature_list(cpu.features).c_str());
    std::printf("isa supported    : %s\n", isa_name(cpu_supported_isa()));
    std::printf("isa cap          : %s (MLAKIT_MAX_ISA)\n", isa_name(max_isa()));
    std::printf("isa in use       : %s\n", isa_name(active_isa()));
    for (Backend b : {Backend::reference, Backend::cpu, Backend::cuda}) {
      std::string why;
      const bool ok = backend_available(b, &why);
      std::printf("backend %-9s: %s%s\n", backend_name(b), ok ? "available" : "unavailable: ", ok ? "" : why.c_str());
    }
    std::printf("threads          : %d\n", tbb::info::default_concurrency());
    exit_status() = 0;
  });
}

}  // namespace mlakit::tools
