#include "goldens/common/driver.hpp"

#include "goldens/common/params.hpp"

#include <algorithm>

namespace mlakit::goldens {
namespace {
std::vector<const OpDriver*>& registry() {
  static std::vector<const OpDriver*> drivers;
  return drivers;
}
}  // namespace

bool register_driver(const OpDriver* driver) {
  auto& r = registry();
  r.push_back(driver);
  // A fixed order (the spec's operator numbering) regardless of static-initialization order.
  static const char* const kOrder[] = {"lightning_indexer", "msa_block_indexer", "mla_prefill_fp8",
                                       "sparse_mla_prefill", "fused_qkv_paged"};
  auto rank = [](const OpDriver* d) {
    for (int i = 0; i < 5; ++i)
      if (std::string_view(d->name()) == kOrder[i]) return i;
    return 5;
  };
  std::stable_sort(r.begin(), r.end(), [&](const OpDriver* a, const OpDriver* b) { return rank(a) < rank(b); });
  return true;
}

const std::vector<const OpDriver*>& all_drivers() { return registry(); }

const OpDriver* find_driver(std::string_view name) {
  for (const OpDriver* d : registry())
    if (name == d->name()) return d;
  return nullptr;
}

namespace {

// Whether v has the JSON kind of the default d: integers for integers, any number for a real or a
// null ("derived"), the same kind otherwise, and for a list every element of the kind of the default's first.
bool same_kind(const json& d, const json& v) {
  if (d.is_null()) return v.is_null() || v.is_number();  // null: "derive it", else a number
  if (d.is_number_integer()) return v.is_number_integer();
  if (d.is_number()) return v.is_number();
  if (d.is_array()) {
    if (!v.is_array()) return false;
    if (d.empty()) return true;
    for (const json& e : v)
      if (!same_kind(d.front(), e)) return false;
    return true;
  }
  return d.type() == v.type();
}

}  // namespace

bool merge_knobs(const json& defaults, const json& overrides, json* merged, std::string* why) {
  *merged = defaults;
  if (overrides.is_null()) return true;  // json{}: no overrides
  if (!overrides.is_object()) {
    if (why) *why = "knobs must be a JSON object";
    return false;
  }
  for (auto it = overrides.begin(); it != overrides.end(); ++it) {
    if (!defaults.contains(it.key())) {
      if (why) *why = "unknown knob '" + it.key() + "'";
      return false;
    }
    const json& d = defaults.at(it.key());
    if (!same_kind(d, it.value())) {
      if (why) *why = "knob " + it.key() + "=" + shown_value(it.value()) + " (expected a value like the default, " +
                      shown_value(d) + ")";
      return false;
    }
    (*merged)[it.key()] = it.value();
  }
  return true;
}

}  // namespace mlakit::goldens
