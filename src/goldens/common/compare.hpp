// Output comparisons shared by the golden matrix, `mlakit check` and the benchmarks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "goldens/common/tensor.hpp"

namespace mlakit::goldens {

struct Comparison {
  std::string name;           // tensor name, e.g. "out.output"
  std::string kind;           // "close", "exact", "bound", "selection", ...
  bool pass = true;
  std::int64_t mismatches = 0;
  std::int64_t worst_index = -1;  // flat index of the worst element
  double max_abs_err = 0;
  double max_rel_err = 0;
  double min_cosine = 1;      // over rows, when rows are compared by cosine
  std::string detail;         // first failure, human readable
};

// Every element: |a - e| <= atol + rtol·|e| (NaN matches NaN, equal infinities match); and, when
// row_len > 0, the cosine similarity of each row of row_len elements is >= min_cosine.
Comparison compare_close(const std::string& name, const Tensor& expected, const Tensor& actual, double atol,
                         double rtol, std::int64_t row_len = 0, double min_cosine = 0);
// Bit-for-bit equality (for floats: same bits; NaN payloads included).
Comparison compare_exact(const std::string& name, const Tensor& expected, const Tensor& actual);
// Per-element bound: |a - e| <= bound[i]; a bound list of another length fails the comparison.
Comparison compare_bound(const std::string& name, const Tensor& expected, const Tensor& actual,
                         const std::vector<double>& bound);

std::string describe(const Comparison& c);

}  // namespace mlakit::goldens
