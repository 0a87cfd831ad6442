// The fused_qkv_paged call a bundle of its golden driver describes, for callers that add to it
// what the driver's call does not (packed weights): the desc from the bundle's params, the views
// into its tensors (its outputs prepared: out.output, out.kv_cache.blocks).
#pragma once

#include "goldens/common/tensor.hpp"
#include "mlakit/ops/fused_qkv_paged.hpp"

namespace mlakit::goldens {

FusedQkvPagedDesc fused_qkv_paged_desc(const Bundle& b);
FusedQkvPagedArgs fused_qkv_paged_args(const Bundle& b);

}  // namespace mlakit::goldens
