// cpu back-end of fused_qkv_paged.
#pragma once

#include "mlakit/ops/fused_qkv_paged.hpp"

namespace mlakit::cpu {

// Assumes a validated call; runs every one.
Status fused_qkv_paged(const FusedQkvPagedDesc& desc, const FusedQkvPagedArgs& args);

}  // namespace mlakit::cpu
