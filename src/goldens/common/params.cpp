#include "goldens/common/params.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

namespace mlakit::goldens {
namespace {

std::string number_text(double v) {
  char buf[64];
  if (v == 0x1p63) return "9223372036854775807";  // count_param's bound: INT64_MAX
  if (v == std::floor(v) && std::fabs(v) < 1e18) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", v);
  }
  return buf;
}

std::string choices_text(std::string_view choices) {
  std::string out;
  std::size_t start = 0;
  while (start <= choices.size()) {
    const std::size_t bar = choices.find('|', start);
    const std::string_view one = choices.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start);
    if (!out.empty()) out += bar == std::string_view::npos ? " or " : ", ";
    out += "\"" + std::string(one) + "\"";
    if (bar == std::string_view::npos) break;
    start = bar + 1;
  }
  return out;
}

bool is_choice(std::string_view choices, const std::string& v) {
  std::size_t start = 0;
  while (true) {
    const std::size_t bar = choices.find('|', start);
    if (choices.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start) == v) return true;
    if (bar == std::string_view::npos) return false;
    start = bar + 1;
  }
}

std::string expected_text(const ParamSpec& s) {
  switch (s.kind) {
    case ParamKind::integer: return "expected an integer in [" + number_text(s.lo) + ", " + number_text(s.hi) + "]";
    case ParamKind::number: return "expected a number in [" + number_text(s.lo) + ", " + number_text(s.hi) + "]";
    case ParamKind::boolean: return "expected true or false";
    case ParamKind::text: return "expected " + choices_text(s.choices);
  }
  return "";
}

bool fits(const ParamSpec& s, const json& v) {
  switch (s.kind) {
    case ParamKind::integer: {
      if (!v.is_number_integer()) return false;
      // Above INT64_MAX nothing is in range (and the value would not read back as an int64).
      if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) return false;
      const std::int64_t i = v.get<std::int64_t>();
      return static_cast<double>(i) >= s.lo && (s.hi >= 0x1p63 || static_cast<double>(i) <= s.hi);
    }
    case ParamKind::number: {
      if (!v.is_number()) return false;
      const double d = v.get<double>();
      return std::isfinite(d) && d >= s.lo && d <= s.hi;
    }
    case ParamKind::boolean: return v.is_boolean();
    case ParamKind::text: return v.is_string() && is_choice(s.choices, v.get<std::string>());
  }
  return false;
}

std::string key_list(std::span<const ParamSpec> specs) {
  std::string out;
  for (const ParamSpec& s : specs) out += (out.empty() ? "" : ", ") + std::string(s.key);
  return out;
}

}  // namespace

