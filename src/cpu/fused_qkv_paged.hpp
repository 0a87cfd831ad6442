// cpu back-end of fused_qkv_paged.
#pragma once

#include "cpu/common/parallel.hpp"
#include "mlakit/ops/fused_qkv_paged.hpp"

namespace mlakit::cpu {

// Assumes a validated call; runs every one.
Status fused_qkv_paged(const FusedQkvPagedDesc& desc, const FusedQkvPagedArgs& args);
// The call buffers it takes (the library GEMM's f32 operands; none on the own tiles).
CallBufferSizes fused_qkv_paged_call_buffers(const FusedQkvPagedDesc& desc, const FusedQkvPagedArgs& args);

}  // namespace mlakit::cpu
