// `mlakit` with no sub-command: every operator's default case on every back-end present.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "goldens/common/device_staging.hpp"
#include "goldens/common/driver.hpp"
#include "tools/commands.hpp"

namespace mlakit::tools {
namespace {

using goldens::Bundle;
using goldens::OpDriver;

struct Timing {
  Status status;
  double median_s = 0;
  Bundle result;
};

Timing time_runs(const OpDriver& d, const Bundle& inputs, Backend be, int repeats) {
  Timing t;
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    Bundle b = inputs;
    d.prepare_outputs(b);
    // cuda: inputs and outputs are uploaded before the clock starts and the device is waited for
    // before it stops.
    goldens::DeviceStaging staging(b, be == Backend::cuda ? core::device_memory_ops() : nullptr);
    t.status = staging.upload_all();
    if (!t.status.ok()) return t;
    const auto start = std::chrono::steady_clock::now();
    t.status = d.call(b, RunOptions{be});
    if (t.status.ok()) t.status = staging.synchronize();
    const auto stop = std::chrono::steady_clock::now();
    const Status staged = staging.finish();
    if (t.status.ok()) t.status = staged;
    if (!t.status.ok()) return t;
    seconds.push_back(std::chrono::duration<double>(stop - start).count());
    if (r == 0) t.result = std::move(b);
  }
  std::sort(seconds.begin(), seconds.end());
  t.median_s = seconds[seconds.size() / 2];
  return t;
}

std::string shape_label(const goldens::CaseSpec& c) { return c.name; }

}  // namespace

int& exit_status() {
  static int status = 0;
  return status;
}

int run_default_table(int repeats) {
  std::printf("%-20s %-34s %-10s %11s %10s %9s %12s %s\n", "operator", "case", "back-end", "time (ms)", "GFLOP/s",
              "GB/s", "max |err|", "vs reference");
  int failures = 0;
  for (const OpDriver* d : goldens::all_drivers()) {
    const goldens::CaseSpec spec = d->default_case();
    const Bundle inputs = d->generate(spec.knobs, 1);
    const goldens::Work work = d->work(inputs);
    const Timing ref = time_runs(*d, inputs, Backend::reference, 1);
    for (Backend be : {Backend::reference, Backend::cpu, Backend::cuda}) {
      const char* name = backend_name(be);
      std::string why;
      if (!backend_available(be, &why)) {
        std::printf("%-20s %-34s %-10s unavailable: %s\n", d->name(), shape_label(spec).c_str(), name, why.c_str());
        continue;
      }
      const Timing t = be == Backend::reference ? ref : time_runs(*d, inputs, be, repeats);
      if (!t.status.ok()) {
        const bool declined = t.status.code == StatusCode::unsupported;
        std::printf("%-20s %-34s %-10s %s: %s\n", d->name(), shape_label(spec).c_str(), name,
                    declined ? "declined" : "FAILED", t.status.message.c_str());
        if (!declined) ++failures;
        continue;
      }
      double max_err = 0;
      bool pass = true;
      if (ref.status.ok()) {
        for (const auto& c : d->compare(ref.result, t.result)) {
          max_err = std::max(max_err, c.max_abs_err);
          pass &= c.pass;
        }
      }
      if (!pass) ++failures;
      std::printf("%-20s %-34s %-10s %11.3f %10.2f %9.2f %12.3g %s\n", d->name(), shape_label(spec).c_str(), name,
                  t.median_s * 1e3, work.flops / t.median_s * 1e-9, work.bytes / t.median_s * 1e-9, max_err,
                  be == Backend::reference ? "(is the reference)" : pass ? "PASS" : "FAIL");
    }
  }
  if (goldens::all_drivers().empty()) {
    std::printf("(no operators registered)\n");
    return 1;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace mlakit::tools
