// `mlakit golden | run | check`: golden-vector files (docs/golden-format.md).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "core/common/cpu_features.hpp"
#include "goldens/common/device_staging.hpp"
#include "goldens/common/driver.hpp"
#include "goldens/common/golden_check.hpp"
#include "goldens/common/safetensors.hpp"
#include "mlakit/version.hpp"
#include "tools/commands.hpp"

namespace mlakit::tools {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::OpDriver;

const OpDriver& driver_or_throw(const std::string& op) {
  if (const OpDriver* d = goldens::find_driver(op)) return *d;
  std::string known;
  for (const OpDriver* d : goldens::all_drivers()) known += std::string(known.empty() ? "" : ", ") + d->name();
  throw UsageError{"unknown operator '" + op + "' (known: " + known + ")"};
}

Backend backend_or_throw(const std::string& text) {
  Backend b;
  if (!parse_backend(text, &b)) throw UsageError{"unknown back-end '" + text + "' (reference, cpu, cuda, automatic)"};
  return b;
}

std::string producer(Backend b) {
  return std::string("mlakit ") + version() + "; backend " + backend_name(b) + "; isa " + isa_name(active_isa()) +
         "; cpu " + core::cpu_info().model + " [" + core::feature_list(core::cpu_info().features) + "]";
}

// Elapsed-time indicator on stderr while a long call runs, only when stderr is a terminal.
class Progress {
 public:
  explicit Progress(std::string label) : label_(std::move(label)) {
    if (!isatty(fileno(stderr))) return;
    thread_ = std::thread([this] {
      static const char kSpin[] = "|/-\\";
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; !done_.load(); ++i) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (s > 0.5) std::fprintf(stderr, "\r%s %c %.1f s", label_.c_str(), kSpin[i % 4], s);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      std::fprintf(stderr, "\r\033[K");
    });
  }
  ~Progress() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::string label_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

void run_or_throw(const OpDriver& d, Bundle& b, Backend be) {
  Progress progress(std::string("running ") + d.name() + " on " + backend_name(be));
  goldens::run_golden(d, b, RunOptions{be});  // cuda: staged in device memory
}

void write_or_throw(const std::string& path, const Bundle& b) {
  const Status s = goldens::write_safetensors(path, b);
  if (!s.ok()) throw UsageError{s.message};
}

Bundle read_or_throw(const std::string& path) {
  Bundle b;
  const Status s = goldens::read_safetensors(path, &b);
  if (!s.ok()) throw UsageError{s.message};
  if (b.op.empty()) throw UsageError{path + ": no 'op' in __metadata__ (which operator made it?)"};
  return b;
}

// "key=value": value parsed as JSON when it is JSON (numbers, arrays, true), else a string.
json parse_sets(const std::vector<std::string>& sets) {
  json out = json::object();
  for (const auto& s : sets) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) throw UsageError{"--set '" + s + "' is not key=value"};
    const std::string key = s.substr(0, eq), value = s.substr(eq + 1);
    json v = json::parse(value, nullptr, false);
    out[key] = v.is_discarded() ? json(value) : v;
  }
  return out;
}

