// The cpu back-end of op 1 beyond the golden matrix's small shapes: shapes that span many query
// tiles, key tiles, key splits and sequences; bitwise-identical outputs for 1, 2 and 4 threads,
// for concurrent calls from several user threads, and for workspace budgets that force chunking;
// exact agreement with the reference on exact data spanning the tiles; the benchmark shapes at a
// small scale against the reference (structural check of docs/lightning_indexer.md §6).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "cpu/common/parallel.hpp"
#include "cpu/lightning_indexer.hpp"
#include "goldens/common/driver.hpp"
#include "mlakit/ops/lightning_indexer.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;
namespace detail = cpu::lightning_indexer_detail;

const goldens::OpDriver& driver() {
  const goldens::OpDriver* d = goldens::find_driver("lightning_indexer");
  if (d == nullptr) throw std::runtime_error("lightning_indexer driver is not registered");
  return *d;
}

// Restores the thread count and the workspace budget whatever a test does.
class LightningIndexerCpuDeterminism : public ::testing::Test {
 protected:
  void TearDown() override {
    cpu::set_num_threads(0);
    cpu::set_workspace_budget_bytes(0);
  }
};

Tensor run_cpu(const Bundle& inputs) {
  Bundle b = inputs;
  const Status s = driver().run(b, RunOptions{Backend::cpu});
  EXPECT_TRUE(s.ok()) << s.message;
  return b.at("out.output_indices");
}

Bundle run_reference(const Bundle& inputs) {
  Bundle b = inputs;
  const Status s = driver().run(b, RunOptions{Backend::reference});
  EXPECT_TRUE(s.ok()) << s.message;
  return b;
}

// Prefill: two sequences, the first with more than kKeySplit keys (several key splits, many key
// tiles and query tiles, a partial last query tile), the second short.
json prefill_knobs() {
  return json{{"seq_lens", {37, 11}}, {"cache_lens", {detail::kKeySplit + 400, 300}}, {"num_heads", 64},
              {"head_dim", 128}, {"top_k", 300}, {"page_size", 64}};
}
// Decode: one token per sequence, caches from empty to past a key split, H = 32, page size 128.
json decode_knobs() {
  return json{{"seq_lens", {1, 1, 1, 1, 1, 1, 1, 1, 1}},
              {"cache_lens", {0, 1, 255, 256, 257, 1000, detail::kKeySplit - 1, detail::kKeySplit, detail::kKeySplit + 1500}},
              {"num_heads", 32}, {"head_dim", 128}, {"top_k", 700}, {"page_size", 128}};
}
// Mask none with odd shapes: H = 20 (padded lanes), D = 72, page size 5.
json odd_knobs() {
  return json{{"seq_lens", {19, 0, 9}}, {"cache_lens", {600, 5, 0}}, {"num_heads", 20}, {"head_dim", 72},
              {"top_k", 64}, {"page_size", 5}, {"mask", "none"}};
}

TEST(LightningIndexerCpu, ShapesSpanTheTiles) {
  // The test shapes must actually exercise what the tests below claim.
  EXPECT_GT(detail::kKeySplit + 400 + 37, detail::kKeySplit);
  EXPECT_GT(37, detail::kQueryTile * 4);
  EXPECT_GT(300, detail::kKeyTile);
}

TEST_F(LightningIndexerCpuDeterminism, OutputsAreIdenticalForOneTwoAndFourThreads) {
  for (const json& knobs : {prefill_knobs(), decode_knobs(), odd_knobs()}) {
    const Bundle inputs = driver().generate(knobs, 1);
    cpu::set_num_threads(1);
    const Tensor one = run_cpu(inputs);
    for (int threads : {2, 4}) {
      cpu::set_num_threads(threads);
      EXPECT_TRUE(run_cpu(inputs).same_bytes(one)) << threads << " threads, knobs " << knobs.dump();
    }
    EXPECT_TRUE(run_cpu(inputs).same_bytes(one)) << "a repeated call differs, knobs " << knobs.dump();
  }
}

TEST_F(LightningIndexerCpuDeterminism, ConcurrentCallersGetTheSerialResults) {
  const std::vector<Bundle> inputs = {driver().generate(prefill_knobs(), 2), driver().generate(decode_knobs(), 2),
                                      driver().generate(odd_knobs(), 2)};
  cpu::set_num_threads(2);
  std::vector<Tensor> serial;
  for (const Bundle& b : inputs) serial.push_back(run_cpu(b));
  constexpr int kCallers = 4, kRounds = 2;
  std::vector<std::vector<Tensor>> got(kCallers);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] {
      for (int r = 0; r < kRounds; ++r)
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          const Bundle& b = inputs[(i + static_cast<std::size_t>(c)) % inputs.size()];
          Bundle mine = b;
          if (driver().run(mine, RunOptions{Backend::cpu}).ok()) got[c].push_back(mine.at("out.output_indices"));
        }
    });
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    ASSERT_EQ(got[c].size(), kRounds * inputs.size()) << "caller " << c << " had a failing call";
    for (std::size_t k = 0; k < got[c].size(); ++k) {
      const std::size_t i = (k % inputs.size() + static_cast<std::size_t>(c)) % inputs.size();
      EXPECT_TRUE(got[c][k].same_bytes(serial[i])) << "caller " << c << " call " << k;
    }
  }
}

