// Op 1 on the DeepGEMM / SGLang / vLLM indexer cache layout (spec 06 §B1) through
// indexer_cache_views: the same bits as on mlakit's own contiguous layout, on the reference and the
// cpu back-end at every level, with padded blocks and layers whose spare bytes hold NaN codes; and
// every refused layout named, nothing written.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "goldens/common/driver.hpp"
#include "mlakit/engine_layouts.hpp"
#include "mlakit/ops/lightning_indexer.hpp"
#include "support/matrix.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;

const goldens::OpDriver& driver() { return *goldens::find_driver("lightning_indexer"); }

// The bundle's k_cache copied into one engine buffer of `layout` (spare bytes 0x7F: NaN codes and
// NaN scales, never read).
std::vector<unsigned char> pack(const Bundle& b, const IndexerCacheLayout& l) {
  const Tensor& blocks = b.at("k_cache.blocks");
  const Tensor& scales = b.at("k_cache.scales");
  const std::int64_t codes = l.page_size * l.head_dim;
  const std::int64_t block = l.block_stride_bytes ? l.block_stride_bytes : codes + 4 * l.page_size;
  const std::int64_t layer = l.layer_stride_bytes ? l.layer_stride_bytes : l.num_blocks * block;
  std::vector<unsigned char> buf(static_cast<std::size_t>(layer * (l.num_layers - 1) + l.num_blocks * block + 64), 0x7F);
  for (std::int64_t blk = 0; blk < l.num_blocks; ++blk)
    for (std::int64_t ly = 0; ly < l.num_layers; ++ly)
      for (std::int64_t o = 0; o < l.page_size; ++o) {
        const std::int64_t row = (blk * l.num_layers + ly) * l.page_size + o;  // [nb, 1, L, ps, 1, *]
        unsigned char* base = buf.data() + ly * layer + blk * block;
        std::memcpy(base + o * l.head_dim, blocks.bytes() + row * l.head_dim, static_cast<std::size_t>(l.head_dim));
        std::memcpy(base + codes + 4 * o, scales.bytes() + row * 4, 4);
      }
  return buf;
}

// mlakit's own layout: the bundle's contiguous blocks and scales.
PagedKVCacheView own_cache(const Bundle& b) {
  PagedKVCacheView c = goldens::cache_view(b, "k_cache");
  c.quant_granularity = b.params["quant_granularity"];
  return c;
}

LightningIndexerDesc desc_of(const Bundle& b) {
  LightningIndexerDesc d;
  d.num_heads = b.params["num_heads"];
  d.head_dim = b.params["head_dim"];
  d.top_k = b.params["top_k"];
  d.mask = b.params["mask"] == "none" ? IndexerMask::none : IndexerMask::causal;
  return d;
}

LightningIndexerArgs args_of(Bundle& b, const PagedKVCacheView& cache, Tensor& out) {
  LightningIndexerArgs a;
  a.q = b.at("q").view();
  a.q_s = b.at("q_s").view();
  a.input_row_offsets = b.at("input_row_offsets").view();
  a.k_cache = cache;
  a.layer_idx = static_cast<std::uint32_t>(b.params["layer_idx"].get<std::int64_t>());
  a.output_indices = out.view();
  return a;
}

struct LayoutCase {
  const char* name;
  json knobs;
  std::int64_t block_pad, layer_pad;  // extra bytes per block and per layer
};

const LayoutCase kCases[] = {
    {"dsv32_page64_d128", {{"seq_lens", {40, 3}}, {"cache_lens", {100, 7}}, {"num_heads", 8}, {"head_dim", 128}, {"top_k", 32}, {"page_size", 64}}, 0, 0},
    {"padded_blocks", {{"seq_lens", {9, 5}}, {"cache_lens", {30, 2}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 8}, {"page_size", 16}}, 64, 0},
    {"three_layers_padded", {{"seq_lens", {7}}, {"cache_lens", {20}}, {"num_heads", 4}, {"head_dim", 32}, {"top_k", 6}, {"page_size", 8}, {"num_layers", 3}, {"layer_idx", 2}}, 4, 12},
};

