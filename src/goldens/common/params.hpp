// What a golden file may say, checked before anything is read from it: the keys of its `params`
// (each declared once per operator with its JSON type, range and whether it is required), its
// tolerance numbers, and which tensors it holds with which rank. Files come from other people
// (GPU kernel authors' tensors, engines' dumps), so every refusal is an InputError whose message
// names the operator, the key or tensor, the value and what was expected:
//   "fused_qkv_paged: params.q_dim=-5 (expected an integer in [1, 2147483647])"
// No library exception text reaches the user, and no number from a file sizes an allocation
// before it has passed these checks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "goldens/common/input_error.hpp"
#include "goldens/common/tensor.hpp"

namespace mlakit::goldens {

enum class ParamKind { integer, number, boolean, text };

// One key of an operator's params. Ranges are closed; `choices` lists a text key's values,
// separated by '|'. A key that is not required may be absent; every key not declared is refused.
struct ParamSpec {
  std::string_view key;
  ParamKind kind;
  bool required = true;
  double lo = 0, hi = 0;        // integer and number
  std::string_view choices{};   // text
};

// The size limit of integer size parameters: what fits the 32-bit counts GPU kernels index with.
inline constexpr double kMaxSizeParam = 2147483647.0;
// The range of a float parameter (a finite f32).
inline constexpr double kMaxFloatParam = 3.4028234663852886e38;

inline constexpr ParamSpec size_param(std::string_view key, double lo = 1, bool required = true) {
  return {key, ParamKind::integer, required, lo, kMaxSizeParam, {}};
}
// A count the library bounds itself and nothing is sized from (init_blocks: any int64 >= 0).
inline constexpr ParamSpec count_param(std::string_view key) {
  return {key, ParamKind::integer, true, 0, 0x1p63, {}};
}
inline constexpr ParamSpec float_param(std::string_view key, double lo = -kMaxFloatParam, double hi = kMaxFloatParam) {
  return {key, ParamKind::number, true, lo, hi, {}};
}

// Reads a bundle's params against an operator's declared keys. The constructor checks the whole
// object (an object; no unknown key; every required key present; each present key of its kind
// and range) and throws InputError at the first problem, so the accessors cannot fail on a file.
class ParamReader {
 public:
  ParamReader(std::string_view op, const json& params, std::span<const ParamSpec> specs);

  bool has(std::string_view key) const;
  std::int64_t integer(std::string_view key) const;
  std::int64_t integer_or(std::string_view key, std::int64_t fallback) const;
  double number(std::string_view key) const;
  bool boolean(std::string_view key) const;
  bool boolean_or(std::string_view key, bool fallback) const;
  std::string text(std::string_view key) const;
  std::string text_or(std::string_view key, std::string fallback) const;

  // A key this call needs although the operator's table marks it optional (GPTQ keys for a GPTQ
  // weight): refused when absent.
  void require(std::string_view key, std::string_view because) const;
  // A present key whose value contradicts the file's tensors or other keys.
  [[noreturn]] void contradiction(std::string_view key, const std::string& why) const;
  // A size key that restates a tensor dimension must agree with it (when present).
  void agrees(std::string_view key, std::int64_t dimension, const std::string& where) const;

 private:
  const json* find(std::string_view key, ParamKind kind) const;
  std::string op_;
  const json& params_;
  std::span<const ParamSpec> specs_;
};

// A tolerance number of a golden file: tolerance.<output>.<key>, a finite number in [lo, hi]; a
// dotted key ("selection.c") names a nested one. A file without a tolerance for `output` takes
// `fallback`'s; an output the fallback does not name is refused.
class ToleranceReader {
 public:
  ToleranceReader(std::string_view op, const json& from_file, json fallback);
  bool has(std::string_view output) const;  // the entry of `output` (file or fallback)
  double number(std::string_view output, std::string_view key, double lo, double hi) const;
  double number_or(std::string_view output, std::string_view key, double lo, double hi, double fallback) const;
  bool flag(std::string_view output, std::string_view key) const;  // absent: false
  const json& entry(std::string_view output) const;                // an object

 private:
  const json* value(std::string_view output, std::string_view key) const;
  std::string op_;
  json tol_;
};

// The tensors a golden file of an operator may hold. `rank` is checked whenever the tensor is
// present (the drivers read its shape before the library sees it).
struct TensorSpec {
  std::string_view name;
  int rank;
  bool required = true;
};

// Refuses a bundle that lacks a required tensor, holds a declared one with another rank, or
// holds a tensor the operator does not declare (inputs and out.* alike).
void check_tensors(std::string_view op, const Bundle& b, std::span<const TensorSpec> specs);

// JSON for a message: the value dumped, cut to 40 characters.
std::string shown_value(const json& v);

}  // namespace mlakit::goldens
