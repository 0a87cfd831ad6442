// The remap of op 1's selected positions to physical cache rows (docs/lightning_indexer.md), shared bit for bit by
// the reference and cpu back-ends: an integer gather with one answer, so one routine serves both.
// Called only after validation.
#pragma once

#include "mlakit/ops/lightning_indexer.hpp"

namespace mlakit::shared {

void remap_indices_to_rows(const RemapIndicesArgs& args);

}  // namespace mlakit::shared
