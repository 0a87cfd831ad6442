// One TDPBF16PS on real tiles, for the test that holds the tile emulation to the hardware.
// ISA-neutral declaration; the definition is built with the amx level's flags (tile_product.cpp)
// and may be called only where that level runs.
#pragma once

#include <cstdint>

namespace mlakit::kernel_tests {

// c (16 x 16 f32, rows of 64 bytes) += a (16 rows x 16 bf16 pairs) . b (16 pair rows x 16
// columns of bf16 pairs), all three dense, as tdpbf16ps tmm0, tmm4, tmm6 with 16 x 64-byte tiles.
void hardware_tile_product(float* c, const std::uint16_t* a, const std::uint16_t* b);

}  // namespace mlakit::kernel_tests
