// cpu back-end of op 1 (spec 01) and of its companion remap. Called only after validation.
#pragma once

#include "mlakit/ops/lightning_indexer.hpp"

namespace mlakit::cpu {

// No SIMD kernel yet: declines every call with StatusCode::unsupported, before writing anything.
Status lightning_indexer(const LightningIndexerDesc& desc, const LightningIndexerArgs& args);

// A gather: the scalar code the reference back-end uses.
Status remap_indices_to_rows(const RemapIndicesArgs& args);

}  // namespace mlakit::cpu
