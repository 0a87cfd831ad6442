// fused_qkv_paged, cpu back-end: shapes that span several row tiles (128 rows), column tiles (128
// weight columns, the last one partial) and K chunks (512, the last one partial), in every weight
// format, at every ISA level this CPU runs: against the reference, bitwise identical for 1, 2 and
// 4 threads and under concurrent callers, and with a decode call (one row per sequence) equal row
// by row to the prefill call the rows came from (on the own tiles). The same cases, and every
// golden-matrix case, through the BLAS library's GEMM and through the panel GEMM (each forced on
// from one row): against the reference and bitwise identical for 1, 2 and 4 threads and under
// concurrent callers; through the panel GEMM a decode call also gives each row its prefill bits.
// GPTQ rows rerun one per call (T = 1, the int4 decode row) get the bits of the call of all rows,
// act-order ones (K in group order, on every route) too; an act-order map of uneven groups takes
// the per-element path on every route, against the reference.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cpu/common/bf16_dot.hpp"
#include "cpu/common/kernels.hpp"
#include "cpu/common/library_gemm.hpp"
#include "cpu/common/panel_gemm.hpp"
#include "cpu/common/tile_gemm.hpp"
#include "cpu/fused_qkv_paged.hpp"
#include "goldens/common/driver.hpp"
#include "mlakit/ops/fused_qkv_paged.hpp"
#include "support/amx_tile_subjects.hpp"
#include "support/cpu_level_cases.hpp"
#include "goldens/fused_qkv_paged.hpp"

