#include "simd/templates/fp8_quant_impl.hpp"

namespace mlakit::simd {
extern const Fp8QuantKernels fp8_quant_avx2;
const Fp8QuantKernels fp8_quant_avx2 = {"avx2", avx2::amax_bf16, avx2::encode_bf16, avx2::encode_div_bf16};
}  // namespace mlakit::simd
