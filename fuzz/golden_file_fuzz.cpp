// libFuzzer target for the whole golden-file path: container, metadata and tensors, through the
// operator's driver exactly as `mlakit run` and `mlakit check` take them (golden_check.hpp):
// check_inputs → prepare_outputs → the library's validation → a run on the reference back-end →
// the comparison of the file's outputs with the run's.
//
// Every input must end in one of: not a golden file (the reader's Status), a refusal (InputError
// with a one-line message naming the operator or the container), or a run whose outputs keep their
// guard bytes and whose comparison completes. Anything else aborts: another exception, a crash, a
// sanitizer report, a leak, a slow input. Inputs whose call would cost more than kMaxFlops are
// validated but not run, so that a small file cannot ask the f64 reference for minutes of work.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "goldens/common/driver.hpp"
#include "goldens/common/golden_check.hpp"
#include "goldens/common/safetensors.hpp"

namespace {

using namespace mlakit;
using namespace mlakit::goldens;

constexpr double kMaxFlops = 2e7;

[[noreturn]] void die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "golden_file_fuzz: %s: %s\n", what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

void expect_clean(const std::string& op, const InputError& e) {
  const std::string m = e.what();
  if (m.empty() || m.find('\n') != std::string::npos) die("refusal is not one line", m);
  if (m.rfind(op + ": ", 0) != 0 && m.rfind("safetensors", 0) != 0) die("refusal does not name the operator", m);
}

void guards_intact(const Bundle& b) {
  for (const auto& [name, t] : b.tensors)
    if (!t.guard_intact()) die("guard bytes overwritten", name);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Small allocations only: a file may ask for any size and must be refused above the limit.
  setenv("MLAKIT_MAX_TENSOR_MB", "16", 1);
  setenv("MLAKIT_NUM_THREADS", "1", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Bundle file;
  if (!parse_safetensors(data, size, "fuzz-input", &file).ok()) return 0;
  const OpDriver* d = find_driver(file.op);
  if (d == nullptr) return 0;
  const RunOptions reference{Backend::reference};
  try {
    Bundle run = file;
    d->prepare_outputs(run);
    const Status s = d->validate(run);
    if (!s.ok()) {
      if (s.message.rfind(file.op + ": ", 0) != 0) die("library refusal does not name the operator", s.message);
      return 0;
    }
    if (d->work(run).flops > kMaxFlops) return 0;
    run_golden(*d, run, reference);
    guards_intact(run);
    check_golden(*d, file, &run, reference);  // the file's outputs against the run's
    check_golden(*d, run, &file, reference);  // and the other way round
  } catch (const InputError& e) {
    expect_clean(file.op, e);
  } catch (const std::exception& e) {
    die("unexpected exception", e.what());
  }
  return 0;
}
