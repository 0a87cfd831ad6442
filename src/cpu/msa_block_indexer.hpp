// cpu back-end of the MSA block indexer.
#pragma once

#include "cpu/common/parallel.hpp"
#include "mlakit/ops/msa_block_indexer.hpp"

namespace mlakit::cpu {

// Expects a validated call; runs every one.
Status msa_block_indexer(const MsaBlockIndexerDesc& desc, const MsaBlockIndexerArgs& args);
// What msa_block_indexer() takes from call_buffer() for this call (a validated host call).
CallBufferSizes msa_block_indexer_call_buffers(const MsaBlockIndexerDesc& desc, const MsaBlockIndexerArgs& args);

}  // namespace mlakit::cpu