namespace mlakit::testing {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;

const goldens::OpDriver& driver() { return *goldens::find_driver("fused_qkv_paged"); }


std::vector<BigCase> big_cases() {
  return {
      {"dense_bf16",  // N = 200 + 2·2·64 = 456: three full column tiles and a partial one
       {{"seq_lens", {100, 0, 37}}, {"cache_lens", {20, 3, 130}}, {"K", 320}, {"q_dim", 200},
        {"num_kv_heads", 2}, {"head_dim", 64}}},
      {"dense_f32_decode",
       {{"seq_lens", {1, 1, 1, 1, 1, 1}}, {"cache_lens", {0, 15, 16, 17, 100, 3}}, {"K", 200}, {"q_dim", 130},
        {"num_kv_heads", 1}, {"head_dim", 32}, {"dtype", "f32"}}},
      {"fp8_bf16_mla",  // K = 300: a partial last scale block on both axes (N = 246)
       {{"seq_lens", {130, 5}}, {"cache_lens", {0, 300}}, {"K", 300}, {"q_dim", 150}, {"cache", "mla"},
        {"num_kv_heads", 1}, {"head_dim", 96}, {"weight_format", "fp8_block"}}},
      {"fp8_f32",
       {{"seq_lens", {140}}, {"cache_lens", {7}}, {"K", 256}, {"q_dim", 136}, {"num_kv_heads", 2},
        {"head_dim", 32}, {"dtype", "f32"}, {"weight_format", "fp8_block"}}},
      {"fp8_bf16_long_k",  // K = 1100: several activation chunks (512) of several scale blocks, the last partial
       {{"seq_lens", {9, 1}}, {"cache_lens", {3, 40}}, {"K", 1100}, {"q_dim", 100}, {"num_kv_heads", 1},
        {"head_dim", 32}, {"weight_format", "fp8_block"}}},
      {"fp8_f32_long_k",
       {{"seq_lens", {1, 1, 1}}, {"cache_lens", {0, 17, 64}}, {"K", 1300}, {"q_dim", 136}, {"num_kv_heads", 1},
        {"head_dim", 64}, {"dtype", "f32"}, {"weight_format", "fp8_block"}}},
      {"gptq_f32_zp_gidx",
       {{"seq_lens", {130, 2}}, {"cache_lens", {10, 0}}, {"K", 256}, {"q_dim", 136}, {"num_kv_heads", 1},
        {"head_dim", 64}, {"dtype", "f32"}, {"weight_format", "gptq"}, {"group_size", 32}, {"has_zp", true},
        {"g_idx", true}}},
      // More than one panel-GEMM row tile (256): each column tile's panels are formed once and shared.
      {"dense_bf16_tall",
       {{"seq_lens", {270, 31}}, {"cache_lens", {0, 9}}, {"K", 264}, {"q_dim", 72}, {"num_kv_heads", 1},
        {"head_dim", 64}}},
      {"fp8_f32_tall",  // K = 300: a partial chunk (256) and a partial scale block
       {{"seq_lens", {300}}, {"cache_lens", {5}}, {"K", 300}, {"q_dim", 150}, {"cache", "mla"},
        {"num_kv_heads", 1}, {"head_dim", 96}, {"dtype", "f32"}, {"weight_format", "fp8_block"}}},
      // Row tiles and at least three column tiles (256): the two panel buffers are reused.
      {"dense_bf16_tall_wide",
       {{"seq_lens", {280, 250}}, {"cache_lens", {0, 9}}, {"K", 72}, {"q_dim", 700}, {"num_kv_heads", 1},
        {"head_dim", 64}}},
      {"fp8_f32_tall_wide",
       {{"seq_lens", {520}}, {"cache_lens", {3}}, {"K", 136}, {"q_dim", 1000}, {"num_kv_heads", 2},
        {"head_dim", 32}, {"dtype", "f32"}, {"weight_format", "fp8_block"}}},
      {"gptq_bf16_tall",
       {{"seq_lens", {200, 90}}, {"cache_lens", {0, 3}}, {"K", 320}, {"q_dim", 136}, {"num_kv_heads", 1},
        {"head_dim", 64}, {"weight_format", "gptq"}, {"group_size", 64}, {"has_zp", true}}},
      // Act-order in group order on every route: more than one row tile, K chunks of 256 and 128 on
      // the panel GEMM, three groups.
      {"gptq_bf16_zp_gidx_tall",
       {{"seq_lens", {200, 90}}, {"cache_lens", {0, 3}}, {"K", 384}, {"q_dim", 136}, {"num_kv_heads", 1},
        {"head_dim", 64}, {"weight_format", "gptq"}, {"group_size", 128}, {"has_zp", true}, {"g_idx", true}}},
      // One row: the int4 decode row, over a pack's tables where the level forms them ahead; three
      // column tiles and two K chunks.
      {"gptq_f32_zp_row",
       {{"seq_lens", {1}}, {"cache_lens", {7}}, {"K", 1024}, {"q_dim", 256}, {"num_kv_heads", 1}, {"head_dim", 64},
        {"dtype", "f32"}, {"weight_format", "gptq"}, {"group_size", 128}, {"has_zp", true}}},
      {"gptq_bf16_decode",
       {{"seq_lens", {1, 1, 1, 1, 1, 1, 1, 1, 1}}, {"cache_lens", {0, 1, 15, 16, 31, 32, 200, 5, 9}}, {"K", 512},
        {"q_dim", 128}, {"num_kv_heads", 2}, {"head_dim", 64}, {"weight_format", "gptq"}, {"group_size", 128},
        {"scales_dtype", "bf16"}}},
  };
}


Bundle run_cpu(const Bundle& in) { return testing::run_cpu(driver(), in); }

void expect_same_outputs(const Bundle& a, const Bundle& b, const std::string& what) {
  EXPECT_TRUE(a.at("out.output").same_bytes(b.at("out.output"))) << what << ": output";
  EXPECT_TRUE(a.at("out.kv_cache.blocks").same_bytes(b.at("out.kv_cache.blocks"))) << what << ": cache";
}

// The library GEMM's, the panel GEMM's and the tile GEMM's modes for one scope (the tile and the
// panel GEMM, taken before the library's in the automatic mode, are turned off where a test forces
// another route on; the tile GEMM is off unless a test names it).
struct RouteModes {
  RouteModes(cpu::RouteMode library, cpu::RouteMode panel, cpu::RouteMode tiles = cpu::RouteMode::off)
      : saved_library(cpu::library_gemm::mode()), saved_panel(cpu::panel_gemm::mode()),
        saved_tiles(cpu::tile_gemm::mode()) {
    cpu::library_gemm::set_mode(library);
    cpu::panel_gemm::set_mode(panel);
    cpu::tile_gemm::set_mode(tiles);
  }
  ~RouteModes() {
    cpu::library_gemm::set_mode(saved_library);
    cpu::panel_gemm::set_mode(saved_panel);
    cpu::tile_gemm::set_mode(saved_tiles);
  }
  cpu::RouteMode saved_library, saved_panel, saved_tiles;
};
using cpu::RouteMode;

using FusedQkvCpu = CpuLevelTest;

TEST_P(FusedQkvCpu, MatchesReferenceAndIsThreadCountInvariant) {
  IsaCap cap(GetParam().level);
  expect_reference_match_and_thread_invariance(driver(), driver().generate(GetParam().c.knobs, 7), expect_same_outputs);
}

// Several user threads calling at once, each on its own inputs, each equal to its serial result.
TEST_P(FusedQkvCpu, ConcurrentCallersMatchSerial) {
  IsaCap cap(GetParam().level);
  expect_concurrent_callers_match_serial(driver(), GetParam().c.knobs, expect_same_outputs);
}

// Every row of a call rerun as a decode call (one row per sequence, cache length = the row's
// position, the parent sequence's page-table row): the same output row and the same cache rows,
// bit for bit.
void expect_decode_equals_prefill_row_by_row(const goldens::json& knobs) {
  const Bundle in = driver().generate(knobs, 10);
  const Bundle prefill = run_cpu(in);
  const Tensor& offsets = in.at("input_row_offsets");
  const Tensor& lens = in.at("kv_cache.cache_lengths");
  const Tensor& lut = in.at("kv_cache.lookup_table");
  const std::int64_t batch = offsets.numel() - 1, rows = in.at("hidden_state").shape()[0], cols = lut.shape()[1];
  Bundle dec = in;
  dec.remove_outputs();
  Tensor& o = dec.add("input_row_offsets", DType::u32, {rows + 1});
  Tensor& l = dec.add("kv_cache.cache_lengths", DType::u32, {rows});
  Tensor& t = dec.add("kv_cache.lookup_table", DType::u32, {rows, cols});
  for (std::int64_t r = 0; r <= rows; ++r) o.data<std::uint32_t>()[r] = static_cast<std::uint32_t>(r);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::uint32_t first = offsets.data<std::uint32_t>()[b];
    for (std::uint32_t r = first; r < offsets.data<std::uint32_t>()[b + 1]; ++r) {
      l.data<std::uint32_t>()[r] = lens.data<std::uint32_t>()[b] + (r - first);
      for (std::int64_t c = 0; c < cols; ++c) t.data<std::uint32_t>()[r * cols + c] = lut.data<std::uint32_t>()[b * cols + c];
    }
  }
  expect_same_outputs(run_cpu(dec), prefill, "decode against prefill");
}