TEST_F(LightningIndexerCpuDeterminism, SmallWorkspaceBudgetsGiveTheSameOutputs) {
  for (const json& knobs : {prefill_knobs(), decode_knobs(), odd_knobs()}) {
    const Bundle inputs = driver().generate(knobs, 3);
    const Tensor whole = run_cpu(inputs);
    // One row per chunk (a budget below one row still serves it), then chunks that end inside a
    // sequence and inside a query tile.
    for (std::size_t budget : {std::size_t{1}, std::size_t{3 * 4 * (detail::kKeySplit + 400)}, std::size_t{40000}}) {
      cpu::set_workspace_budget_bytes(budget);
      EXPECT_TRUE(run_cpu(inputs).same_bytes(whole)) << "budget " << budget << ", knobs " << knobs.dump();
    }
    cpu::set_workspace_budget_bytes(0);
  }
}

// Exact data across key splits, key tiles and query tiles: every score is exact in f32, so the
// indices must equal the reference's. (With ~4.7k positions the generator's exactness budget allows
// about a dozen heads; 12 = one full vector and a padded one on avx2.)
TEST(LightningIndexerCpu, ExactDataSpanningTilesMatchesTheReferenceExactly) {
  for (const char* mask : {"causal", "none"}) {
    const json knobs = {{"seq_lens", {10, 3}}, {"cache_lens", {detail::kKeySplit + 300, 20}}, {"num_heads", 12},
                        {"head_dim", 128}, {"top_k", 500}, {"page_size", 64}, {"data", "exact"}, {"mask", mask}};
    const Bundle inputs = driver().generate(knobs, 1);
    const Bundle ref = run_reference(inputs);
    Bundle cpu = inputs;
    ASSERT_TRUE(driver().run(cpu, RunOptions{Backend::cpu}).ok());
    EXPECT_TRUE(cpu.at("out.output_indices").same_bytes(ref.at("out.output_indices"))) << mask;
  }
}

// The benchmark shapes of the spec (prefill and decode, H 64 and 32, pages of 64 and 128), with
// sequence and cache lengths and top_k divided by 64, against the reference.
TEST(LightningIndexerCpu, BenchmarkShapesAtSmallScaleMatchTheReference) {
  const auto cases = driver().bench_cases();
  ASSERT_FALSE(cases.empty());
  for (const auto& spec : cases) {
    json knobs = spec.knobs;
    for (const char* key : {"seq_lens", "cache_lens"}) {
      std::vector<std::int64_t> v = knobs.at(key).get<std::vector<std::int64_t>>();
      for (auto& x : v) x = x == 0 ? 0 : std::max<std::int64_t>(1, x / 64);
      knobs[key] = v;
    }
    knobs["top_k"] = knobs.at("top_k").get<std::int64_t>() / 64;
    const Bundle inputs = driver().generate(knobs, 1);
    const Bundle ref = run_reference(inputs);
    Bundle cpu = inputs;
    ASSERT_TRUE(driver().run(cpu, RunOptions{Backend::cpu}).ok()) << spec.name;
    for (const auto& c : driver().compare(ref, cpu)) EXPECT_TRUE(c.pass) << spec.name << ": " << c.detail;
  }
}

// The benchmarks' scores-only mode computes but never writes the output.
TEST(LightningIndexerCpu, ScoresOnlyModeLeavesTheOutputAlone) {
  Bundle b = driver().generate(odd_knobs(), 4);
  Tensor& out = b.add("out.output_indices", DType::i32, {b.at("q").shape()[0], 64});
  out.poison();
  const Tensor before = out;
  LightningIndexerDesc d;
  d.num_heads = 20;
  d.head_dim = 72;
  d.top_k = 64;
  d.mask = IndexerMask::none;
  LightningIndexerArgs a;
  a.q = b.at("q").view();
  a.q_s = b.at("q_s").view();
  a.input_row_offsets = b.at("input_row_offsets").view();
  a.k_cache = goldens::cache_view(b, "k_cache", 72);
  a.output_indices = out.view();
  ASSERT_TRUE(detail::run(d, a, true).ok());
  EXPECT_TRUE(out.same_bytes(before));
  ASSERT_TRUE(detail::run(d, a, false).ok());
  EXPECT_FALSE(out.same_bytes(before));
}

}  // namespace
}  // namespace mlakit
