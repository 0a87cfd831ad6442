// Reference back-end of the MSA block indexer: the oracle of the golden matrix.
#pragma once

#include "mlakit/ops/msa_block_indexer.hpp"

namespace mlakit::reference {

// Expects a validated call. Exact decode of q and K, each key score scale·Σ q·k in f64, block
// maxima in f64, forced values, then a selection scan per (head, row).
void msa_block_indexer(const MsaBlockIndexerDesc& desc, const MsaBlockIndexerArgs& args);

}  // namespace mlakit::reference
