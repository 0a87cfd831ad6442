// Op 4 on FlashMLA's FP8 sparse caches (spec 06 §B2 V32, §B3 MODEL1), read in place through
// flashmla_sparse_cache_views, beside the same call on mlakit's own FP8 cache (whole rows, one f32
// scale per row) of the same depth, in the same process. DeepSeek-V3.2 shape: 128 heads, top_k
// 2048, page 64. Named engine_layout/sparse_mla_prefill/<case>/<layout>; counters as the operator
// benchmarks (gflops, gbps, pct_peak and pct_f32_peak of this machine's probe).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bench/op_bench.hpp"
#include "goldens/common/driver.hpp"
#include "goldens/common/engine_allocator.hpp"
#include "mlakit/engine_layouts.hpp"
#include "mlakit/ops/sparse_mla_prefill.hpp"

namespace mlakit::bench {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;

enum class Layout { row_scale, v32, model1 };

struct LayoutCase {
  const char* name;
  std::int64_t T, rows;
};

const LayoutCase kCases[] = {{"t64_c32768", 64, 32768}, {"t256_c131072", 256, 131072}};

json knobs(const LayoutCase& c, Layout l) {
  const std::int64_t qk = l == Layout::model1 ? 512 : 576;
  json k = {{"T", c.T}, {"num_q_heads", 128}, {"qk_depth", qk}, {"v_depth", 512}, {"indices_stride", 2048},
            {"page_size", 64}, {"seq_lens", {c.rows}}, {"topk_lengths", "full"}, {"scale", 1.0 / std::sqrt(192.0)},
            {"cache_dtype", "f8e4m3"}, {"invalid_fraction", 0.0}, {"out_of_range_fraction", 0.0},
            {"duplicate_fraction", 0.0}, {"unowned_fraction", 0.0}, {"lse", true}, {"spare_blocks", 0}};
  if (l == Layout::v32) k.update({{"tail_size", 64}, {"quant_granularity", 128}});
  if (l == Layout::model1) k.update({{"tail_size", 64}, {"quant_granularity", 64}, {"scale_dtype", "e8m0"}});
  return k;
}

// An engine's cache buffer: cache-line aligned, on huge pages as mlakit's own tensors are.
using Buffer = std::vector<unsigned char, goldens::EngineAllocator<unsigned char>>;

// The bundle's split cache packed as FlashMLA lays it out (packed records and blocks).
void pack(const Bundle& b, const FlashMlaCacheLayout& l, Buffer* buf) {
  const bool v32 = l.format == FlashMlaCacheFormat::v32;
  const std::int64_t wq = v32 ? 512 : 448, ns = v32 ? 16 : 7, token = v32 ? 656 : 576;
  const std::int64_t block = v32 ? l.page_size * token : (l.page_size * (token + 8) + 575) / 576 * 576;
  buf->assign(static_cast<std::size_t>(l.num_blocks * block + 64), 0);
  const Tensor& blocks = b.at("kv_cache.blocks");
  const Tensor& scales = b.at("kv_cache.scales");
  const Tensor& tail = b.at("kv_cache.tail");
  for (std::int64_t blk = 0; blk < l.num_blocks; ++blk)
    for (std::int64_t o = 0; o < l.page_size; ++o) {
      const std::int64_t row = blk * l.page_size + o;
      unsigned char* rec = buf->data() + blk * block + o * token;
      std::memcpy(rec, blocks.bytes() + row * wq, static_cast<std::size_t>(wq));
      std::memcpy(v32 ? rec + 512 : buf->data() + blk * block + l.page_size * token + 8 * o, scales.bytes() + row * ns,
                  static_cast<std::size_t>(ns));
      std::memcpy(v32 ? rec + 528 : rec + 448, tail.bytes() + row * 128, 128);
    }
}

// `model1_depth`: qk 512 (448 codes + 64 bf16), else qk 576 (512 + 64); the row-scale baseline is
// the same depth as whole fp8 rows with one f32 scale each.
void run_layout(benchmark::State& state, const LayoutCase& c, Layout layout, bool model1_depth) {
  const goldens::OpDriver& driver = *goldens::find_driver("sparse_mla_prefill");
  json k = knobs(c, model1_depth ? Layout::model1 : Layout::v32);
  if (layout == Layout::row_scale) {
    k.erase("tail_size");
    k.erase("scale_dtype");
    k["quant_granularity"] = 0;
  }
  Bundle b = driver.generate(k, 1);
  PagedKVCacheView cache = goldens::cache_view(b, "kv_cache", b.params["quant_granularity"].get<std::int64_t>());
  Buffer buf;
  if (layout != Layout::row_scale) {
    FlashMlaCacheLayout l;
    l.format = layout == Layout::v32 ? FlashMlaCacheFormat::v32 : FlashMlaCacheFormat::model1;
    l.num_blocks = b.at("kv_cache.blocks").shape()[0];
    l.page_size = b.at("kv_cache.blocks").shape()[3];
    pack(b, l, &buf);
    const Status s = flashmla_sparse_cache_views(buf.data(), MemorySpace::host, l, &cache);
    if (!s.ok()) {
      state.SkipWithError(s.message.c_str());
      return;
    }
  }
  SparseMlaPrefillDesc d;
  d.num_q_heads = b.params["num_q_heads"];
  d.qk_depth = b.params["qk_depth"];
  d.v_depth = b.params["v_depth"];
  d.indices_stride = b.params["indices_stride"];
  d.scale = b.params["scale"].get<float>();
  const std::int64_t T = b.at("q").shape()[0];
  Tensor out(DType::bf16, {T, d.num_q_heads, d.v_depth}), lse(DType::f32, {T, d.num_q_heads});
  SparseMlaPrefillArgs a;
  a.q = b.at("q").view();
  a.kv_cache = cache;
  a.indices = b.at("indices").view();
  a.topk_lengths = b.at("topk_lengths").view();
  a.output = out.view();
  a.lse = lse.view();
  const RunOptions options{Backend::cpu};
  time_cpu_call(state, driver, driver.work(b), [&] { return sparse_mla_prefill(d, a, options); });
}

}  // namespace

void register_flashmla_layout_benchmarks() {
  struct Variant {
    const char* name;
    Layout layout;
    bool model1_depth;
  };
  static const Variant kVariants[] = {{"qk576/fp8_row_scale", Layout::row_scale, false},
                                      {"qk576/flashmla_v32", Layout::v32, false},
                                      {"qk512/fp8_row_scale", Layout::row_scale, true},
                                      {"qk512/flashmla_model1", Layout::model1, true}};
  for (const LayoutCase& c : kCases)
    for (const Variant& v : kVariants)
      benchmark::RegisterBenchmark(("engine_layout/sparse_mla_prefill/" + std::string(c.name) + "/" + v.name).c_str(),
                                   [&c, &v](benchmark::State& st) { run_layout(st, c, v.layout, v.model1_depth); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
}

}  // namespace mlakit::bench
