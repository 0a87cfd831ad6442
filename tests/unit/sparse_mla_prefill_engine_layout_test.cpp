// Op 4 on FlashMLA's FP8 sparse-attention caches (spec 06 §B2 "V32", §B3 "MODEL1") through
// flashmla_sparse_cache_views: the engine buffer is packed here byte by byte as the spec describes
// the records, and op 4 on it gives the bits of the same cache as separate contiguous tensors, on
// the reference and the cpu back-end at every level; spare bytes hold NaN codes and NaN scales that
// no reader may touch. Every refused layout is named, nothing written.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "goldens/common/driver.hpp"
#include "mlakit/engine_layouts.hpp"
#include "mlakit/ops/sparse_mla_prefill.hpp"
#include "support/matrix.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;

const goldens::OpDriver& driver() { return *goldens::find_driver("sparse_mla_prefill"); }

std::int64_t token_stride(const FlashMlaCacheLayout& l) {
  return l.token_stride_bytes ? l.token_stride_bytes : l.format == FlashMlaCacheFormat::v32 ? 656 : 576;
}

std::int64_t block_stride(const FlashMlaCacheLayout& l) {
  if (l.block_stride_bytes) return l.block_stride_bytes;
  const std::int64_t tokens = l.page_size * token_stride(l);
  return l.format == FlashMlaCacheFormat::v32 ? tokens : (tokens + 8 * l.page_size + 575) / 576 * 576;
}

// The bundle's kv_cache (blocks [nb,1,L,ps,1,Wq], scales, tail [.., 64]) as one engine buffer:
//   v32:    token o of block b at b·block + o·token: [512 codes][4 f32 scales][64 bf16]
//   model1: token o at b·block + o·576: [448 codes][64 bf16]; its 7 e8m0 scales at
//           b·block + page_size·576 + 8·o.
std::vector<unsigned char> pack(const Bundle& b, const FlashMlaCacheLayout& l) {
  const Tensor& blocks = b.at("kv_cache.blocks");
  const Tensor& scales = b.at("kv_cache.scales");
  const Tensor& tail = b.at("kv_cache.tail");
  const bool v32 = l.format == FlashMlaCacheFormat::v32;
  const std::int64_t wq = v32 ? 512 : 448, ns = v32 ? 4 : 7, sb = v32 ? 4 : 1;
  const std::int64_t token = token_stride(l), block = block_stride(l);
  const std::int64_t layer = l.layer_stride_bytes ? l.layer_stride_bytes : l.num_blocks * block;
  std::vector<unsigned char> buf(static_cast<std::size_t>(layer * (l.num_layers - 1) + l.num_blocks * block + 64), 0xFF);
  for (std::int64_t blk = 0; blk < l.num_blocks; ++blk)
    for (std::int64_t ly = 0; ly < l.num_layers; ++ly)
      for (std::int64_t o = 0; o < l.page_size; ++o) {
        const std::int64_t row = (blk * l.num_layers + ly) * l.page_size + o;
        unsigned char* rec = buf.data() + ly * layer + blk * block + o * token;
        std::memcpy(rec, blocks.bytes() + row * wq, static_cast<std::size_t>(wq));
        unsigned char* sc = v32 ? rec + 512 : buf.data() + ly * layer + blk * block + l.page_size * 576 + 8 * o;
        std::memcpy(sc, scales.bytes() + row * ns * sb, static_cast<std::size_t>(ns * sb));
        std::memcpy(v32 ? rec + 528 : rec + 448, tail.bytes() + row * 64 * 2, 128);
      }
  return buf;
}

SparseMlaPrefillDesc desc_of(const Bundle& b) {
  SparseMlaPrefillDesc d;
  d.num_q_heads = b.params["num_q_heads"];
  d.qk_depth = b.params["qk_depth"];
  d.v_depth = b.params["v_depth"];
  d.indices_stride = b.params["indices_stride"];
  d.scale = b.params["scale"].get<float>();
  return d;
}

