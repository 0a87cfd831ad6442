// mla_prefill_fp8, cpu back-end: shapes that span several query tiles and key chunks (128), KV row
// tiles (128), odd reductions (latent, nope + rope) and scale groups and, under a small workspace budget, several head groups, at every ISA level this CPU
// runs: against the reference, bitwise identical for 1, 2 and 4 threads and under concurrent
// callers, and the same bits whatever the budget (head groups change nothing but the schedule) and
// whatever calls came before on the thread;
// and steps 1-2 (RoPE, RMSNorm in place) give the reference's bits on every golden case.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cpu/common/bf16_dot.hpp"
#include "cpu/common/parallel.hpp"
#include "goldens/common/driver.hpp"
#include "mlakit/ops/mla_prefill_fp8.hpp"
#include "support/amx_tile_subjects.hpp"
#include "support/cpu_level_cases.hpp"

namespace mlakit::testing {
namespace {

using goldens::Bundle;
using goldens::json;

const goldens::OpDriver& driver() { return *goldens::find_driver("mla_prefill_fp8"); }

std::vector<BigCase> big_cases() {
  return {
      {"deepseek_dims_two_sequences",  // 130 + 70 queries over 200 / 110 keys: partial tiles everywhere
       {{"num_heads", 3}, {"nope", 128}, {"rope", 64}, {"v", 128}, {"latent", 512}, {"bn", 128}, {"bk", 128},
        {"page_size", 64}, {"seq_lens", {130, 70}}, {"cache_lens", {70, 40}}}},
      {"small_dims_chunked",  // cache_offsets inside the cache, latent not a multiple of bk, 7 heads
       {{"num_heads", 7}, {"seq_lens", {90, 3, 0}}, {"cache_lens", {100, 5, 9}}, {"cache_offsets", "chunked"}}},
      {"odd_latent_and_qk",  // latent 81: the last scale group and its last weight pair half empty; qk 23
       {{"num_heads", 2}, {"nope", 15}, {"rope", 8}, {"v", 12}, {"latent", 81}, {"bn", 16}, {"bk", 32},
        {"seq_lens", {70}}, {"cache_lens", {30}}}},
      {"odd_scale_groups",  // bk 5: pairs would straddle groups, so the KV GEMM runs on f32 FMA
       {{"num_heads", 2}, {"latent", 40}, {"bk", 5}, {"bn", 7}, {"seq_lens", {66}}, {"cache_lens", {4}}}},
  };
}

void expect_same_outputs(const Bundle& a, const Bundle& b, const std::string& what) {
  EXPECT_TRUE(a.at("out.output").same_bytes(b.at("out.output"))) << what << ": output";
  EXPECT_TRUE(a.at("out.q").same_bytes(b.at("out.q"))) << what << ": q (rotated in place)";
  EXPECT_TRUE(a.at("out.kv_cache.blocks").same_bytes(b.at("out.kv_cache.blocks"))) << what << ": cache";
}

using MlaPrefillCpu = CpuLevelTest;

TEST_P(MlaPrefillCpu, MatchesReferenceAndIsThreadCountInvariant) {
  IsaCap cap(GetParam().level);
  expect_reference_match_and_thread_invariance(driver(), driver().generate(GetParam().c.knobs, 7), expect_same_outputs);
}

TEST_P(MlaPrefillCpu, ConcurrentCallersMatchSerial) {
  IsaCap cap(GetParam().level);
  expect_concurrent_callers_match_serial(driver(), GetParam().c.knobs, expect_same_outputs);
}

// A budget that fits one head's K and V at a time: heads run group by group, same bits.
TEST_P(MlaPrefillCpu, HeadGroupsUnderASmallBudgetGiveTheSameBits) {
  IsaCap cap(GetParam().level);
  const Bundle in = driver().generate(GetParam().c.knobs, 11);
  const Bundle whole = run_cpu(driver(), in);
  cpu::set_workspace_budget_bytes(1);
  const Bundle grouped = run_cpu(driver(), in);
  cpu::set_workspace_budget_bytes(0);
  expect_same_outputs(grouped, whole, "one head at a time");
}

// The calling thread keeps a call's buffers (K, V, laid-out weights) for its next calls; nothing
// may carry over: a call on other inputs of the same shapes (other weights in the same buffers)
// or of other shapes in between, or a release of the buffers, leaves a repeated call's bits as
// they were.
TEST_P(MlaPrefillCpu, KeptCallBuffersCarryNothingOver) {
  IsaCap cap(GetParam().level);
  const Bundle in = driver().generate(GetParam().c.knobs, 13);
  const Bundle first = run_cpu(driver(), in);
  (void)run_cpu(driver(), driver().generate(GetParam().c.knobs, 17));
  expect_same_outputs(run_cpu(driver(), in), first, "after a call with other weights");
  (void)run_cpu(driver(), driver().generate(big_cases().front().knobs, 19));
  expect_same_outputs(run_cpu(driver(), in), first, "after a call of other shapes");
  release_cpu_call_buffers();
  expect_same_outputs(run_cpu(driver(), in), first, "after releasing the buffers");
}

// The rotated q and the rotated and normalized cache rows are the reference's bits (the simd
// rope_norm kernels compute its f64 arithmetic), on every golden case (f32 and bf16 freqs,
// garbage padding, quantizer edges) and the large shapes above.
TEST_P(MlaPrefillCpu, StepsOneAndTwoGiveTheReferencesBits) {
  IsaCap cap(GetParam().level);
  std::vector<goldens::json> knobs{GetParam().c.knobs};
  if (GetParam().c.name == big_cases().front().name)  // the golden cases once per level
    for (const auto& c : driver().cases()) knobs.push_back(c.knobs);
  for (const auto& k : knobs)
    for (std::uint64_t seed : kSeeds) {
      const Bundle in = driver().generate(k, seed);
      Bundle ref = in;
      ASSERT_TRUE(driver().run(ref, RunOptions{Backend::reference}).ok());
      const Bundle got = run_cpu(driver(), in);
      EXPECT_TRUE(got.at("out.q").same_bytes(ref.at("out.q"))) << k.dump() << " seed " << seed;
      EXPECT_TRUE(got.at("out.kv_cache.blocks").same_bytes(ref.at("out.kv_cache.blocks"))) << k.dump() << " seed " << seed;
    }
}

INSTANTIATE_TEST_SUITE_P(mla_prefill_fp8, MlaPrefillCpu, ::testing::ValuesIn(at_every_level(big_cases())),
                         level_case_name);

// The KV projection and the scores on the tile GEMM (amx), on the real tiles where this CPU has
// AMX and on the emulated ones wherever avx512bf16 runs, with the pair dot taken (values as bf16
// rows) and not taken (values as f32 panels, as on Intel CPUs): the big cases against the reference
// and bitwise identical for 1, 2 and 4 threads (bk 5 keeps the projection, widths 15 and 8 the
// scores, off the tiles), and every golden-matrix case (two seeds) within tolerance.
using MlaPrefillTileGemm = TileSubjectTest;

TEST_P(MlaPrefillTileGemm, BigCasesMatchReferenceAndAreThreadCountInvariant) {
  GemmTableScope scope(GetParam());
  ASSERT_NE(cpu::gemm_kernels().gemm_tiles, nullptr);
  for (cpu::RouteMode dot : {cpu::RouteMode::on, cpu::RouteMode::off}) {
    cpu::bf16_dot::set_mode(dot);
    for (const BigCase& c : big_cases()) {
      SCOPED_TRACE(c.name + (dot == cpu::RouteMode::on ? " (pair dot)" : " (f32 values)"));
      expect_reference_match_and_thread_invariance(driver(), driver().generate(c.knobs, 23), expect_same_outputs);
    }
  }
}

TEST_P(MlaPrefillTileGemm, EveryGoldenMatrixCaseWithinTolerance) {
  GemmTableScope scope(GetParam());
  for (cpu::RouteMode dot : {cpu::RouteMode::on, cpu::RouteMode::off}) {
    cpu::bf16_dot::set_mode(dot);
    expect_golden_matrix_within_tolerance(driver(), std::string(GetParam().name) + (dot == cpu::RouteMode::on ? "/pair dot" : "/f32 values"));
  }
}

// A plan's workspace holds the tile routes' buffers (packed weights, bf16 rows, key pairs, f32
// value panels): planned runs need no buffer of their own and give the one-shot bits.
TEST_P(MlaPrefillTileGemm, PlannedRunsFitTheWorkspaceThePlanAskedFor) {
  GemmTableScope scope(GetParam());
  for (cpu::RouteMode dot : {cpu::RouteMode::on, cpu::RouteMode::off}) {
    cpu::bf16_dot::set_mode(dot);
    for (const BigCase& c : big_cases()) {
      SCOPED_TRACE(c.name + (dot == cpu::RouteMode::on ? " (pair dot)" : " (f32 values)"));
      expect_planned_run_fits_its_workspace(driver(), driver().generate(c.knobs, 29), expect_same_outputs, c.name);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(mla_prefill_fp8, MlaPrefillTileGemm, ::testing::ValuesIn(tile_subjects()), tile_subject_name);

}  // namespace
}  // namespace mlakit::testing