TEST(LightningIndexerEngineLayout, DeepGemmIndexerCacheGivesTheContiguousBits) {
  for (const LayoutCase& c : kCases) {
    for (std::uint64_t seed : testing::kSeeds) {
      Bundle b = driver().generate(c.knobs, seed);
      const Tensor& blocks = b.at("k_cache.blocks");
      IndexerCacheLayout l;
      l.num_blocks = blocks.shape()[0];
      l.num_layers = blocks.shape()[2];
      l.page_size = blocks.shape()[3];
      l.head_dim = blocks.shape()[5];
      l.block_stride_bytes = l.page_size * (l.head_dim + 4) + c.block_pad;
      l.layer_stride_bytes = c.layer_pad ? l.num_blocks * l.block_stride_bytes + c.layer_pad : 0;
      std::vector<unsigned char> buf = pack(b, l);
      const std::vector<unsigned char> untouched = buf;
      PagedKVCacheView cache = own_cache(b);
      ASSERT_TRUE(indexer_cache_views(buf.data(), MemorySpace::host, l, &cache).ok());

      for (int run = 0; run <= static_cast<int>(cpu_supported_isa()) + 1; ++run) {
        // run 0: the reference; then the cpu back-end capped at each level this CPU has.
        const Backend be = run == 0 ? Backend::reference : Backend::cpu;
        testing::IsaCap cap(run == 0 ? cpu_supported_isa() : static_cast<Isa>(run - 1));
        Tensor want(DType::i32, {b.at("q").shape()[0], desc_of(b).top_k});
        Tensor got = want;
        want.poison();
        got.poison();
        LightningIndexerArgs contiguous = args_of(b, own_cache(b), want);
        const Status base = lightning_indexer(desc_of(b), contiguous, RunOptions{be});
        ASSERT_TRUE(base.ok()) << base.message;
        const Status s = lightning_indexer(desc_of(b), args_of(b, cache, got), RunOptions{be});
        ASSERT_TRUE(s.ok()) << c.name << ": " << s.message;
        EXPECT_TRUE(got.same_bytes(want)) << c.name << " seed " << seed << " run " << run;
      }
      EXPECT_EQ(buf, untouched) << "the engine's buffer was written";
    }
  }
}

TEST(LightningIndexerEngineLayout, RefusedLayoutsAreNamedAndWriteNothing) {
  alignas(16) static unsigned char buf[4096];
  struct Bad {
    IndexerCacheLayout l;
    int misalign;
    const char* field;
    const char* value;
  };
  const Bad bad[] = {
      {{4, 8, 32, 8 * 35, 1, 0}, 0, "block_stride_bytes", "=280 (expected 0 or at least page_size·(head_dim + 4) = 288)"},
      {{4, 8, 32, 290, 1, 0}, 0, "block_stride_bytes", "=290 (expected a multiple of 4"},
      {{4, 8, 32, 0, 2, 100}, 0, "layer_stride_bytes", "=100 (expected 0 or at least num_blocks·block_stride = 1152)"},
      {{0, 8, 32, 0, 1, 0}, 0, "num_blocks", "=0"},
      {{4, 8, 32, 0, 1, 0}, 2, "data", "=2 (expected a 4-byte aligned buffer"},
      {{4, 3, 5, 28, 1, 0}, 0, "head_dim", "=5 (page_size·head_dim must be a multiple of 4"},
  };
  for (const Bad& x : bad) {
    PagedKVCacheView v;
    v.quant_granularity = 77;
    const Status s = indexer_cache_views(buf + x.misalign, MemorySpace::host, x.l, &v);
    EXPECT_EQ(s.code, StatusCode::invalid_argument);
    EXPECT_EQ(s.field, x.field) << s.message;
    EXPECT_NE(s.message.find(std::string("indexer_cache_views: ") + x.field + x.value), std::string::npos) << s.message;
    EXPECT_EQ(v.quant_granularity, 77) << "written on a refusal";
    EXPECT_EQ(v.blocks.data, nullptr);
  }
}

}  // namespace
}  // namespace mlakit
