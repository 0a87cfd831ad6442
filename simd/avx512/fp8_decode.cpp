#include "simd/common/fp8_decode_impl.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

inline I gather_f32_bits(I code) {
  return {_mm512_i32gather_epi32(code.v, kFp8Table.f32, 4)};
}

void fp8_to_f32_lut(const std::uint8_t* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) fstore(dst + i, floats(gather_f32_bits(iload_u8(src + i))));
  if (i < n) fstore_n(dst + i, floats(gather_f32_bits(iload_u8_n(src + i, n - i))), n - i);
}
void fp8_to_bf16_lut(const std::uint8_t* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) istore_u16(dst + i, shr<16>(gather_f32_bits(iload_u8(src + i))));
  if (i < n) istore_u16_n(dst + i, shr<16>(gather_f32_bits(iload_u8_n(src + i, n - i))), n - i);
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS

namespace mlakit::simd {
extern const Fp8DecodeKernels fp8_decode_avx512;
const Fp8DecodeKernels fp8_decode_avx512 = {"avx512", avx512::fp8_to_f32, avx512::fp8_to_bf16, "rebias",
    avx512::fp8_to_f32_lut, avx512::fp8_to_bf16_lut, "vpgatherdd"};
}  // namespace mlakit::simd
