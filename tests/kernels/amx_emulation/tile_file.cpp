// The emulated tile state, one per thread for the whole test binary (see emulated_tiles.hpp).
#include "kernels/amx_emulation/emulated_tables.hpp"
#include "kernels/amx_emulation/emulated_tiles.hpp"

namespace mlakit::amx_emulation {

TileFile& thread_tile_file() {
  thread_local TileFile tiles{};
  return tiles;
}

}  // namespace mlakit::amx_emulation

namespace mlakit::simd {

bool amx_emulated_tiles_configured() { return amx_emulation::thread_tile_file().configured; }

}  // namespace mlakit::simd
