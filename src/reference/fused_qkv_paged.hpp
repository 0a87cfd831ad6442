// Reference back-end of fused_qkv_paged: exact weight decode, f64 accumulation, one rounding.
#pragma once

#include "mlakit/ops/fused_qkv_paged.hpp"

namespace mlakit::reference {

// Assumes a validated call.
void fused_qkv_paged(const FusedQkvPagedDesc& desc, const FusedQkvPagedArgs& args);

}  // namespace mlakit::reference