std::string shown_value(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

ParamReader::ParamReader(std::string_view op, const json& params, std::span<const ParamSpec> specs)
    : op_(op), params_(params), specs_(specs) {
  if (!params_.is_object())
    throw InputError(op_ + ": params=" + shown_value(params_) + " (expected a JSON object of the call's parameters)");
  for (auto it = params_.begin(); it != params_.end(); ++it) {
    bool known = false;
    for (const ParamSpec& s : specs_) known |= s.key == it.key();
    if (!known)
      throw InputError(op_ + ": params." + it.key() + "=" + shown_value(it.value()) + " (not a parameter of " + op_ +
                       "; expected keys: " + key_list(specs_) + ")");
  }
  for (const ParamSpec& s : specs_) {
    const auto it = params_.find(s.key);
    if (it == params_.end()) {
      if (s.required) throw InputError(op_ + ": params." + std::string(s.key) + " is missing (" + expected_text(s) + ")");
      continue;
    }
    if (!fits(s, *it))
      throw InputError(op_ + ": params." + std::string(s.key) + "=" + shown_value(*it) + " (" + expected_text(s) + ")");
  }
}

const json* ParamReader::find(std::string_view key, ParamKind kind) const {
  for (const ParamSpec& s : specs_) {
    if (s.key != key) continue;
    if (s.kind != kind) throw std::logic_error(op_ + ": params." + std::string(key) + " read as another kind");
    const auto it = params_.find(key);
    return it == params_.end() ? nullptr : &*it;
  }
  throw std::logic_error(op_ + ": params." + std::string(key) + " is not declared");
}

bool ParamReader::has(std::string_view key) const { return params_.contains(key); }

std::int64_t ParamReader::integer(std::string_view key) const {
  const json* v = find(key, ParamKind::integer);
  if (v == nullptr) require(key, "");
  return v->get<std::int64_t>();  // in range: checked by the constructor
}

std::int64_t ParamReader::integer_or(std::string_view key, std::int64_t fallback) const {
  const json* v = find(key, ParamKind::integer);
  return v == nullptr ? fallback : v->get<std::int64_t>();
}

double ParamReader::number(std::string_view key) const {
  const json* v = find(key, ParamKind::number);
  if (v == nullptr) require(key, "");
  return v->get<double>();
}

bool ParamReader::boolean(std::string_view key) const {
  const json* v = find(key, ParamKind::boolean);
  if (v == nullptr) require(key, "");
  return v->get<bool>();
}

bool ParamReader::boolean_or(std::string_view key, bool fallback) const {
  const json* v = find(key, ParamKind::boolean);
  return v == nullptr ? fallback : v->get<bool>();
}

std::string ParamReader::text(std::string_view key) const {
  const json* v = find(key, ParamKind::text);
  if (v == nullptr) require(key, "");
  return v->get<std::string>();
}

std::string ParamReader::text_or(std::string_view key, std::string fallback) const {
  const json* v = find(key, ParamKind::text);
  return v == nullptr ? fallback : v->get<std::string>();
}

void ParamReader::require(std::string_view key, std::string_view because) const {
  if (params_.contains(key)) return;
  for (const ParamSpec& s : specs_)
    if (s.key == key)
      throw InputError(op_ + ": params." + std::string(key) + " is missing (" + expected_text(s) +
                       (because.empty() ? "" : "; required " + std::string(because)) + ")");
  throw std::logic_error(op_ + ": params." + std::string(key) + " is not declared");
}

void ParamReader::contradiction(std::string_view key, const std::string& why) const {
  const auto it = params_.find(key);
  throw InputError(op_ + ": params." + std::string(key) + "=" + (it == params_.end() ? "(absent)" : shown_value(*it)) +
                   " (" + why + ")");
}

void ParamReader::agrees(std::string_view key, std::int64_t dimension, const std::string& where) const {
  if (!has(key)) return;
  if (integer(key) != dimension)
    contradiction(key, "contradicts " + where + "=" + std::to_string(dimension) + "; expected the same value");
}

ToleranceReader::ToleranceReader(std::string_view op, const json& from_file, json fallback) : op_(op) {
  if (!from_file.is_object())
    throw InputError(op_ + ": tolerance=" + shown_value(from_file) + " (expected a JSON object per output)");
  tol_ = std::move(fallback);
  for (auto it = from_file.begin(); it != from_file.end(); ++it) {
    if (!tol_.contains(it.key()))
      throw InputError(op_ + ": tolerance." + it.key() + "=" + shown_value(it.value()) + " (not an output of " + op_ +
                       " here)");
    if (!it.value().is_object())
      throw InputError(op_ + ": tolerance." + it.key() + "=" + shown_value(it.value()) + " (expected a JSON object)");
    tol_[it.key()] = it.value();
  }
}

bool ToleranceReader::has(std::string_view output) const { return tol_.contains(output); }

const json& ToleranceReader::entry(std::string_view output) const {
  const auto it = tol_.find(output);
  if (it == tol_.end() || !it->is_object())
    throw InputError(op_ + ": tolerance." + std::string(output) + " is missing (expected a JSON object)");
  return *it;
}

const json* ToleranceReader::value(std::string_view output, std::string_view key) const {
  const json* at = &entry(output);
  std::string path(output);
  while (true) {  // a dotted key walks into nested objects: "selection.c"
    const std::size_t dot = key.find('.');
    const std::string_view part = key.substr(0, dot);
    const auto it = at->find(part);
    if (it == at->end()) return nullptr;
    path += "." + std::string(part);
    if (dot == std::string_view::npos) return &*it;
    if (!it->is_object())
      throw InputError(op_ + ": tolerance." + path + "=" + shown_value(*it) + " (expected a JSON object)");
    at = &*it;
    key = key.substr(dot + 1);
  }
}

double ToleranceReader::number(std::string_view output, std::string_view key, double lo, double hi) const {
  const json* v = value(output, key);
  const std::string where = op_ + ": tolerance." + std::string(output) + "." + std::string(key);
  const std::string expected = "expected a number in [" + number_text(lo) + ", " + number_text(hi) + "]";
  if (v == nullptr) throw InputError(where + " is missing (" + expected + ")");
  if (!v->is_number() || !(v->get<double>() >= lo && v->get<double>() <= hi))
    throw InputError(where + "=" + shown_value(*v) + " (" + expected + ")");
  return v->get<double>();
}

double ToleranceReader::number_or(std::string_view output, std::string_view key, double lo, double hi,
                                  double fallback) const {
  return value(output, key) == nullptr ? fallback : number(output, key, lo, hi);
}

bool ToleranceReader::flag(std::string_view output, std::string_view key) const {
  const json* v = value(output, key);
  if (v == nullptr) return false;
  if (!v->is_boolean())
    throw InputError(op_ + ": tolerance." + std::string(output) + "." + std::string(key) + "=" + shown_value(*v) +
                     " (expected true or false)");
  return v->get<bool>();
}

void check_tensors(std::string_view op, const Bundle& b, std::span<const TensorSpec> specs) {
  const std::string o(op);
  for (const auto& [name, t] : b.tensors) {
    const TensorSpec* spec = nullptr;
    for (const TensorSpec& s : specs)
      if (s.name == name) spec = &s;
    if (spec == nullptr) {
      std::string known;
      for (const TensorSpec& s : specs) known += (known.empty() ? "" : ", ") + std::string(s.name);
      throw InputError(o + ": tensor " + shown_value(json(name)) + " is not one of " + o + "'s (expected: " + known + ")");
    }
    if (static_cast<int>(t.shape().size()) != spec->rank)
      throw InputError(o + ": tensor " + name + " has rank " + std::to_string(t.shape().size()) + " (expected rank " +
                       std::to_string(spec->rank) + ")");
  }
  for (const TensorSpec& s : specs)
    if (s.required && !b.has(std::string(s.name)))
      throw InputError(o + ": tensor " + std::string(s.name) + " is missing (a required input of " + o + ")");
}

}  // namespace mlakit::goldens
