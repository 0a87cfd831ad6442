#include "goldens/common/golden_check.hpp"

#include <string>

#include "goldens/common/device_staging.hpp"

namespace mlakit::goldens {
namespace {

std::string describe(const Tensor& t) { return std::string(dtype_name(t.dtype())) + " " + shape_text(t.shape()); }

// `file` must hold exactly the out.* tensors of `made`, each with its dtype and shape.
void same_outputs(const std::string& op, const Bundle& made, const Bundle& file, const std::string& label) {
  for (const std::string& name : made.output_names()) {
    if (!file.has(name))
      throw InputError(op + ": " + label + " has no tensor " + name + " (expected " + describe(made.at(name)) +
                       ", an output of this call)");
    if (file.at(name).dtype() != made.at(name).dtype() || file.at(name).shape() != made.at(name).shape())
      throw InputError(op + ": " + label + "'s " + name + " is " + describe(file.at(name)) + " (expected " +
                       describe(made.at(name)) + ", what the operator writes for these inputs)");
  }
  for (const std::string& name : file.output_names())
    if (!made.has(name))
      throw InputError(op + ": " + label + " holds " + name + " (not an output of this call)");
}

}  // namespace

void run_golden(const OpDriver& d, Bundle& b, const RunOptions& options) {
  const Status s = run_driver(d, b, options);  // prepare_outputs checks the file before it drops out.*
  if (!s.ok()) throw InputError(s.message);
}

std::vector<Comparison> check_golden(const OpDriver& d, const Bundle& expected, const Bundle* theirs,
                                     const RunOptions& options) {
  d.check_inputs(expected);
  Bundle candidate = expected;
  candidate.remove_outputs();
  if (theirs == nullptr) {
    run_golden(d, candidate, options);
    same_outputs(d.name(), candidate, expected, "the golden file");
    return d.compare(expected, candidate);
  }
  d.prepare_outputs(candidate);
  const Status s = d.validate(candidate);
  if (!s.ok()) throw InputError(s.message);
  same_outputs(d.name(), candidate, expected, "the golden file");
  Bundle outputs;
  for (const std::string& name : theirs->output_names()) outputs.tensors[name] = theirs->at(name);
  same_outputs(d.name(), candidate, outputs, "the candidate file");
  for (const auto& [name, t] : outputs.tensors) candidate.tensors[name] = t;
  return d.compare(expected, candidate);
}

}  // namespace mlakit::goldens
