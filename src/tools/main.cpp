// mlakit: runs the operators on built-in cases, reports the machine, and reads, writes and
// checks golden-vector files.
#include <cstdio>
#include <exception>
#include <new>

#include <nlohmann/json.hpp>

#include "goldens/common/input_error.hpp"
#include "mlakit/version.hpp"
#include "tools/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"mlakit — DeepSeek/MiniMax attention kernels over a paged KV cache.\n"
               "With no sub-command: runs every operator on a built-in DeepSeek-shaped case on every "
               "back-end present and prints time, throughput and error against the reference."};
  app.set_version_flag("--version", std::string("mlakit ") + mlakit::version());
  int repeats = 3;
  app.add_option("--repeats", repeats, "timed runs per (operator, back-end); the median is reported")
      ->check(CLI::Range(1, 1000));
  mlakit::tools::add_info_command(app);
  mlakit::tools::add_golden_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "mlakit: error: %s (see --help)\n", e.what());
    return 2;
  } catch (const mlakit::tools::UsageError& e) {
    std::fprintf(stderr, "mlakit: error: %s\n", e.message.c_str());
    return 2;
  } catch (const mlakit::goldens::InputError& e) {
    // Names the operator, the key or tensor, the value and what was expected.
    std::fprintf(stderr, "mlakit: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mlakit: error: out of memory (a smaller MLAKIT_MAX_TENSOR_MB refuses such inputs up front)\n");
    return 2;
  } catch (const nlohmann::json::exception&) {
    // Every file and knob value is checked before it is read, so this is a path that was not:
    // say so instead of printing the JSON library's text.
    std::fprintf(stderr, "mlakit: error: a JSON value of an unexpected kind was read unchecked (a bug; please report "
                         "the command and file)\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlakit: error: %s\n", e.what());
    return 2;
  }
  if (app.get_subcommands().empty()) return mlakit::tools::run_default_table(repeats);
  return mlakit::tools::exit_status();
}
