#include "simd/templates/fp8_quant_impl.hpp"

namespace mlakit::simd {
extern const Fp8QuantKernels fp8_quant_generic;
const Fp8QuantKernels fp8_quant_generic = {"generic", generic::amax_bf16, generic::encode_bf16, generic::encode_div_bf16};
}  // namespace mlakit::simd
