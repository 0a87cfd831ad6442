// cuda back-end of op 1 (lightning indexer) and of its remap companion.
#pragma once

#include "core/common/device_launch.hpp"
#include "mlakit/ops/lightning_indexer.hpp"

namespace mlakit::cuda {

// `a`: a validated call with every tensor in device memory. `host`: the same call with
// input_row_offsets and k_cache.cache_lengths readable on the host (the mirrors validation read;
// only their sizes and lengths are used, to size the launch). `launch`: the stream (null =
// default stream). Asynchronous: returns once the kernels are queued.
Status lightning_indexer(const LightningIndexerDesc& desc, const LightningIndexerArgs& a,
                         const LightningIndexerArgs& host, const core::DeviceLaunch& launch);

// `a` validated, in device memory (host mirrors are not needed).
Status remap_indices_to_rows(const RemapIndicesArgs& a, const core::DeviceLaunch& launch);

}  // namespace mlakit::cuda
