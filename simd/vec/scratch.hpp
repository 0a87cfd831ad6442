// Caller scratch: kernels accept any pointer and lay their buffers out from the next cache line
// (their scratch_bytes count the up to 63 bytes this skips).
#pragma once

#include <cstdint>

#include "simd/vec/level.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

inline unsigned char* cache_line_start(void* scratch) {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(scratch) + 63) & ~std::uintptr_t(63));
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