TEST_P(FusedQkvCpu, DecodeEqualsPrefillRowByRow) {
  IsaCap cap(GetParam().level);
  // A prefill large enough for the library or panel GEMM sums in their order, a decode in the own tiles'.
  RouteModes own(RouteMode::off, RouteMode::off);
  expect_decode_equals_prefill_row_by_row(GetParam().c.knobs);
}

INSTANTIATE_TEST_SUITE_P(fused_qkv_paged, FusedQkvCpu, ::testing::ValuesIn(at_every_level(big_cases())), level_case_name);

// An act-order map whose groups do not all hold group_size channels (one channel moved from group
// 1 to group 0) cannot be taken in group order: each weight element is formed on its own, against
// the reference and bitwise the same for 1, 2 and 4 threads, decode calls (the int4 decode row
// where the map is even) and prefills alike, on the own tiles, the panel GEMM and the library's.
TEST(FusedQkvActOrder, UnevenGroupsFormEachElementOnItsOwn) {
  for (const RouteMode panel : {RouteMode::off, RouteMode::on})
    for (const RouteMode library : {RouteMode::off, RouteMode::on}) {
      if (panel == RouteMode::on && library == RouteMode::on) continue;
      if (library == RouteMode::on && !cpu::library_gemm::available()) continue;
      RouteModes modes(library, panel);
      for (const json& rows : {json{{"seq_lens", {1, 1, 1}}, {"cache_lens", {0, 7, 30}}, {"dtype", "bf16"}},
                               json{{"seq_lens", {20, 3}}, {"cache_lens", {0, 5}}, {"dtype", "bf16"}},
                               json{{"seq_lens", {20, 3}}, {"cache_lens", {0, 5}}, {"dtype", "f32"}}}) {
        SCOPED_TRACE(std::string("panel ") + (panel == RouteMode::on ? "on" : "off") + ", library " +
                     (library == RouteMode::on ? "on" : "off") + ", " + rows.dump());
        json knobs = {{"K", 256}, {"q_dim", 136}, {"num_kv_heads", 1}, {"head_dim", 64}, {"weight_format", "gptq"},
                      {"group_size", 32}, {"has_zp", true}, {"g_idx", true}};
        knobs.update(rows);
        Bundle in = driver().generate(knobs, 21);
        std::int32_t* gi = in.at("g_idx").data<std::int32_t>();
        for (std::int64_t k = 0; k < in.at("g_idx").numel(); ++k)
          if (gi[k] == 1) {
            gi[k] = 0;
            break;
          }
        expect_reference_match_and_thread_invariance(driver(), in, expect_same_outputs);
      }
    }
}

