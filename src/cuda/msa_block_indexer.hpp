// cuda back-end of op 2 (MSA block indexer).
#pragma once

#include "core/common/device_launch.hpp"
#include "mlakit/ops/msa_block_indexer.hpp"

namespace mlakit::cuda {

// `a`: a validated call with every tensor in device memory. `host`: the same call with
// input_row_offsets and prefix_lens readable on the host (used to size the launch). `launch`:
// the stream (null = default stream) and the device error flag. Asynchronous: returns once the kernels are queued.
Status msa_block_indexer(const MsaBlockIndexerDesc& desc, const MsaBlockIndexerArgs& a,
                         const MsaBlockIndexerArgs& host, const core::DeviceLaunch& launch);

}  // namespace mlakit::cuda
