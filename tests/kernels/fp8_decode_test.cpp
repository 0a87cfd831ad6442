// fp8 decode kernels at every level: bit-exact against the scalar definition for all 256 codes,
// at sizes below, at and above every vector width, from unaligned sources into unaligned
// destinations, writing nothing past n.
#include <gtest/gtest.h>

#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "kernels/kernel_list.hpp"
#include "mlakit/dtype.hpp"

namespace mlakit::kernel_tests {
namespace {

class Fp8Decode : public ::testing::TestWithParam<Isa> {
 protected:
  const simd::Fp8DecodeKernels& table() {
    const auto* t = cpu::fp8_decode_kernels_at(GetParam());
    EXPECT_NE(t, nullptr);
    return *t;
  }
};

std::vector<std::size_t> sizes() {
  std::vector<std::size_t> s;
  for (std::size_t n = 0; n <= 70; ++n) s.push_back(n);
  for (std::size_t n : {95, 96, 97, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000, 4099}) s.push_back(n);
  return s;
}

// A code stream that contains all 256 codes in every window of 256 and is not a plain ramp.
std::uint8_t code_at(std::size_t i) { return static_cast<std::uint8_t>((i * 167 + 11) & 0xFF); }

using F32Fn = void (*)(const std::uint8_t*, float*, std::size_t);
using Bf16Fn = void (*)(const std::uint8_t*, std::uint16_t*, std::size_t);

void check_f32(F32Fn fn, const char* what) {
  constexpr std::uint32_t kSentinel = 0xDEADBEEFu;
  for (std::size_t n : sizes()) {
    for (std::size_t so = 0; so < 4; ++so) {
      for (std::size_t d_off = 0; d_off < 4; d_off += 3) {
        std::vector<std::uint8_t> src(so + n + 8);
        for (std::size_t i = 0; i < n; ++i) src[so + i] = code_at(i + so);
        std::vector<std::uint32_t> dst(d_off + n + 16, kSentinel);
        fn(src.data() + so, reinterpret_cast<float*>(dst.data() + d_off), n);
        for (std::size_t i = 0; i < d_off; ++i) ASSERT_EQ(dst[i], kSentinel) << what << " wrote before dst, n=" << n;
        for (std::size_t i = 0; i < n; ++i) {
          const std::uint8_t c = src[so + i];
          ASSERT_EQ(dst[d_off + i], f32_to_bits(f8e4m3_to_f32(c)))
              << what << " code 0x" << std::hex << int(c) << std::dec << " n=" << n << " i=" << i << " src+" << so;
        }
        for (std::size_t i = d_off + n; i < dst.size(); ++i)
          ASSERT_EQ(dst[i], kSentinel) << what << " wrote past n=" << n << " (src+" << so << ")";
      }
    }
  }
}

void check_bf16(Bf16Fn fn, const char* what) {
  constexpr std::uint16_t kSentinel = 0xBEEF;
  for (std::size_t n : sizes()) {
    for (std::size_t so = 0; so < 4; ++so) {
      for (std::size_t d_off = 0; d_off < 4; d_off += 1) {
        std::vector<std::uint8_t> src(so + n + 8);
        for (std::size_t i = 0; i < n; ++i) src[so + i] = code_at(i + 3 * so);
        std::vector<std::uint16_t> dst(d_off + n + 40, kSentinel);
        fn(src.data() + so, dst.data() + d_off, n);
        for (std::size_t i = 0; i < d_off; ++i) ASSERT_EQ(dst[i], kSentinel) << what << " wrote before dst, n=" << n;
        for (std::size_t i = 0; i < n; ++i) {
          const std::uint8_t c = src[so + i];
          ASSERT_EQ(dst[d_off + i], f32_to_bf16(f8e4m3_to_f32(c)))
              << what << " code 0x" << std::hex << int(c) << std::dec << " n=" << n << " i=" << i;
        }
        for (std::size_t i = d_off + n; i < dst.size(); ++i)
          ASSERT_EQ(dst[i], kSentinel) << what << " wrote past n=" << n << " (dst+" << d_off << ")";
      }
    }
  }
}

TEST_P(Fp8Decode, ToF32BitExactAllCodes) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  check_f32(table().to_f32, "to_f32");
}

TEST_P(Fp8Decode, ToBf16BitExactAllCodes) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  check_bf16(table().to_bf16, "to_bf16");
}

TEST_P(Fp8Decode, AltMethodBitExactAllCodes) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  check_f32(table().to_f32_alt, "to_f32_alt");
  check_bf16(table().to_bf16_alt, "to_bf16_alt");
}

#if defined(__x86_64__)
// Serving processes often run with denormals flushed (MXCSR DAZ and FTZ, as torch.set_flush_denormal
// sets them). No method may depend on that: the subnormal codes still decode exactly.
TEST_P(Fp8Decode, BitExactWithDenormalsFlushed) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  struct FlushDenormals {
    unsigned saved = _mm_getcsr();
    FlushDenormals() { _mm_setcsr(saved | 0x8040u); }  // FTZ (bit 15) | DAZ (bit 6)
    ~FlushDenormals() { _mm_setcsr(saved); }
  } flush;
  check_f32(table().to_f32, "to_f32 under DAZ/FTZ");
  check_bf16(table().to_bf16, "to_bf16 under DAZ/FTZ");
  check_f32(table().to_f32_alt, "to_f32_alt under DAZ/FTZ");
  check_bf16(table().to_bf16_alt, "to_bf16_alt under DAZ/FTZ");
}
#endif

// The cases two widely used CPU decoders get wrong, spelled out.
TEST_P(Fp8Decode, SubnormalsNegativeZeroAndNan) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const std::uint8_t codes[] = {0x00, 0x80, 0x01, 0x81, 0x07, 0x87, 0x08, 0x7E, 0xFE, 0x7F, 0xFF, 0x38};
  constexpr std::size_t n = sizeof codes;
  float out[n];
  table().to_f32(codes, out, n);
  EXPECT_EQ(bits_of(out[0]), 0x00000000u);
  EXPECT_EQ(bits_of(out[1]), 0x80000000u);  // -0, not +0
  EXPECT_EQ(out[2], 0x1p-9f);               // smallest subnormal, not flushed
  EXPECT_EQ(out[3], -0x1p-9f);
  EXPECT_EQ(out[4], 7 * 0x1p-9f);
  EXPECT_EQ(out[5], -7 * 0x1p-9f);
  EXPECT_EQ(out[6], 0x1p-6f);  // smallest normal
  EXPECT_EQ(out[7], 448.0f);
  EXPECT_EQ(out[8], -448.0f);
  EXPECT_TRUE(out[9] != out[9]);
  EXPECT_TRUE(out[10] != out[10]);
  EXPECT_EQ(out[11], 1.0f);
  // Against the generic level too (same bits).
  float ref[n];
  simd::fp8_decode_generic.to_f32(codes, ref, n);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(bits_of(out[i]), bits_of(ref[i])) << i;
}

INSTANTIATE_TEST_SUITE_P(Levels, Fp8Decode, ::testing::ValuesIn(levels_of("fp8_decode")), level_param_name);

}  // namespace
}  // namespace mlakit::kernel_tests