// Single-token calls (T = 1), which take the int4 decode row (each group's tables formed from the
// scales and zero points as the row reaches it, none written for the call) and, for bf16 and fp8
// weights on the f32 levels, tiles that widen the weights in registers: each row of a call of
// several rows rerun alone gives the output row that call gave it, bit for bit (both on the own
// tiles). Four column tiles (the last 8 columns wide: no full 16-column panel) and three K chunks
// (512, 512, 256), so that every tile and chunk reads its own scales and zero points.
std::vector<BigCase> single_token_cases() {
  const json gptq = {{"seq_lens", {3, 2}}, {"cache_lens", {5, 40}}, {"K", 1280}, {"q_dim", 392},
                     {"num_kv_heads", 1}, {"head_dim", 64}, {"weight_format", "gptq"}, {"group_size", 128}};
  json v1 = gptq, v2_bf16 = gptq, f32 = gptq, gidx = gptq;
  gidx["has_zp"] = true;
  gidx["g_idx"] = true;  // act-order: K taken in group order, the decode row on regrouped codes
  v1["has_zp"] = true;
  v1["zero_format"] = "v1";
  v2_bf16["has_zp"] = true;
  v2_bf16["scales_dtype"] = "bf16";
  f32["dtype"] = "f32";
  f32["group_size"] = 64;
  json dense = gptq, dense_f32 = gptq, fp8 = gptq, fp8_f32 = gptq;
  for (json* j : {&dense, &dense_f32, &fp8, &fp8_f32}) j->erase("group_size");
  dense["weight_format"] = dense_f32["weight_format"] = "dense";
  fp8["weight_format"] = fp8_f32["weight_format"] = "fp8_block";
  dense_f32["dtype"] = fp8_f32["dtype"] = "f32";
  return {{"gptq_f16_no_zp", gptq}, {"gptq_f16_zp_v1", v1}, {"gptq_bf16_zp", v2_bf16}, {"gptq_f32_g64", f32},
          {"gptq_g_idx", gidx},
          {"dense_bf16", dense}, {"dense_f32", dense_f32}, {"fp8_bf16", fp8}, {"fp8_f32", fp8_f32}};
}

using FusedQkvSingleToken = CpuLevelTest;