int print_comparisons(const std::vector<goldens::Comparison>& cmp) {
  bool pass = true;
  std::printf("%-26s %-10s %12s %12s %10s %10s %s\n", "output", "kind", "max |err|", "max rel", "where", "min cos",
              "verdict");
  for (const auto& c : cmp) {
    pass &= c.pass;
    std::printf("%-26s %-10s %12.4g %12.4g %10lld %10.6f %s\n", c.name.c_str(), c.kind.c_str(), c.max_abs_err,
                c.max_rel_err, static_cast<long long>(c.worst_index), c.min_cosine, c.pass ? "PASS" : "FAIL");
    if (!c.pass) std::printf("  %s\n", c.detail.c_str());
  }
  if (cmp.empty()) {
    std::printf("nothing to compare: the file holds no out.* tensors\n");
    return 1;
  }
  std::printf("%s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}

struct GoldenOptions {
  std::string op, case_name, out;
  std::vector<std::string> sets;
  std::uint64_t seed = 1;
  bool list = false;
};

struct RunFileOptions {
  std::string in, out, backend = "automatic", candidate;
};

}  // namespace

void add_golden_commands(CLI::App& app) {
  static GoldenOptions g;
  auto* golden = app.add_subcommand("golden", "Write one golden file: inputs from a case generator, outputs from the reference");
  golden->add_option("op", g.op, "operator (see --list)");
  golden->add_option("--case", g.case_name, "a golden-matrix case name (see --list)");
  golden->add_option("--set", g.sets, "override a generator knob: key=value (repeatable)");
  golden->add_option("--seed", g.seed, "random seed");
  golden->add_option("--out", g.out, "output .safetensors file");
  golden->add_flag("--list", g.list, "list operators, their cases and knobs");
  golden->callback([] {
    if (g.list) {
      for (const OpDriver* d : goldens::all_drivers()) {
        std::printf("%s\n  knobs: %s\n", d->name(), d->default_knobs().dump().c_str());
        for (const auto& c : d->cases()) std::printf("  %-32s %s\n", c.name.c_str(), c.what.c_str());
        const auto dc = d->default_case();
        std::printf("  %-32s %s\n", dc.name.c_str(), dc.what.c_str());
      }
      exit_status() = 0;
      return;
    }
    if (g.op.empty()) throw UsageError{"golden: name an operator (or --list)"};
    if (g.out.empty()) throw UsageError{"golden: --out FILE is required"};
    const OpDriver& d = driver_or_throw(g.op);
    json knobs = json::object();
    std::string case_name = "custom";
    if (!g.case_name.empty()) {
      bool found = false;
      auto all = d.cases();
      all.push_back(d.default_case());
      for (const auto& c : all) {
        if (c.name == g.case_name) {
          knobs = c.knobs;
          found = true;
        }
      }
      if (!found) throw UsageError{"golden: operator " + g.op + " has no case '" + g.case_name + "' (see --list)"};
      case_name = g.case_name;
    }
    const json sets = parse_sets(g.sets);  // named: items() only refers to it
    for (const auto& [k, v] : sets.items()) knobs[k] = v;
    json merged;
    std::string why;
    if (!goldens::merge_knobs(d.default_knobs(), knobs, &merged, &why)) throw UsageError{"golden: " + why};
    Bundle b = d.generate(merged, g.seed);
    run_or_throw(d, b, Backend::reference);
    b.tolerance = d.tolerance(b);
    b.metadata["case"] = case_name;
    b.metadata["seed"] = std::to_string(g.seed);
    b.metadata["producer"] = producer(Backend::reference);
    write_or_throw(g.out, b);
    std::printf("wrote %s (%s, case %s, seed %llu)\n", g.out.c_str(), d.name(), case_name.c_str(),
                static_cast<unsigned long long>(g.seed));
    exit_status() = 0;
  });

  static RunFileOptions r;
  auto* run = app.add_subcommand("run", "Run the operator named in a file's metadata on its inputs; write inputs + out.*");
  run->add_option("in", r.in, "input .safetensors file (its out.* tensors are ignored)")->required();
  run->add_option("--out", r.out, "output .safetensors file")->required();
  run->add_option("--backend", r.backend, "reference, cpu, cuda or automatic");
  run->callback([] {
    Bundle b = read_or_throw(r.in);
    const OpDriver& d = driver_or_throw(b.op);
    const Backend be = backend_or_throw(r.backend);
    run_or_throw(d, b, be);
    b.tolerance = d.tolerance(b);
    b.metadata["producer"] = producer(be);
    write_or_throw(r.out, b);
    std::printf("wrote %s (%s on %s)\n", r.out.c_str(), d.name(), backend_name(be));
    exit_status() = 0;
  });

  static RunFileOptions c;
  auto* check = app.add_subcommand("check", "Re-run a golden file (or read a candidate's outputs) and compare");
  check->add_option("file", c.in, "golden .safetensors file")->required();
  check->add_option("--backend", c.backend, "back-end to re-run on: reference, cpu, cuda or automatic");
  check->add_option("--candidate", c.candidate, "compare this file's out.* tensors instead of re-running");
  check->callback([] {
    const Bundle expected = read_or_throw(c.in);
    const OpDriver& d = driver_or_throw(expected.op);
    const Backend be = backend_or_throw(c.backend);
    Bundle theirs;
    if (!c.candidate.empty()) {
      const Status s = goldens::read_safetensors(c.candidate, &theirs);
      if (!s.ok()) throw UsageError{s.message};
    }
    std::vector<goldens::Comparison> cmp;
    {
      Progress progress(std::string("checking ") + d.name() + (c.candidate.empty() ? " on " : " against ") +
                        (c.candidate.empty() ? backend_name(be) : c.candidate.c_str()));
      cmp = goldens::check_golden(d, expected, c.candidate.empty() ? nullptr : &theirs, RunOptions{be});
    }
    exit_status() = print_comparisons(cmp);
  });
}

}  // namespace mlakit::tools
