// Calls one operator on its own buffers through the installed headers and library.
#include <cstdint>
#include <cstdio>
#include <vector>

#include <mlakit/mlakit.hpp>

int main() {
  using namespace mlakit;
  // Four rows of one sequence, 2 heads x 4 dims, one page of 8 tokens; no cache prefix.
  const std::int64_t T = 4, H = 2, D = 4, top_k = 3, page = 8;
  std::vector<std::uint8_t> q(T * H * D, 0x38);  // 1.0 in f8e4m3
  std::vector<float> q_s(T * H, 1.0f);
  std::vector<std::uint32_t> offsets = {0, static_cast<std::uint32_t>(T)};
  std::vector<std::uint8_t> blocks(1 * page * D);
  for (std::int64_t j = 0; j < page; ++j)
    for (std::int64_t d = 0; d < D; ++d) blocks[j * D + d] = f32_to_f8e4m3(static_cast<float>(j));
  std::vector<float> scales(page, 1.0f);
  std::vector<std::uint32_t> lut = {0}, lengths = {0};
  std::vector<std::int32_t> out(T * top_k, 7);

  LightningIndexerDesc desc{H, D, top_k, IndexerMask::causal};
  LightningIndexerArgs args;
  args.q = TensorView::contiguous(q.data(), DType::f8e4m3, {T, H, D});
  args.q_s = TensorView::contiguous(q_s.data(), DType::f32, {T, H});
  args.input_row_offsets = TensorView::contiguous(offsets.data(), DType::u32, {2});
  args.k_cache.blocks = TensorView::contiguous(blocks.data(), DType::f8e4m3, {1, 1, 1, page, 1, D});
  args.k_cache.scales = TensorView::contiguous(scales.data(), DType::f32, {1, 1, 1, page, 1, 1});
  args.k_cache.quant_granularity = D;
  args.k_cache.lookup_table = TensorView::contiguous(lut.data(), DType::u32, {1, 1});
  args.k_cache.cache_lengths = TensorView::contiguous(lengths.data(), DType::u32, {1});
  args.output_indices = TensorView::contiguous(out.data(), DType::i32, {T, top_k});
  const Status s = lightning_indexer(desc, args);
  if (!s.ok()) {
    std::printf("error: %s\n", s.message.c_str());
    return 1;
  }
  // Key j scores 2·4·j: the last row sees keys 0..3 and ranks them 3, 2, 1.
  const bool ok = out[3 * top_k + 0] == 3 && out[3 * top_k + 1] == 2 && out[3 * top_k + 2] == 1 &&
                  out[0 * top_k + 0] == 0 && out[0 * top_k + 1] == -1;
  std::printf("consumer: mlakit %s, lightning_indexer %s\n", version(), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
