// MSA block indexer, cpu back-end: shapes that span many query tiles and key-range tiles, at every
// ISA level this CPU runs: against the reference (exactly on exact data, structurally on random
// data), bitwise identical for 1, 2 and 4 threads, under concurrent callers, under a workspace
// budget that forces one query tile per chunk, and with a decode call (one token per sequence)
// equal row by row to the prefill call the rows came from.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "goldens/common/driver.hpp"
#include "mlakit/ops/msa_block_indexer.hpp"
#include "support/cpu_level_cases.hpp"

namespace mlakit::testing {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;

const goldens::OpDriver& driver() { return *goldens::find_driver("msa_block_indexer"); }

struct BudgetGuard {
  explicit BudgetGuard(std::size_t bytes) { cpu::set_workspace_budget_bytes(bytes); }
  ~BudgetGuard() { cpu::set_workspace_budget_bytes(0); }
};

// Many query tiles (about 256 rows each) and many key blocks; odd head counts so lane groups cut
// through tokens; a causal cut inside blocks; fp8 and bf16; an empty sequence.
std::vector<BigCase> big_cases() {
  return {
      {"prefill_h8_bf16",
       {{"seq_lens", {300, 0, 37}}, {"prefix_lens", {1000, 9, 5}}, {"num_index_heads", 8}, {"idx_head_dim", 64},
        {"block_size", 16}, {"topk", 8}, {"init_blocks", 1}, {"local_blocks", 2}, {"scale", 0.125}}},
      {"prefill_h3_fp8",
       {{"seq_lens", {190, 70}}, {"prefix_lens", {333, 0}}, {"num_index_heads", 3}, {"idx_head_dim", 40},
        {"block_size", 24}, {"topk", 6}, {"init_blocks", 2}, {"local_blocks", 1}, {"scale", -0.2},
        {"cache_dtype", "f8e4m3"}, {"nan_keys", 5}}},
      {"decode_h8_fp8",
       {{"seq_lens", {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
        {"prefix_lens", {0, 1, 127, 128, 129, 500, 1023, 1024, 2047, 2500, 3000, 4095}}, {"num_index_heads", 8},
        {"idx_head_dim", 128}, {"block_size", 128}, {"topk", 16}, {"init_blocks", 1}, {"local_blocks", 2},
        {"scale", 0.08838834764831845}, {"cache_dtype", "f8e4m3"}}},
      {"decode_h4_bf16",
       {{"seq_lens", {1, 1, 1, 1, 1}}, {"prefix_lens", {5000, 17, 64, 4000, 1}}, {"num_index_heads", 4},
        {"idx_head_dim", 128}, {"block_size", 32}, {"topk", 16}, {"init_blocks", 1}, {"local_blocks", 2},
        {"scale", 0.08838834764831845}}},
      {"prefill_exact",
       {{"seq_lens", {70, 3}}, {"prefix_lens", {200, 40}}, {"num_index_heads", 5}, {"idx_head_dim", 32},
        {"block_size", 8}, {"topk", 7}, {"init_blocks", 1}, {"local_blocks", 1}, {"scale", 0.125}, {"data", "exact"}}},
      // Grouped K heads: several token ranges of Hk tiles each; with reduce_heads the ranges must
      // stay whole in a chunk (the one-tile budget) and each token's heads come from Hk tiles.
      {"prefill_h8_k2_bf16",
       {{"seq_lens", {150, 0, 21}}, {"prefix_lens", {300, 9, 5}}, {"num_index_heads", 8}, {"num_k_heads", 2},
        {"idx_head_dim", 64}, {"block_size", 16}, {"topk", 8}, {"scale", 0.125}}},
      {"prefill_h6_k3_reduce_fp8",
       {{"seq_lens", {160, 45}}, {"prefix_lens", {250, 0}}, {"num_index_heads", 6}, {"num_k_heads", 3},
        {"reduce_heads", true}, {"idx_head_dim", 40}, {"block_size", 24}, {"topk", 6}, {"init_blocks", 2},
        {"local_blocks", 1}, {"scale", -0.2}, {"cache_dtype", "f8e4m3"}, {"nan_keys", 5}}},
      {"decode_h8_reduce_bf16",
       {{"seq_lens", {1, 1, 1, 1, 1}}, {"prefix_lens", {3000, 17, 64, 900, 1}}, {"num_index_heads", 8},
        {"reduce_heads", true}, {"idx_head_dim", 128}, {"block_size", 32}, {"topk", 16}, {"scale", 0.08838834764831845}}},
  };
}


Bundle run_cpu(const Bundle& in) { return testing::run_cpu(driver(), in); }

const Tensor& out(const Bundle& b) { return b.at("out.out_idxs"); }

using MsaCpu = CpuLevelTest;

TEST_P(MsaCpu, MatchesReferenceAndIsThreadCountInvariant) {
  IsaCap cap(GetParam().level);
  expect_reference_match_and_thread_invariance(
      driver(), driver().generate(GetParam().c.knobs, 7),
      [](const Bundle& a, const Bundle& b, const std::string& what) { EXPECT_TRUE(out(a).same_bytes(out(b))) << what; });
}

TEST_P(MsaCpu, TinyWorkspaceBudgetChunksToTheSameResult) {
  IsaCap cap(GetParam().level);
  const Bundle in = driver().generate(GetParam().c.knobs, 8);
  const Bundle whole = run_cpu(in);
  for (std::size_t budget : {std::size_t{1}, std::size_t{300} << 10}) {
    BudgetGuard g(budget);
    const Bundle chunked = run_cpu(in);
    EXPECT_TRUE(out(chunked).same_bytes(out(whole))) << "budget " << budget;
  }
}

// Several user threads calling at once, each on its own inputs (different data, so that shared
// state between calls could not hide behind identical results), each equal to its serial result.
TEST_P(MsaCpu, ConcurrentCallersMatchSerial) {
  IsaCap cap(GetParam().level);
  ThreadsGuard t(2);
  constexpr int kCallers = 4;
  std::vector<Bundle> inputs, serial;
  for (int c = 0; c < kCallers; ++c) {
    inputs.push_back(driver().generate(GetParam().c.knobs, 9 + static_cast<std::uint64_t>(c)));
    serial.push_back(run_cpu(inputs.back()));
  }
  std::vector<Bundle> results;
  for (int c = 0; c < kCallers; ++c)
    for (int rep = 0; rep < 2; ++rep) results.push_back(inputs[static_cast<std::size_t>(c)]);
  std::vector<Status> status(results.size());
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 2; ++rep) {
        const std::size_t i = static_cast<std::size_t>(c * 2 + rep);
        status[i] = driver().run(results[i], RunOptions{Backend::cpu});
      }
    });
  for (auto& th : callers) th.join();
  for (std::size_t i = 0; i < results.size(); ++i) {
    EXPECT_TRUE(status[i].ok()) << status[i].message;
    EXPECT_TRUE(out(results[i]).same_bytes(out(serial[i / 2]))) << "concurrent call " << i;
  }
}

