// Reference back-end of op 1 (docs/lightning_indexer.md): scalar, exact, readable. (The remap is shared by the
// reference and cpu back-ends: core/shared/remap_indices.hpp.)
// Called only after validation.
#pragma once

#include "mlakit/ops/lightning_indexer.hpp"

namespace mlakit::reference {

// Scores in f64: each head's dot product is exact (every fp8 product is exact and their sum fits in
// f64's 53 bits for head_dim <= 2^17); the weighted head sum and the k_scale product are rounded to f64
// and never to f32. Selection orders these f64 scores (the oracle's ordering of the golden matrix).
void lightning_indexer(const LightningIndexerDesc& desc, const LightningIndexerArgs& args);

}  // namespace mlakit::reference
