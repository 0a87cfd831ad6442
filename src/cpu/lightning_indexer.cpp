#include "cpu/lightning_indexer.hpp"

#include "reference/lightning_indexer.hpp"

namespace mlakit::cpu {

Status lightning_indexer(const LightningIndexerDesc&, const LightningIndexerArgs&) {
  return Status::error(StatusCode::unsupported, "lightning_indexer", "backend",
                       "lightning_indexer: the cpu back-end has no kernel for this operator yet");
}

Status remap_indices_to_rows(const RemapIndicesArgs& args) {
  reference::remap_indices_to_rows(args);
  return Status::success();
}

}  // namespace mlakit::cpu
