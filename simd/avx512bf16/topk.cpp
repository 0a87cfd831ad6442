#include "simd/templates/topk_impl.hpp"

namespace mlakit::simd {
extern const TopkKernels topk_avx512bf16;
const TopkKernels topk_avx512bf16 = {avx512bf16::kLevelName, avx512bf16::topk_select};
}  // namespace mlakit::simd
