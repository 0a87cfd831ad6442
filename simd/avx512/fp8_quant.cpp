#include "simd/templates/fp8_quant_impl.hpp"

namespace mlakit::simd {
extern const Fp8QuantKernels fp8_quant_avx512;
const Fp8QuantKernels fp8_quant_avx512 = {"avx512", avx512::amax_bf16, avx512::encode_bf16, avx512::encode_div_bf16};
}  // namespace mlakit::simd
