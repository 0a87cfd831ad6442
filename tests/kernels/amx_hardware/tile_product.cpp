// Built with the amx level's flags and namespace (tests/CMakeLists.txt): the HardwareTiles policy
// the amx kernels use, on one product.
#include "kernels/amx_hardware/tile_product.hpp"

#include "simd/vec/amx_tiles.hpp"

namespace mlakit::kernel_tests {

void hardware_tile_product(float* c, const std::uint16_t* a, const std::uint16_t* b) {
  using namespace simd::MLAKIT_SIMD_NS;
  HardwareTiles tiles(&kTileConfig);
  tiles.load<0>(c, kRowBytes);
  tiles.load<4>(a, kRowBytes);
  tiles.load<6>(b, kRowBytes);
  tiles.dp_bf16<0, 4, 6>();
  tiles.store<0>(c, kRowBytes);
}

}  // namespace mlakit::kernel_tests
