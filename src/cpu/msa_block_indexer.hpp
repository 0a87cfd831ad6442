// cpu back-end of the MSA block indexer.
#pragma once

#include "mlakit/ops/msa_block_indexer.hpp"

namespace mlakit::cpu {

// Expects a validated call; runs every one.
Status msa_block_indexer(const MsaBlockIndexerDesc& desc, const MsaBlockIndexerArgs& args);

}  // namespace mlakit::cpu
