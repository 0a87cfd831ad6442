#include "cpu/msa_block_indexer.hpp"

namespace mlakit::cpu {

Status msa_block_indexer(const MsaBlockIndexerDesc&, const MsaBlockIndexerArgs&) {
  return Status::error(StatusCode::unsupported, "msa_block_indexer", "backend",
                       "msa_block_indexer: the cpu back-end has no kernel for this operator yet");
}

}  // namespace mlakit::cpu
