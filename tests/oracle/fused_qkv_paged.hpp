// Second formulation of fused_qkv_paged for the oracle check: the whole weight is first
// dequantized into a dense f64 [N, K] matrix, then multiplied, then scattered.
#pragma once

#include "goldens/common/tensor.hpp"

namespace mlakit::testing {

// Fills out.output and out.kv_cache.blocks of a fused_qkv_paged bundle (inputs and params only).
void fused_qkv_paged_oracle(goldens::Bundle& b);

// Round-to-nearest-even of v to a binary format with `precision` significant bits, subnormal
// spacing 2^min_exp and largest finite value max_finite (inf beyond). Exposed for its unit test.
double round_to_format(double v, int precision, int min_exp, double max_finite);

}  // namespace mlakit::testing
