#include "simd/templates/fp8_decode_impl.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

void fp8_to_f32_lut(const std::uint8_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) std::memcpy(dst + i, &kFp8Table.f32[src[i]], 4);
}
void fp8_to_bf16_lut(const std::uint8_t* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<std::uint16_t>(kFp8Table.f32[src[i]] >> 16);
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS

namespace mlakit::simd {
extern const Fp8DecodeKernels fp8_decode_generic;
// Without vector ISA flags the table lookup is the faster method (measured: bench/RESULTS.md).
const Fp8DecodeKernels fp8_decode_generic = {"generic",         generic::fp8_to_f32_lut, generic::fp8_to_bf16_lut,
                                             "scalar table",    generic::fp8_to_f32,     generic::fp8_to_bf16,
                                             "via f16"};
}  // namespace mlakit::simd
