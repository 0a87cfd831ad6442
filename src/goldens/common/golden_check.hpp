// The paths a golden file takes through the drivers, shared by `mlakit run` / `mlakit check`, the
// whole-file fuzzer and the tests: check_inputs → prepare_outputs → run (or the library's
// validation, when someone else's outputs are compared), and a comparison only of outputs with
// the dtypes and shapes the operator writes for the file's inputs. Whatever a file says, the
// outcome is a result or an InputError naming the operator, the key or tensor, the value and what
// was expected.
#pragma once

#include <vector>

#include "goldens/common/compare.hpp"
#include "goldens/common/driver.hpp"
#include "goldens/common/input_error.hpp"

namespace mlakit::goldens {

// Runs d on b's inputs (its out.* replaced by the call's). A refusal by the library becomes an
// InputError with the library's message.
void run_golden(const OpDriver& d, Bundle& b, const RunOptions& options);

// Compares the golden outputs of `expected` with a fresh run on options.backend (theirs == nullptr),
// or with the out.* tensors of `theirs` (the file a GPU kernel wrote). Throws InputError when the
// golden file's inputs or outputs, or the candidate's outputs, are not what the operator makes.
std::vector<Comparison> check_golden(const OpDriver& d, const Bundle& expected, const Bundle* theirs,
                                     const RunOptions& options);

}  // namespace mlakit::goldens