// Every row of a prefill call, rerun as a decode call (one token per sequence, prefix = the
// row's position, the parent sequence's page-table row): the same selection, bit for bit.
TEST_P(MsaCpu, DecodeEqualsPrefillRowByRow) {
  IsaCap cap(GetParam().level);
  const Bundle in = driver().generate(GetParam().c.knobs, 10);
  const Bundle prefill = run_cpu(in);
  const Tensor& offsets = in.at("input_row_offsets");
  const Tensor& prefix = in.at("prefix_lens");
  const Tensor& lut = in.at("k_cache.lookup_table");
  const std::int64_t batch = offsets.numel() - 1, rows = in.at("q").shape()[0], cols = lut.shape()[1];
  Bundle dec = in;
  dec.remove_outputs();
  Tensor& o = dec.add("input_row_offsets", DType::u32, {rows + 1});
  Tensor& p = dec.add("prefix_lens", DType::u32, {rows});
  Tensor& l = dec.add("k_cache.lookup_table", DType::u32, {rows, cols});
  if (dec.has("k_cache.cache_lengths")) dec.add("k_cache.cache_lengths", DType::u32, {rows});
  for (std::int64_t t = 0; t <= rows; ++t) o.data<std::uint32_t>()[t] = static_cast<std::uint32_t>(t);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::uint32_t t = offsets.data<std::uint32_t>()[b]; t < offsets.data<std::uint32_t>()[b + 1]; ++t) {
      p.data<std::uint32_t>()[t] = prefix.data<std::uint32_t>()[b] + (t - offsets.data<std::uint32_t>()[b]);
      for (std::int64_t c = 0; c < cols; ++c) l.data<std::uint32_t>()[t * cols + c] = lut.data<std::uint32_t>()[b * cols + c];
    }
  }
  const Bundle decode = run_cpu(dec);
  ASSERT_EQ(out(decode).shape(), out(prefill).shape());
  const auto* a = out(decode).data<std::int32_t>();
  const auto* b = out(prefill).data<std::int32_t>();
  for (std::int64_t i = 0; i < out(decode).numel(); ++i) ASSERT_EQ(a[i], b[i]) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(msa_block_indexer, MsaCpu, ::testing::ValuesIn(at_every_level(big_cases())), level_case_name);

}  // namespace
}  // namespace mlakit::testing
