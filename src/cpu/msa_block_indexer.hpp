// cpu back-end of the MSA block indexer.
#pragma once

#include "mlakit/ops/msa_block_indexer.hpp"

namespace mlakit::cpu {

// Expects a validated call. Returns StatusCode::unsupported (before writing anything) for calls
// it has no kernel for; `automatic` then falls back to the reference back-end.
Status msa_block_indexer(const MsaBlockIndexerDesc& desc, const MsaBlockIndexerArgs& args);

}  // namespace mlakit::cpu