TEST_P(FusedQkvSingleToken, EachRowAloneGetsItsBitsFromTheCallOfAllRows) {
  IsaCap cap(GetParam().level);
  RouteModes own(RouteMode::off, RouteMode::off);
  for (std::uint64_t seed : {12, 13}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Bundle in = driver().generate(GetParam().c.knobs, seed);
    const Bundle all = run_cpu(in);
    const Tensor& x = in.at("hidden_state");
    const Tensor& offsets = in.at("input_row_offsets");
    const Tensor& lut = in.at("kv_cache.lookup_table");
    const Tensor& out = all.at("out.output");
    const std::int64_t batch = offsets.numel() - 1, cols = lut.shape()[1], K = x.shape()[1], N = out.shape()[1];
    const std::size_t x_row = static_cast<std::size_t>(K) * dtype_size(x.dtype());
    const std::size_t out_row = static_cast<std::size_t>(N) * dtype_size(out.dtype());
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::uint32_t first = offsets.data<std::uint32_t>()[b];
      for (std::uint32_t r = first; r < offsets.data<std::uint32_t>()[b + 1]; ++r) {
        Bundle one = in;
        one.remove_outputs();
        std::memcpy(one.add("hidden_state", x.dtype(), {1, K}).bytes(), x.bytes() + r * x_row, x_row);
        std::uint32_t* o = one.add("input_row_offsets", DType::u32, {2}).data<std::uint32_t>();
        o[0] = 0;
        o[1] = 1;
        one.add("kv_cache.cache_lengths", DType::u32, {1}).data<std::uint32_t>()[0] =
            in.at("kv_cache.cache_lengths").data<std::uint32_t>()[b] + (r - first);
        std::memcpy(one.add("kv_cache.lookup_table", DType::u32, {1, cols}).bytes(), lut.bytes() + b * cols * 4, cols * 4);
        const Bundle got = run_cpu(one);
        EXPECT_EQ(std::memcmp(got.at("out.output").bytes(), out.bytes() + r * out_row, out_row), 0) << "row " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(fused_qkv_paged, FusedQkvSingleToken, ::testing::ValuesIn(at_every_level(single_token_cases())),
                         level_case_name);

using FusedQkvLibraryGemm = CpuLevelTest;

TEST_P(FusedQkvLibraryGemm, MatchesReferenceAndIsThreadCountInvariant) {
  if (!cpu::library_gemm::available()) GTEST_SKIP() << cpu::library_gemm::description();
  IsaCap cap(GetParam().level);
  RouteModes on(RouteMode::on, RouteMode::off);
  expect_reference_match_and_thread_invariance(driver(), driver().generate(GetParam().c.knobs, 8), expect_same_outputs);
}

TEST_P(FusedQkvLibraryGemm, ConcurrentCallersMatchSerial) {
  if (!cpu::library_gemm::available()) GTEST_SKIP() << cpu::library_gemm::description();
  IsaCap cap(GetParam().level);
  RouteModes on(RouteMode::on, RouteMode::off);
  expect_concurrent_callers_match_serial(driver(), GetParam().c.knobs, expect_same_outputs);
}

INSTANTIATE_TEST_SUITE_P(fused_qkv_paged, FusedQkvLibraryGemm, ::testing::ValuesIn(at_every_level(big_cases())),
                         level_case_name);

using FusedQkvPanelGemm = CpuLevelTest;

// The panel GEMM forced on from one row: against the reference, bitwise identical for 1, 2 and 4
// threads and under concurrent callers, and a decode call gives each row the bits it got in the
// prefill (its sums do not depend on the other rows of the call).
TEST_P(FusedQkvPanelGemm, MatchesReferenceAndIsThreadCountInvariant) {
  IsaCap cap(GetParam().level);
  RouteModes on(RouteMode::off, RouteMode::on);
  expect_reference_match_and_thread_invariance(driver(), driver().generate(GetParam().c.knobs, 11), expect_same_outputs);
}

TEST_P(FusedQkvPanelGemm, ConcurrentCallersMatchSerial) {
  IsaCap cap(GetParam().level);
  RouteModes on(RouteMode::off, RouteMode::on);
  expect_concurrent_callers_match_serial(driver(), GetParam().c.knobs, expect_same_outputs);
}

TEST_P(FusedQkvPanelGemm, DecodeEqualsPrefillRowByRow) {
  IsaCap cap(GetParam().level);
  RouteModes on(RouteMode::off, RouteMode::on);
  expect_decode_equals_prefill_row_by_row(GetParam().c.knobs);
}

INSTANTIATE_TEST_SUITE_P(fused_qkv_paged, FusedQkvPanelGemm, ::testing::ValuesIn(at_every_level(big_cases())),
                         level_case_name);

// The golden matrix's cases (partial scale blocks, GPTQ v1 zeros, act-order, NaN columns, empty
// batches, f32 and bf16) on the route in force: expect_golden_matrix_within_tolerance.

// Through the panel GEMM at every level this CPU runs (the bf16-dot levels keep bf16 activations
// on their own tiles).
TEST(FusedQkvPanelGemmMatrix, EveryGoldenMatrixCaseWithinTolerance) {
  RouteModes on(RouteMode::off, RouteMode::on);
  for (const Isa level : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512bf16}) {
    if (static_cast<int>(level) > static_cast<int>(cpu_supported_isa())) continue;
    IsaCap cap(level);
    expect_golden_matrix_within_tolerance(driver(), isa_name(level));
  }
}

// Through the library GEMM.
TEST(FusedQkvLibraryGemmMatrix, EveryGoldenMatrixCaseWithinTolerance) {
  if (!cpu::library_gemm::available()) GTEST_SKIP() << cpu::library_gemm::description();
  RouteModes on(RouteMode::on, RouteMode::off);
  expect_golden_matrix_within_tolerance(driver(), "library");
}

// Every big case planned with a workspace and run on exactly the size the plan asked for: no
// buffer of its own, the one-shot bits, and a workspace where `needs(input)` says one is needed.
template <class Needs>
void expect_planned_runs_fit_their_workspace(std::uint64_t seed, Needs needs) {
  for (const BigCase& c : big_cases()) {
    const Bundle in = driver().generate(c.knobs, seed);
    const std::size_t bytes = expect_planned_run_fits_its_workspace(driver(), in, expect_same_outputs, c.name);
    EXPECT_EQ(bytes > 0, needs(in)) << c.name << ": " << bytes;
  }
}

// A plan's workspace holds the library path's buffers.
TEST(FusedQkvLibraryGemmMatrix, PlannedRunsFitTheWorkspaceThePlanAskedFor) {
  if (!cpu::library_gemm::available()) GTEST_SKIP() << cpu::library_gemm::description();
  RouteModes on(RouteMode::on, RouteMode::off);
  // Only f32 activations with f32 weights need no buffer (the sgemm reads both as stored); bf16
  // activations on a level with the bf16 dot stay on the own tiles, which need none.
  expect_planned_runs_fit_their_workspace(9, [](const Bundle& in) {
    const bool f32 = in.at("hidden_state").dtype() == DType::f32;
    if (!f32 && cpu::bf16_dot::use(cpu::gemm_kernels())) return false;
    return !(f32 && in.has("weight") && !in.has("weight_scale"));
  });
}

// A plan's workspace holds the panel path's shared panels (calls of more than one row tile) and
// its activations packed once (calls of more than one column tile; these are all far below the
// size bound on that buffer).
TEST(FusedQkvPanelGemmMatrix, PlannedRunsFitTheWorkspaceThePlanAskedFor) {
  RouteModes on(RouteMode::off, RouteMode::on);
  expect_planned_runs_fit_their_workspace(12, [](const Bundle& in) {
    const bool bf16_dot = cpu::bf16_dot::use(cpu::gemm_kernels()) && in.at("hidden_state").dtype() == DType::bf16;
    const std::int64_t columns = in.has("qweight") ? in.at("qweight").shape()[1] : in.at("weight").shape()[0];
    return ((in.at("hidden_state").shape()[0] > 256 || columns > 256) && !bf16_dot) || in.has("g_idx");
  });
}


// ---- the tile GEMM (AMX) ---------------------------------------------------------------------------
//
// The tile route forced on from one row, on the real tiles where this CPU has AMX and on the
// emulated tiles (the same kernel over a scalar model of the tile instructions) wherever
// avx512bf16 runs: the bf16 big cases against the reference and bitwise identical for 1, 2 and 4
// threads, a decode call giving each row its prefill bits, every golden-matrix case within
// tolerance, and planned runs fitting the workspace their plan asked for.

// The tile subject's gemm table, its level and the routes (the tile GEMM forced on), for one scope.
struct TileScope {
  explicit TileScope(const TileSubject& t) : table(t), routes(RouteMode::off, RouteMode::off, RouteMode::on) {}
  GemmTableScope table;
  RouteModes routes;
};

bool bf16_case(const BigCase& c) { return !c.knobs.contains("dtype") || c.knobs.at("dtype") == "bf16"; }

using FusedQkvTileGemm = TileSubjectTest;

TEST_P(FusedQkvTileGemm, BigCasesMatchReferenceAndAreThreadCountInvariant) {
  TileScope scope(GetParam());
  ASSERT_NE(cpu::gemm_kernels().gemm_tiles, nullptr);
  for (const BigCase& c : big_cases()) {
    if (!bf16_case(c)) continue;
    SCOPED_TRACE(c.name);
    expect_reference_match_and_thread_invariance(driver(), driver().generate(c.knobs, 13), expect_same_outputs);
  }
}

TEST_P(FusedQkvTileGemm, DecodeEqualsPrefillRowByRow) {
  TileScope scope(GetParam());
  for (const BigCase& c : big_cases()) {
    if (!bf16_case(c)) continue;
    SCOPED_TRACE(c.name);
    expect_decode_equals_prefill_row_by_row(c.knobs);
  }
}

TEST_P(FusedQkvTileGemm, EveryGoldenMatrixCaseWithinTolerance) {
  TileScope scope(GetParam());
  expect_golden_matrix_within_tolerance(driver(), GetParam().name);
}

// Calls of more than one row tile (256) pack a group of column tiles once into the call buffer.
TEST_P(FusedQkvTileGemm, PlannedRunsFitTheWorkspaceThePlanAskedFor) {
  TileScope scope(GetParam());
  expect_planned_runs_fit_their_workspace(14, [](const Bundle& in) {
    const bool f32 = in.at("hidden_state").dtype() == DType::f32;
    return (in.at("hidden_state").shape()[0] > 256 && !f32) || in.has("g_idx");
  });
}

// ---- packed weights ----------------------------------------------------------------------------------
//
// A call naming its layer's packed weights gets the bits of the call without them. Whether the call
// read the pack shows when the weights change after packing (the pack is a copy): a call on the
// pack's route still gets the old weights' bits, any other call the new ones'.

// The main weight tensor of a bundle changed in place (every byte xor 0x11: other values, some fp8
// codes NaN), so that its results differ.
void change_weights(Bundle& b) {
  Tensor& w = b.has("weight") ? b.at("weight") : b.at("qweight");
  for (std::size_t i = 0; i < w.nbytes(); ++i) w.bytes()[i] ^= 0x11;
}

// `knobs` on the cpu back-end as configured now, with the pack of its weights made here; `reads`:
// whether the call's route is expected to read the pack.
using PackedCall = std::function<Status(const FusedQkvPagedDesc&, const FusedQkvPagedArgs&)>;
Status one_shot(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a) { return fused_qkv_paged(d, a, RunOptions{Backend::cpu}); }

void expect_packed_call_bits(const json& knobs, std::uint64_t seed, bool reads, const std::string& what,
                             const PackedCall& call = one_shot, const FusedQkvPackOptions& options = {}) {
  const Bundle in = driver().generate(knobs, seed);
  const Bundle plain = run_cpu(in);
  Bundle changed_in = in;
  change_weights(changed_in);
  const Bundle changed = run_cpu(changed_in);
  ASSERT_FALSE(plain.at("out.output").same_bytes(changed.at("out.output"))) << what << ": the change shows";

  Bundle b = in;
  driver().prepare_outputs(b);
  const FusedQkvPagedDesc d = goldens::fused_qkv_paged_desc(b);
  FusedQkvPagedArgs a = goldens::fused_qkv_paged_args(b);
  FusedQkvPackedWeights w;
  const Status packed = pack_weights(d, a, &w, options);
  ASSERT_TRUE(packed.ok()) << packed.message;
  if (!options.prefill_layout) {
    // GPTQ's codes alone (rows padded to 16 words past a multiple of 128) and, where the level
    // has them, the decode row's tables of every block and group and the codes laid out for it
    // (a step of two word rows per block); nothing for other formats.
    std::size_t codes = 0;
    if (in.has("qweight")) {
      const auto& shape = in.at("qweight").shape();
      const auto rows = static_cast<std::size_t>(shape[0]), n = static_cast<std::size_t>(shape[1]);
      codes = rows * ((n + 111) / 128 * 128 + 16) * sizeof(std::uint32_t);
      const simd::GemmKernels& g = cpu::gemm_kernels();
      if (g.int4_row_tables != nullptr)
        codes += n / g.int4_row_table_cols * static_cast<std::size_t>(in.at("scales").shape()[0]) * g.int4_row_table_bytes;
      if (g.int4_row_codes != nullptr) codes += n / g.int4_row_table_cols * ((rows + 1) / 2) * g.int4_row_code_bytes;
    }
    EXPECT_EQ(w.bytes(), codes) << what << ": " << w.layout();
  }
  a.packed_weights = &w;
  Status s = call(d, a);
  ASSERT_TRUE(s.ok()) << s.message;
  expect_same_outputs(plain, b, what + " (" + w.layout() + ")");

  change_weights(b);
  driver().prepare_outputs(b);
  a = goldens::fused_qkv_paged_args(b);
  a.packed_weights = &w;
  s = call(d, a);
  ASSERT_TRUE(s.ok()) << s.message;
  expect_same_outputs(reads ? plain : changed, b, what + ", weights changed after packing (" + w.layout() + ")");
}

bool bf16_activations(const BigCase& c) { return !c.knobs.contains("dtype") || c.knobs.at("dtype") == "bf16"; }

using FusedQkvPacked = CpuLevelTest;

// GPTQ packs keep the codes (the big cases' act-order maps are of whole groups), which every call
// naming the pack reads.
bool keeps_codes(const BigCase& c) { return c.knobs.contains("weight_format") && c.knobs.at("weight_format") == "gptq"; }

// On the panel GEMM (forced on from one row) the pack holds its panels, except where bf16
// activations stay on the bf16 pair dot (no panels are laid out there).
TEST_P(FusedQkvPacked, PanelRouteReadsThePackWithTheSameBits) {
  IsaCap cap(GetParam().level);
  RouteModes on(RouteMode::off, RouteMode::on);
  const bool pair_dot = cpu::bf16_dot::use(cpu::gemm_kernels()) && bf16_activations(GetParam().c);
  expect_packed_call_bits(GetParam().c.knobs, 21, !pair_dot || keeps_codes(GetParam().c), "panel route");
}

// The own tiles read the weights as stored: a pack named by their calls is checked, not read, but
// for its GPTQ codes (in group order with an act-order map).
TEST_P(FusedQkvPacked, OwnTilesReadOnlyThePacksCodes) {
  IsaCap cap(GetParam().level);
  RouteModes off(RouteMode::off, RouteMode::off);
  expect_packed_call_bits(GetParam().c.knobs, 22, keeps_codes(GetParam().c), "own tiles");
}

// A pack without the prefill layout holds GPTQ's codes alone (nothing for other weights), which
// the panel route and the own tiles read; the panels are formed per call.
TEST_P(FusedQkvPacked, APackOfCodesAloneIsReadForThem) {
  IsaCap cap(GetParam().level);
  FusedQkvPackOptions codes_only;
  codes_only.prefill_layout = false;
  for (const RouteMode panel : {RouteMode::off, RouteMode::on}) {
    RouteModes modes(RouteMode::off, panel);
    expect_packed_call_bits(GetParam().c.knobs, 26, keeps_codes(GetParam().c),
                            panel == RouteMode::on ? "codes alone, panel route" : "codes alone, own tiles", one_shot,
                            codes_only);
  }
}

// A plan's runs (the plan made without the pack, as an engine plans a step once for all layers)
// read a run's pack as the one-shot call does.
TEST_P(FusedQkvPacked, PlannedRunsReadThePack) {
  IsaCap cap(GetParam().level);
  RouteModes on(RouteMode::off, RouteMode::on);
  const bool pair_dot = cpu::bf16_dot::use(cpu::gemm_kernels()) && bf16_activations(GetParam().c);
  expect_packed_call_bits(GetParam().c.knobs, 25, !pair_dot || keeps_codes(GetParam().c), "planned run",
                          [](const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a) {
                            FusedQkvPagedArgs step = a;
                            step.packed_weights = nullptr;
                            FusedQkvPagedPlan plan;
                            PlanOptions po;
                            po.backends = {Backend::cpu};
                            const Status s = mlakit::plan(d, step, po, &plan);
                            return s.ok() ? run(plan, a) : s;
                          });
}

INSTANTIATE_TEST_SUITE_P(fused_qkv_paged, FusedQkvPacked, ::testing::ValuesIn(at_every_level(big_cases())),
                         level_case_name);

// A pack laid out by one level's kernels is not read by another level's calls (its panels are
// as wide as the packing level's vectors).
TEST(FusedQkvPackedLevels, APackOfAnotherLevelIsNotRead) {
  if (static_cast<int>(cpu_supported_isa()) < static_cast<int>(Isa::avx2)) GTEST_SKIP() << "one level only";
  RouteModes on(RouteMode::off, RouteMode::on);
  const json knobs = big_cases()[3].knobs;  // fp8_f32: on the panel GEMM at every level
  const Bundle in = driver().generate(knobs, 23);
  Bundle b = in;
  driver().prepare_outputs(b);
  const FusedQkvPagedDesc d = goldens::fused_qkv_paged_desc(b);
  FusedQkvPagedArgs a = goldens::fused_qkv_paged_args(b);
  FusedQkvPackedWeights w;
  ASSERT_TRUE(pack_weights(d, a, &w).ok());  // at the CPU's own level
  IsaCap cap(Isa::generic);
  const Bundle plain = run_cpu(in);
  change_weights(b);
  Bundle changed_in = in;
  change_weights(changed_in);
  const Bundle changed = run_cpu(changed_in);
  driver().prepare_outputs(b);
  a = goldens::fused_qkv_paged_args(b);
  a.packed_weights = &w;
  const Status s = fused_qkv_paged(d, a, RunOptions{Backend::cpu});
  ASSERT_TRUE(s.ok()) << s.message;
  expect_same_outputs(changed, b, "generic level, pack of " + w.layout());
  EXPECT_FALSE(changed.at("out.output").same_bytes(plain.at("out.output")));
}

// ---- the panel route's row blocks ---------------------------------------------------------------
//
// A call whose packed activations would pass their bound runs in blocks of whole row tiles, each
// packing its activations and forming the weight panels again. With the bound lowered to one row
// tile's packed rows (258 or 264 rows of K at every level), the calls of more than 256 rows and
// 256 columns run in blocks of 256 rows: the bits of the call in one block, thread-count
// invariant, within their plan's workspace, and a pack read with the same bits.

struct PackedActivationsBound {
  explicit PackedActivationsBound(std::size_t bytes) : saved(cpu::panel_packed_activations_bound()) {
    cpu::set_panel_packed_activations_bound(bytes);
  }
  ~PackedActivationsBound() { cpu::set_panel_packed_activations_bound(saved); }
  std::size_t saved;
};

std::vector<BigCase> row_block_cases() {
  std::vector<BigCase> out;
  for (const BigCase& c : big_cases())
    if (c.name == "dense_bf16_tall_wide" || c.name == "fp8_f32_tall_wide" || c.name == "gptq_bf16_tall") out.push_back(c);
  return out;
}

using FusedQkvPanelRowBlocks = CpuLevelTest;

TEST_P(FusedQkvPanelRowBlocks, GiveTheBitsOfOneBlock) {
  IsaCap cap(GetParam().level);
  RouteModes on(RouteMode::off, RouteMode::on);
  if (cpu::bf16_dot::use(cpu::gemm_kernels()) && bf16_activations(GetParam().c))
    GTEST_SKIP() << "bf16 activations stay on the pair dot at this level: no panel route";
  const Bundle in = driver().generate(GetParam().c.knobs, 13);
  // More than one row tile and more than one column tile, or the call would run in one block.
  const std::int64_t columns = in.has("qweight") ? in.at("qweight").shape()[1] : in.at("weight").shape()[0];
  ASSERT_GT(in.at("hidden_state").shape()[0], 256);
  ASSERT_GT(columns, 256);
  const Bundle whole = run_cpu(in);
  const auto K = static_cast<std::size_t>(in.at("hidden_state").shape()[1]);
  PackedActivationsBound one_tile(264 * K * sizeof(float));
  expect_same_outputs(whole, run_cpu(in), "row blocks of 256");
  expect_reference_match_and_thread_invariance(driver(), in, expect_same_outputs);
  expect_planned_run_fits_its_workspace(driver(), in, expect_same_outputs, GetParam().c.name);
  expect_packed_call_bits(GetParam().c.knobs, 26, true, "panel route in row blocks");
}

INSTANTIATE_TEST_SUITE_P(fused_qkv_paged, FusedQkvPanelRowBlocks, ::testing::ValuesIn(at_every_level(row_block_cases())),
                         level_case_name);

// The tile GEMM (forced on) reads its pair strips from the pack for bf16 activations; f32
// activations stay off the tiles and read the weights as stored, but for GPTQ's codes, which every
// route reads from the pack.
TEST_P(FusedQkvTileGemm, TileRouteReadsThePackWithTheSameBits) {
  TileScope scope(GetParam());
  for (const BigCase& c : big_cases()) {
    SCOPED_TRACE(c.name);
    expect_packed_call_bits(c.knobs, 24, bf16_case(c) || keeps_codes(c), "tile route");
  }
}

INSTANTIATE_TEST_SUITE_P(fused_qkv_paged, FusedQkvTileGemm, ::testing::ValuesIn(tile_subjects()), tile_subject_name);

}  // namespace
}  // namespace mlakit::testing
