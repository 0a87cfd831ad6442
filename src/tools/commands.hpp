// The mlakit command's sub-commands. Each returns the process exit status:
// 0 success, 1 a check failed, 2 bad arguments or unreadable input.
#pragma once

#include <CLI/CLI.hpp>

namespace mlakit::tools {

void add_info_command(CLI::App& app);
void add_golden_commands(CLI::App& app);  // golden, run, check
int run_default_table(int repeats);       // `mlakit` with no sub-command

// Thrown by a sub-command for a usage problem found after parsing (unknown op, bad --set).
struct UsageError {
  std::string message;
};

}  // namespace mlakit::tools

namespace mlakit::tools {
// Exit status a sub-command leaves for main() (CLI11 callbacks return void).
int& exit_status();
}  // namespace mlakit::tools
