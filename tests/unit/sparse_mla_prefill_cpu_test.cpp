// sparse_mla_prefill, cpu back-end: shapes that span several slot chunks (64 gathered rows, the
// last one partial) and head tiles (up to 128 heads, fewer for short calls), bf16 and fp8 caches,
// at every ISA level this CPU runs: against the reference, bitwise identical for 1, 2 and 4
// threads (which also changes the head tiling of short calls) and under concurrent callers; and
// infinite scores giving what the reference gives.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "goldens/common/driver.hpp"
#include "mlakit/dtype.hpp"
#include "mlakit/ops/sparse_mla_prefill.hpp"
#include "support/amx_tile_subjects.hpp"
#include "support/cpu_level_cases.hpp"

namespace mlakit::testing {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;

const goldens::OpDriver& driver() { return *goldens::find_driver("sparse_mla_prefill"); }

std::vector<BigCase> big_cases() {
  return {
      {"deepseek_bf16_130_heads",  // two head tiles (128 + 2), 200 slots: three full chunks and a partial one
       {{"T", 3}, {"num_q_heads", 130}, {"indices_stride", 200}, {"page_size", 64}, {"seq_lens", {400}},
        {"invalid_fraction", 0.1}, {"sink", true}}},
      {"deepseek_fp8_dups",  // fp8 rows (all 256 codes), duplicates, topk_lengths with zeros
       {{"T", 6}, {"num_q_heads", 20}, {"indices_stride", 300}, {"page_size", 64}, {"seq_lens", {500}},
        {"cache_dtype", "f8e4m3"}, {"duplicate_fraction", 0.2}, {"topk_lengths", "some_zero"}, {"sink", true}}},
      {"general_odd",  // qk 40 / v 24: rows shorter than a vector tile; 33 heads, page 5
       {{"T", 7}, {"num_q_heads", 33}, {"qk_depth", 40}, {"v_depth", 24}, {"indices_stride", 150},
        {"page_size", 5}, {"seq_lens", {300}}, {"invalid_fraction", 0.2}, {"out_of_range_fraction", 0.1}}},
  };
}

Bundle run_cpu(const Bundle& in) { return testing::run_cpu(driver(), in); }

void expect_same_outputs(const Bundle& a, const Bundle& b, const std::string& what) {
  EXPECT_TRUE(a.at("out.output").same_bytes(b.at("out.output"))) << what << ": output";
  ASSERT_EQ(a.has("out.lse"), b.has("out.lse")) << what;
  if (a.has("out.lse")) {
    EXPECT_TRUE(a.at("out.lse").same_bytes(b.at("out.lse"))) << what << ": lse";
  }
}

using SparseMlaCpu = CpuLevelTest;

TEST_P(SparseMlaCpu, MatchesReferenceAndIsThreadCountInvariant) {
  IsaCap cap(GetParam().level);
  expect_reference_match_and_thread_invariance(driver(), driver().generate(GetParam().c.knobs, 7), expect_same_outputs);
}

// Several user threads calling at once, each on its own inputs, each equal to its serial result.
TEST_P(SparseMlaCpu, ConcurrentCallersMatchSerial) {
  IsaCap cap(GetParam().level);
  expect_concurrent_callers_match_serial(driver(), GetParam().c.knobs, expect_same_outputs);
}

// Token 0: q[., ., 0] = -inf against cache rows whose element 0 is positive: every score is -inf,
// which the reference turns into NaN (exp(-inf - (-inf))). Token 1: +inf, every score +inf: NaN
// as well. Token 2 keeps finite scores. The cpu back-end gives the same, row by row.
void expect_infinite_scores_as_the_reference(json knobs) {
  knobs["cache_dtype"] = "bf16";
  Bundle in = driver().generate(knobs, 9);
  Tensor& blocks = in.at("kv_cache.blocks");
  const std::int64_t qk = in.params.at("qk_depth").get<std::int64_t>();
  auto* k = blocks.data<std::uint16_t>();
  for (std::int64_t e = 0; e < blocks.numel(); e += qk) k[e] = f32_to_bf16(1.0f);  // element 0 of every row
  Tensor& q = in.at("q");
  const std::int64_t Hq = in.params.at("num_q_heads").get<std::int64_t>();
  auto* qv = q.data<std::uint16_t>();
  for (std::int64_t h = 0; h < Hq; ++h) {
    qv[(0 * Hq + h) * qk] = f32_to_bf16(-std::numeric_limits<float>::infinity());
    qv[(1 * Hq + h) * qk] = f32_to_bf16(std::numeric_limits<float>::infinity());
  }
  Bundle ref = in;
  ASSERT_TRUE(driver().run(ref, RunOptions{Backend::reference}).ok());
  const Bundle got = run_cpu(in);
  const Tensor& a = ref.at("out.output");
  const Tensor& b = got.at("out.output");
  ASSERT_EQ(a.numel(), b.numel());
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.value(i), y = b.value(i);
    if (std::isnan(x) || std::isnan(y)) {
      ASSERT_TRUE(std::isnan(x) && std::isnan(y)) << "element " << i << ": " << x << " vs " << y;
    }
  }
  for (const auto& c : driver().compare(ref, got)) EXPECT_TRUE(c.pass) << goldens::describe(c);
}

TEST_P(SparseMlaCpu, InfiniteScoresAsTheReference) {
  IsaCap cap(GetParam().level);
  expect_infinite_scores_as_the_reference(GetParam().c.knobs);
}

INSTANTIATE_TEST_SUITE_P(sparse_mla_prefill, SparseMlaCpu, ::testing::ValuesIn(at_every_level(big_cases())),
                         level_case_name);


// The tile GEMM (amx): both products on the tiles, on the real tiles where this CPU has AMX and on
// the emulated ones wherever avx512bf16 runs: the big cases against the reference and bitwise
// identical for 1, 2 and 4 threads, infinite scores as the reference gives them, and every
// golden-matrix case (two seeds) within tolerance.
using SparseMlaTileGemm = TileSubjectTest;

TEST_P(SparseMlaTileGemm, BigCasesMatchReferenceAndAreThreadCountInvariant) {
  GemmTableScope scope(GetParam());
  ASSERT_NE(cpu::gemm_kernels().gemm_tiles, nullptr);
  for (const BigCase& c : big_cases()) {
    SCOPED_TRACE(c.name);
    expect_reference_match_and_thread_invariance(driver(), driver().generate(c.knobs, 17), expect_same_outputs);
  }
}

TEST_P(SparseMlaTileGemm, InfiniteScoresAsTheReference) {
  GemmTableScope scope(GetParam());
  for (const BigCase& c : big_cases()) {
    SCOPED_TRACE(c.name);
    expect_infinite_scores_as_the_reference(c.knobs);
  }
}

TEST_P(SparseMlaTileGemm, EveryGoldenMatrixCaseWithinTolerance) {
  GemmTableScope scope(GetParam());
  expect_golden_matrix_within_tolerance(driver(), GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(sparse_mla_prefill, SparseMlaTileGemm, ::testing::ValuesIn(tile_subjects()), tile_subject_name);

}  // namespace
}  // namespace mlakit::testing
