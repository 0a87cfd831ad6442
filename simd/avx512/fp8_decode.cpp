#include "simd/templates/fp8_decode_gather_impl.hpp"

namespace mlakit::simd {
extern const Fp8DecodeKernels fp8_decode_avx512;
const Fp8DecodeKernels fp8_decode_avx512 = {"avx512", avx512::fp8_to_f32, avx512::fp8_to_bf16, "via f16",
    avx512::fp8_to_f32_lut, avx512::fp8_to_bf16_lut, "vpgatherdd"};
}  // namespace mlakit::simd
