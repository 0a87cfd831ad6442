// Op 1 on an engine's own cache layout against mlakit's, in the same process: the DeepGEMM /
// SGLang / vLLM FP8 indexer cache (8448-byte blocks of 64 tokens x 128 codes, then 64 f32 scales),
// read in place through indexer_cache_views, and the same cache as mlakit's contiguous blocks and
// scales. Named engine_layout/lightning_indexer/<case>/<layout>; counters as the operator
// benchmarks (gflops, gbps, pct_peak and pct_f32_peak of this machine's probe, pct_paged_read).
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "bench/op_bench.hpp"
#include "goldens/common/driver.hpp"
#include "goldens/common/engine_allocator.hpp"
#include "mlakit/engine_layouts.hpp"
#include "mlakit/ops/lightning_indexer.hpp"

namespace mlakit::bench {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;

struct LayoutCase {
  const char* name;
  json knobs;
};

const std::vector<LayoutCase>& cases() {
  static const std::vector<LayoutCase> c = {
      {"decode_b32_c32768", {{"seq_lens", std::vector<std::int64_t>(32, 1)}, {"cache_lens", std::vector<std::int64_t>(32, 32767)},
                             {"num_heads", 64}, {"head_dim", 128}, {"top_k", 2048}, {"page_size", 64}, {"spare_blocks", 0}}},
      {"decode_b1_c131072", {{"seq_lens", {1}}, {"cache_lens", {131071}}, {"num_heads", 64}, {"head_dim", 128},
                             {"top_k", 2048}, {"page_size", 64}, {"spare_blocks", 0}}},
  };
  return c;
}

void run_layout(benchmark::State& state, const LayoutCase& c, bool engine) {
  const goldens::OpDriver& driver = *goldens::find_driver("lightning_indexer");
  Bundle b = driver.generate(c.knobs, 1);
  const Tensor& blocks = b.at("k_cache.blocks");
  const Tensor& scales = b.at("k_cache.scales");
  PagedKVCacheView cache = goldens::cache_view(b, "k_cache");
  cache.quant_granularity = b.params["quant_granularity"];
  std::vector<unsigned char, goldens::EngineAllocator<unsigned char>> buf;  // huge pages, as the own tensors
  if (engine) {  // one 8448-byte block per page: codes, then scales
    IndexerCacheLayout l;
    l.num_blocks = blocks.shape()[0];
    l.page_size = blocks.shape()[3];
    l.head_dim = blocks.shape()[5];
    const std::int64_t codes = l.page_size * l.head_dim, block = codes + 4 * l.page_size;
    buf.resize(static_cast<std::size_t>(l.num_blocks * block));
    for (std::int64_t blk = 0; blk < l.num_blocks; ++blk) {
      std::memcpy(buf.data() + blk * block, blocks.bytes() + blk * codes, static_cast<std::size_t>(codes));
      std::memcpy(buf.data() + blk * block + codes, scales.bytes() + blk * l.page_size * 4, static_cast<std::size_t>(4 * l.page_size));
    }
    const Status s = indexer_cache_views(buf.data(), MemorySpace::host, l, &cache);
    if (!s.ok()) {
      state.SkipWithError(s.message.c_str());
      return;
    }
  }
  LightningIndexerDesc d;
  d.num_heads = b.params["num_heads"];
  d.head_dim = b.params["head_dim"];
  d.top_k = b.params["top_k"];
  Tensor out(DType::i32, {b.at("q").shape()[0], d.top_k});
  LightningIndexerArgs a;
  a.q = b.at("q").view();
  a.q_s = b.at("q_s").view();
  a.input_row_offsets = b.at("input_row_offsets").view();
  a.k_cache = cache;
  a.output_indices = out.view();
  const RunOptions options{Backend::cpu};
  time_cpu_call(state, driver, driver.work(b), [&] { return lightning_indexer(d, a, options); });
}

}  // namespace

void register_engine_layout_benchmarks() {
  for (const LayoutCase& c : cases())
    for (bool engine : {false, true})
      benchmark::RegisterBenchmark(
          ("engine_layout/lightning_indexer/" + std::string(c.name) + (engine ? "/deepgemm" : "/mlakit")).c_str(),
          [&c, engine](benchmark::State& st) { run_layout(st, c, engine); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
}

}  // namespace mlakit::bench
