#include "harness/common/driver.hpp"

#include <algorithm>

namespace mlakit::harness {
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

bool merge_knobs(const json& defaults, const json& overrides, json* merged, std::string* why) {
  *merged = defaults;
  for (auto it = overrides.begin(); it != overrides.end(); ++it) {
    if (!defaults.contains(it.key())) {
      if (why) *why = "unknown knob '" + it.key() + "'";
      return false;
    }
    (*merged)[it.key()] = it.value();
  }
  return true;
}

}  // namespace mlakit::harness
