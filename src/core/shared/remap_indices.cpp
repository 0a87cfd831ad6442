#include "core/shared/remap_indices.hpp"

#include <cstdint>

namespace mlakit::shared {

void remap_indices_to_rows(const RemapIndicesArgs& args) {
  const auto* in = args.indices.as<const std::int32_t>();
  const auto* offsets = args.input_row_offsets.as<const std::uint32_t>();
  const auto* lut = args.lookup_table.as<const std::uint32_t>();
  auto* rows = args.rows.as<std::int32_t>();
  const std::int64_t B = args.input_row_offsets.shape[0] - 1;
  const std::int64_t K = args.indices.shape[1];
  const std::int64_t max_pages = args.lookup_table.shape[1];
  const std::int64_t ps = args.page_size;
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t t = offsets[b]; t < offsets[b + 1]; ++t) {
      for (std::int64_t c = 0; c < K; ++c) {
        const std::int64_t v = in[t * K + c];
        rows[t * K + c] = v < 0 ? -1 : static_cast<std::int32_t>(lut[b * max_pages + v / ps] * ps + v % ps);
      }
    }
  }
}

}  // namespace mlakit::shared
