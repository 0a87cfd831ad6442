#include "simd/templates/fp8_decode_gather_impl.hpp"

namespace mlakit::simd {
extern const Fp8DecodeKernels fp8_decode_avx2;
const Fp8DecodeKernels fp8_decode_avx2 = {"avx2", avx2::fp8_to_f32, avx2::fp8_to_bf16, "via f16",
    avx2::fp8_to_f32_lut, avx2::fp8_to_bf16_lut, "vpgatherdd"};
}  // namespace mlakit::simd