SparseMlaPrefillArgs args_of(Bundle& b, const PagedKVCacheView& cache, Tensor& out, Tensor& lse) {
  SparseMlaPrefillArgs a;
  a.q = b.at("q").view();
  a.kv_cache = cache;
  a.layer_idx = static_cast<std::uint32_t>(b.params["layer_idx"].get<std::int64_t>());
  a.indices = b.at("indices").view();
  if (b.has("topk_lengths")) a.topk_lengths = b.at("topk_lengths").view();
  if (b.has("attn_sink")) a.attn_sink = b.at("attn_sink").view();
  a.output = out.view();
  a.lse = lse.view();
  return a;
}

struct LayoutCase {
  const char* name;
  FlashMlaCacheFormat format;
  json knobs;
  std::int64_t token_pad, block_pad, layer_pad;  // extra bytes per record, block and layer
};

json v32(json extra) {
  json k = {{"cache_dtype", "f8e4m3"}, {"qk_depth", 576}, {"v_depth", 512}, {"tail_size", 64},
            {"quant_granularity", 128}, {"T", 5}, {"num_q_heads", 3}, {"indices_stride", 48}, {"sink", true}};
  if (extra.is_object()) k.update(extra);
  return k;
}

json model1(json extra) {
  json k = {{"cache_dtype", "f8e4m3"}, {"qk_depth", 512}, {"v_depth", 512}, {"tail_size", 64},
            {"quant_granularity", 64}, {"scale_dtype", "e8m0"}, {"T", 5}, {"num_q_heads", 3}, {"indices_stride", 48}};
  if (extra.is_object()) k.update(extra);
  return k;
}

const LayoutCase kCases[] = {
    // FlashMLA's own tests pad each block by one record: (page_size + 1)·656.
    {"v32_flashmla_padding", FlashMlaCacheFormat::v32, v32({}), 0, 656, 0},
    {"v32_padded_records_two_layers", FlashMlaCacheFormat::v32,
     v32({{"page_size", 16}, {"seq_lens", {50, 20}}, {"num_layers", 2}, {"layer_idx", 1}}), 16, 0, 64},
    {"model1_page64", FlashMlaCacheFormat::model1, model1({{"nan_scale", true}}), 0, 0, 0},
    {"model1_padded_blocks_three_layers", FlashMlaCacheFormat::model1,
     model1({{"page_size", 16}, {"seq_lens", {40, 30}}, {"num_layers", 3}, {"layer_idx", 2}}), 0, 576, 0},
};

TEST(SparseMlaPrefillEngineLayout, FlashMlaCachesGiveTheBitsOfSeparateTensors) {
  for (const LayoutCase& c : kCases) {
    for (std::uint64_t seed : testing::kSeeds) {
      Bundle b = driver().generate(c.knobs, seed);
      const Tensor& blocks = b.at("kv_cache.blocks");
      FlashMlaCacheLayout l;
      l.format = c.format;
      l.num_blocks = blocks.shape()[0];
      l.num_layers = blocks.shape()[2];
      l.page_size = blocks.shape()[3];
      l.token_stride_bytes = c.token_pad ? token_stride(l) + c.token_pad : 0;
      l.block_stride_bytes = c.block_pad ? block_stride(l) + c.block_pad : 0;
      l.layer_stride_bytes = c.layer_pad ? l.num_blocks * block_stride(l) + c.layer_pad : 0;
      std::vector<unsigned char> buf = pack(b, l);
      const std::vector<unsigned char> untouched = buf;
      PagedKVCacheView cache = goldens::cache_view(b, "kv_cache");
      const Status made = flashmla_sparse_cache_views(buf.data(), MemorySpace::host, l, &cache);
      ASSERT_TRUE(made.ok()) << made.message;
      EXPECT_EQ(cache.quant_granularity, b.params["quant_granularity"].get<std::int64_t>());

      const std::int64_t T = b.at("q").shape()[0], Hq = b.params["num_q_heads"], vd = b.params["v_depth"];
      for (int run = 0; run <= static_cast<int>(cpu_supported_isa()) + 1; ++run) {
        // run 0: the reference; then the cpu back-end capped at each level this CPU has.
        const Backend be = run == 0 ? Backend::reference : Backend::cpu;
        testing::IsaCap cap(run == 0 ? cpu_supported_isa() : static_cast<Isa>(run - 1));
        Tensor want(DType::bf16, {T, Hq, vd}), want_lse(DType::f32, {T, Hq});
        Tensor got = want, got_lse = want_lse;
        for (Tensor* t : {&want, &want_lse, &got, &got_lse}) t->poison();
        PagedKVCacheView own = goldens::cache_view(b, "kv_cache", b.params["quant_granularity"].get<std::int64_t>());
        const Status base = sparse_mla_prefill(desc_of(b), args_of(b, own, want, want_lse), RunOptions{be});
        ASSERT_TRUE(base.ok()) << base.message;
        const Status s = sparse_mla_prefill(desc_of(b), args_of(b, cache, got, got_lse), RunOptions{be});
        ASSERT_TRUE(s.ok()) << c.name << ": " << s.message;
        EXPECT_TRUE(got.same_bytes(want)) << c.name << " seed " << seed << " run " << run;
        EXPECT_TRUE(got_lse.same_bytes(want_lse)) << c.name << " seed " << seed << " run " << run;
      }
      EXPECT_EQ(buf, untouched) << "the engine's buffer was written";
    }
  }
}

