// MSA block indexer: back-end routing and the driver's contract (case table, generator, golden
// names). The math is tested in tests/golden, the validation in tests/validation.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "goldens/common/driver.hpp"
#include "goldens/common/input_error.hpp"
#include "mlakit/ops/msa_block_indexer.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::json;

const goldens::OpDriver& driver() { return *goldens::find_driver("msa_block_indexer"); }

TEST(MsaBlockIndexerRouting, CpuRunsAndAutomaticPicksIt) {
  ASSERT_NE(goldens::find_driver("msa_block_indexer"), nullptr);
  const Bundle in = driver().generate({}, 4);
  Bundle cpu = in, ref = in, automatic = in;
  ASSERT_TRUE(driver().run(cpu, RunOptions{Backend::cpu}).ok());
  ASSERT_TRUE(driver().run(ref, RunOptions{Backend::reference}).ok());
  ASSERT_TRUE(driver().run(automatic, RunOptions{Backend::automatic}).ok());
  for (const auto& c : driver().compare(ref, cpu)) EXPECT_TRUE(c.pass) << goldens::describe(c);
  EXPECT_TRUE(automatic.at("out.out_idxs").same_bytes(cpu.at("out.out_idxs")));
}

TEST(MsaBlockIndexerDriver, CaseTableIsWellFormed) {
  std::set<std::string> names;
  for (const auto& c : driver().cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case " << c.name;
    for (char ch : c.name) EXPECT_TRUE((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_') << c.name;
    EXPECT_FALSE(c.what.empty()) << c.name;
    json merged;
    std::string why;
    EXPECT_TRUE(goldens::merge_knobs(driver().default_knobs(), c.knobs, &merged, &why)) << c.name << ": " << why;
  }
  EXPECT_GE(names.size(), 20u);
  EXPECT_EQ(driver().bench_cases().size(), 16u);
  EXPECT_EQ(driver().bench_cases()[12].name, "prefill_s4096_c28672_h8_fp8");
  EXPECT_EQ(driver().bench_cases()[13].name, "decode_b32_c131072_h8_fp8");
  EXPECT_EQ(driver().bench_cases()[14].name, "prefill_s4096_c28672_h8_k2_reduce");
  EXPECT_EQ(driver().bench_cases()[15].name, "decode_b32_c131072_h8_k2_reduce");
  json merged;
  std::string why;
  for (const auto& c : driver().bench_cases())
    EXPECT_TRUE(goldens::merge_knobs(driver().default_knobs(), c.knobs, &merged, &why)) << c.name << ": " << why;
  EXPECT_TRUE(goldens::merge_knobs(driver().default_knobs(), driver().default_case().knobs, &merged, &why)) << why;
  EXPECT_FALSE(goldens::merge_knobs(driver().default_knobs(), json{{"no_such_knob", 1}}, &merged, &why));
}

TEST(MsaBlockIndexerDriver, GoldenNamesAndParams) {
  const Bundle b = driver().generate({}, 1);
  std::set<std::string> tensors;
  for (const auto& [name, t] : b.tensors) tensors.insert(name);
  EXPECT_EQ(tensors, (std::set<std::string>{"q", "input_row_offsets", "prefix_lens", "k_cache.blocks",
                                            "k_cache.lookup_table", "k_cache.cache_lengths"}));
  std::set<std::string> keys;
  for (auto it = b.params.begin(); it != b.params.end(); ++it) keys.insert(it.key());
  EXPECT_EQ(keys, (std::set<std::string>{"num_index_heads", "idx_head_dim", "block_size", "topk", "init_blocks",
                                         "local_blocks", "scale", "layer_idx", "page_size"}));
  Bundle r = b;
  ASSERT_TRUE(driver().run(r, RunOptions{Backend::reference}).ok());
  EXPECT_EQ(r.output_names(), (std::vector<std::string>{"out.out_idxs"}));
}

TEST(MsaBlockIndexerDriver, GeneratorIsDeterministicAndSeeded) {
  for (const auto& c : driver().cases()) {
    const Bundle a = driver().generate(c.knobs, 2), b = driver().generate(c.knobs, 2), d = driver().generate(c.knobs, 3);
    bool all_same = true, differs = false;
    for (const auto& [name, t] : a.tensors) {
      all_same &= b.at(name).same_bytes(t);
      differs |= !d.at(name).same_bytes(t);
    }
    EXPECT_TRUE(all_same) << c.name;
    EXPECT_TRUE(differs) << c.name;
  }
}

TEST(MsaBlockIndexerDriver, Fp8CachesHoldAll256Codes) {
  int fp8_cases = 0;
  for (const auto& c : driver().cases()) {
    const Bundle b = driver().generate(c.knobs, 1);
    const auto& blocks = b.at("k_cache.blocks");
    if (blocks.dtype() != DType::f8e4m3) continue;
    ++fp8_cases;
    std::set<int> codes;
    for (std::int64_t i = 0; i < blocks.numel(); ++i) codes.insert(blocks.data<std::uint8_t>()[i]);
    EXPECT_EQ(codes.size(), 256u) << c.name;
  }
  EXPECT_GE(fp8_cases, 4);
}

TEST(MsaBlockIndexerDriver, ExactCasesAreExactAndRandomOnesAreNot) {
  for (const auto& c : driver().cases()) {
    json k;
    std::string why;
    ASSERT_TRUE(goldens::merge_knobs(driver().default_knobs(), c.knobs, &k, &why));
    const Bundle b = driver().generate(c.knobs, 1);
    const bool exact = b.tolerance.at("out.out_idxs").contains("exact");
    if (k["data"] == "exact") {
      EXPECT_TRUE(exact) << c.name;
    } else if (b.at("q").numel() > 0) {
      EXPECT_FALSE(exact) << c.name;
    }
  }
}

TEST(MsaBlockIndexerDriver, ExactDataNeedsASmallHeadDimWithFp8) {
  EXPECT_THROW(driver().generate({{"data", "exact"}, {"cache_dtype", "f8e4m3"}, {"idx_head_dim", 128}}, 1),
               goldens::InputError);
  EXPECT_THROW(driver().generate({{"cache_dtype", "f16"}}, 1), goldens::InputError);
  EXPECT_THROW(driver().generate({{"seq_lens", {1, 2}}, {"prefix_lens", {0}}}, 1), goldens::InputError);
}

TEST(MsaBlockIndexerDriver, WorkCountsEveryVisibleKey) {
  // seq [2] after prefix 3, Hi 2, Di 32: keys 4 + 5 per head.
  const Bundle b = driver().generate({{"seq_lens", {2}}, {"prefix_lens", {3}}}, 1);
  const auto w = driver().work(b);
  EXPECT_DOUBLE_EQ(w.flops, 2.0 * 2 * 32 * (4 + 5));
  EXPECT_GT(w.bytes, 0);
}

}  // namespace
}  // namespace mlakit
