// A second formulation of mla_prefill_fp8 (docs/mla_prefill_fp8.md), sharing no code with the reference back-end:
// RoPE as a complex multiplication, RMSNorm as x / rms, the FP8 quantizer re-derived (f64 arithmetic
// rounded to f32, nearest code by search), the weight dequantized to a dense f64 matrix and KV as a
// plain matmul, attention as dense masked score matrices per head and a row softmax.
#pragma once

#include "goldens/common/tensor.hpp"
#include "support/bf16_rounding.hpp"

namespace mlakit::oracle {

// Reads the inputs and params of b and adds out.q, out.kv_cache.blocks and out.output.
void mla_prefill_fp8(goldens::Bundle& b);

// Pieces the tests also check on their own.
using testing::round_to_bf16_bits;  // nearest, ties to even, by neighbour comparison
double fp8_code_value(int code);              // decoded from the field definitions
int nearest_fp8_code(float y);                // RNE among the finite codes; NaN -> 0x7F

}  // namespace mlakit::oracle
