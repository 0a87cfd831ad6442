// Each operator's validation on host views, without routing or computing: the checks its entry
// point runs first. The golden-file tools call them to validate a file's inputs before comparing
// someone else's outputs against it; each entry point calls its own.
#pragma once

#include "mlakit/ops/fused_qkv_paged.hpp"
#include "mlakit/ops/lightning_indexer.hpp"
#include "mlakit/ops/mla_prefill_fp8.hpp"
#include "mlakit/ops/msa_block_indexer.hpp"
#include "mlakit/ops/sparse_mla_prefill.hpp"
#include "core/common/validate.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit::core {

// *space receives where the call's tensors live (all in one memory space, or an error). `checks`
// says whether the batch metadata's content is read (plan and one-shot calls) or not (run).
Status validate_lightning_indexer(const LightningIndexerDesc& d, const LightningIndexerArgs& a, MemorySpace* space,
                              Checks checks = {});
Status validate_msa_block_indexer(const MsaBlockIndexerDesc& d, const MsaBlockIndexerArgs& a, MemorySpace* space,
                              Checks checks = {});
Status validate_mla_prefill_fp8(const MlaPrefillFp8Desc& d, const MlaPrefillFp8Args& a, MemorySpace* space,
                              Checks checks = {});
Status validate_sparse_mla_prefill(const SparseMlaPrefillDesc& d, const SparseMlaPrefillArgs& a, MemorySpace* space,
                              Checks checks = {});
Status validate_remap_indices(const RemapIndicesArgs& a, MemorySpace* space, Checks checks = {});
Status validate_fused_qkv_paged(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, MemorySpace* space,
                              Checks checks = {});

}  // namespace mlakit::core