TEST(SparseMlaPrefillEngineLayout, RefusedLayoutsAreNamedAndWriteNothing) {
  alignas(16) static unsigned char buf[4096];
  using F = FlashMlaCacheFormat;
  struct Bad {
    FlashMlaCacheLayout l;
    int misalign;
    const char* field;
    const char* value;
  };
  const Bad bad[] = {
      {{F::v32, 4, 8, 650, 0, 1, 0}, 0, "token_stride_bytes", "=650 (expected 0, or a multiple of 4 of at least 656)"},
      {{F::v32, 4, 8, 658, 0, 1, 0}, 0, "token_stride_bytes", "=658 (expected 0, or a multiple of 4"},
      {{F::model1, 4, 8, 600, 0, 1, 0}, 0, "token_stride_bytes", "=600 (expected 0 or 576"},
      {{F::v32, 4, 8, 0, 8 * 656 - 4, 1, 0}, 0, "block_stride_bytes", "=5244 (expected 0 or at least the block's records, 5248 bytes)"},
      {{F::model1, 4, 8, 0, 8 * 576, 1, 0}, 0, "block_stride_bytes", "=4608 (expected 0 or at least the block's records, 4672 bytes)"},
      {{F::model1, 4, 8, 0, 4674, 1, 0}, 0, "block_stride_bytes", "=4674 (expected a multiple of 4"},
      {{F::v32, 4, 8, 0, 0, 2, 100}, 0, "layer_stride_bytes", "=100 (expected 0 or at least num_blocks·block_stride = 20992)"},
      {{F::v32, 0, 8, 0, 0, 1, 0}, 0, "num_blocks", "=0"},
      {{F::model1, 4, 0, 0, 0, 1, 0}, 0, "page_size", "=0"},
      {{F::v32, 4, 8, 0, 0, 1, 0}, 2, "data", "=2 (expected a 4-byte aligned buffer"},
      {{static_cast<F>(7), 4, 8, 0, 0, 1, 0}, 0, "format", "=7 (expected v32 or model1)"},
  };
  for (const Bad& x : bad) {
    PagedKVCacheView v;
    v.quant_granularity = 77;
    const Status s = flashmla_sparse_cache_views(buf + x.misalign, MemorySpace::host, x.l, &v);
    EXPECT_EQ(s.code, StatusCode::invalid_argument);
    EXPECT_EQ(s.field, x.field) << s.message;
    EXPECT_NE(s.message.find(std::string("flashmla_sparse_cache_views: ") + x.field + x.value), std::string::npos)
        << s.message;
    EXPECT_EQ(v.quant_granularity, 77) << "written on a refusal";
    EXPECT_EQ(v.blocks.data, nullptr);
    EXPECT_EQ(v.tail.data, nullptr);
  }
}

}  // namespace
}  // namespace mlakit
