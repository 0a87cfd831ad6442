// The public entry points on device memory, with the cuda back-end's kernels run on the CPU
// emulation: every golden-matrix case through the drivers (the drivers' staging into "device" memory,
// the entry point's DeviceMirror and host validator, routing, the cuda kernels, the copy back)
// against the reference, with the checks of the golden matrix (the driver's comparison, guards,
// untouched inputs, a bit-identical second run, no leaked device memory, at most one stream
// synchronization per call); then the calls that must fail before anything is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/common/route_switch.hpp"
#include "cuda/fused_qkv_paged.hpp"
#include "cuda/mla_prefill_fp8.hpp"
#include "cuda/sparse_mla_ring.hpp"
#include "cuda/wgmma_route.hpp"
#include "cuda_runtime.h"
#include "goldens/common/device_staging.hpp"
#include "goldens/common/driver.hpp"
#include "mlakit/mlakit.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;

const char* const kOps[] = {"lightning_indexer", "msa_block_indexer", "mla_prefill_fp8", "sparse_mla_prefill",
                            "fused_qkv_paged"};

// Emulator counters over one scope.
struct Counters {
  long launches = mlakit_cuda_emu::launches();
  long copies = mlakit_cuda_emu::copies_to_host();  // the mirrors' (the staging's uploads go the other way)
  long syncs = mlakit_cuda_emu::stream_synchronizations();
  Counters since() const {
    Counters now;
    return Counters{now.launches - launches, now.copies - copies, now.syncs - syncs};
  }
};

// One driver call with the bundle staged in (emulated) device memory; the outputs come back into
// `b`. `during` gets what the call itself did (the staging's uploads happen before it).
Status run_staged(const goldens::OpDriver& driver, Bundle& b, const RunOptions& options, Counters* during = nullptr) {
  b.remove_outputs();
  goldens::DeviceStaging staging(b);
  EXPECT_TRUE(staging.active()) << "no device memory functions registered";
  // The driver adds its outputs inside run(); inputs are uploaded here so the counters see the call.
  Status s = staging.upload_all();
  if (!s.ok()) return s;
  const Counters before;
  s = driver.run(b, options);
  if (during) *during = before.since();
  const Status staged = staging.error();
  const Status f = staging.finish();
  if (!staged.ok()) return staged;
  if (!s.ok()) return s;
  return f;
}

// Every output still holds the driver's poison, or (in-place operands) the input it was copied from.
void expect_nothing_written(const Bundle& b, const std::string& who) {
  for (const auto& name : b.output_names()) {
    const Tensor& out = b.at(name);
    const std::string source = name.substr(4);
    if (b.has(source) && b.at(source).shape() == out.shape() && b.at(source).dtype() == out.dtype()) {
      EXPECT_TRUE(out.same_bytes(b.at(source))) << who << ": in-place operand '" << name << "' was modified";
      continue;
    }
    Tensor poisoned = out;
    poisoned.poison();
    EXPECT_TRUE(out.same_bytes(poisoned)) << who << ": '" << name << "' was written";
    EXPECT_TRUE(out.guard_intact()) << who << ": '" << name << "' guard";
  }
}

// ---- every golden case --------------------------------------------------------------------------
struct Param {
  std::string op;
  goldens::CaseSpec spec;
  std::uint64_t seed;
};

std::vector<Param> params() {
  std::vector<Param> v;
  for (const char* op : kOps) {
    const goldens::OpDriver* d = goldens::find_driver(op);
    if (d == nullptr) continue;
    for (const auto& spec : d->cases())
      for (std::uint64_t seed : {1, 2}) v.push_back({op, spec, seed});
    v.push_back({op, d->default_case(), 1});  // DeepSeek-sized: slow to emulate, one seed
  }
  return v;
}

void PrintTo(const Param& p, std::ostream* os) { *os << p.op << "/" << p.spec.name << "/seed" << p.seed; }

class EmulatedCuda : public ::testing::TestWithParam<Param> {};

TEST_P(EmulatedCuda, MatchesReference) {
  const Param& p = GetParam();
  const goldens::OpDriver* driver = goldens::find_driver(p.op);
  ASSERT_NE(driver, nullptr);
  const Bundle inputs = driver->generate(p.spec.knobs, p.seed);
  Bundle expected = inputs;
  const Status rs = driver->run(expected, RunOptions{Backend::reference});
  ASSERT_TRUE(rs.ok()) << rs.message;

  const long live_before = mlakit_cuda_emu::live_allocations();
  Bundle actual = inputs;
  Counters during;
  const Status s = run_staged(*driver, actual, RunOptions{Backend::cuda}, &during);
  if (s.code == StatusCode::unsupported) GTEST_SKIP() << s.message;
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(mlakit_cuda_emu::live_allocations(), live_before) << "device memory leaked";
  EXPECT_LE(during.syncs, 1) << "a device call waits for its stream at most once (for the index mirrors)";
  for (const auto& [name, t] : inputs.tensors) {
    if (name.rfind("out.", 0) == 0) continue;
    EXPECT_TRUE(actual.at(name).same_bytes(t)) << "input '" << name << "' modified";
  }
  for (const auto& name : actual.output_names()) EXPECT_TRUE(actual.at(name).guard_intact()) << name << " overrun";
  for (const auto& c : driver->compare(expected, actual)) EXPECT_TRUE(c.pass) << goldens::describe(c);

  // automatic routes device memory to cuda: the same bits.
  Bundle again = inputs;
  ASSERT_TRUE(run_staged(*driver, again, RunOptions{Backend::automatic}).ok());
  for (const auto& name : actual.output_names())
    EXPECT_TRUE(again.at(name).same_bytes(actual.at(name))) << "second run differs in '" << name << "'";
}

INSTANTIATE_TEST_SUITE_P(Ops, EmulatedCuda, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.op + "_" + info.param.spec.name + "_seed" + std::to_string(info.param.seed);
                         });

// ---- helpers of the route tests ------------------------------------------------------------------
// The golden matrix's cases of an operator, by name, for a test to add its own shapes to.
std::vector<std::pair<std::string, json>> matrix_cases(const goldens::OpDriver& driver) {
  std::vector<std::pair<std::string, json>> cases;
  for (const auto& spec : driver.cases()) cases.emplace_back(spec.name, spec.knobs);
  return cases;
}

// body(knobs, seed, inputs, expected) for every case of `cases` with seeds 1 and 2: the case's
// inputs and the reference's outputs for them.
template <class Body>
void for_cases_and_seeds(const goldens::OpDriver& driver, const std::vector<std::pair<std::string, json>>& cases,
                         Body body) {
  for (const auto& [name, knobs] : cases) {
    SCOPED_TRACE(name);
    for (std::uint64_t seed : {1, 2}) {
      const Bundle inputs = driver.generate(knobs, seed);
      Bundle expected = inputs;
      ASSERT_TRUE(driver.run(expected, RunOptions{Backend::reference}).ok());
      body(knobs, seed, inputs, expected);
    }
  }
}

// A route switch set to a mode for a scope (the process-wide start restored after).
template <core::RouteMode (*Get)(), void (*Set)(core::RouteMode)>
struct ScopedMode {
  explicit ScopedMode(core::RouteMode m) : saved(Get()) { Set(m); }
  ~ScopedMode() { Set(saved); }
  core::RouteMode saved;
};
using DecodeOnceMode = ScopedMode<&cuda::gptq_decode_once::mode, &cuda::gptq_decode_once::set_mode>;
using WgmmaMode = ScopedMode<&cuda::wgmma_route::mode, &cuda::wgmma_route::set_mode>;
using PrefetchMode = ScopedMode<&cuda::mla_prefetch::mode, &cuda::mla_prefetch::set_mode>;
using RingMode = ScopedMode<&cuda::sparse_mla_ring::mode, &cuda::sparse_mla_ring::set_mode>;
using WideMode = ScopedMode<&cuda::sparse_mla_ring::wide_mode, &cuda::sparse_mla_ring::set_wide_mode>;
using PRegsMode = ScopedMode<&cuda::sparse_mla_ring::p_regs_mode, &cuda::sparse_mla_ring::set_p_regs_mode>;

// ---- op 5's GPTQ decode-once route --------------------------------------------------------------
// Every GPTQ case with bf16 activations (zero points v1 and v2, g_idx, f16 and bf16 scales, an MLA
// cache, decode rows), forced through the decode-once route and forced off, plus a prefill of two
// row tiles in the automatic mode: the route runs (a decode launch and a GEMM launch per column
// group), its outputs pass the golden comparison, and they are the bits of the in-loop decode.
TEST(EmulatedCudaGptq, DecodeOnceGivesTheBitsOfTheDecodeInTheLoop) {
  const goldens::OpDriver* driver = goldens::find_driver("fused_qkv_paged");
  ASSERT_NE(driver, nullptr);
  std::vector<std::pair<std::string, json>> cases;
  for (const auto& spec : driver->cases()) {
    const json& k = spec.knobs;
    if (k.value("weight_format", "") == "gptq" && k.value("dtype", "bf16") == "bf16" && spec.name.find("empty") == std::string::npos)
      cases.emplace_back(spec.name, k);
  }
  ASSERT_GE(cases.size(), 4u) << "the golden matrix's GPTQ bf16 cases";
  cases.emplace_back("two_row_tiles_auto", json{{"weight_format", "gptq"}, {"has_zp", true}, {"group_size", 64},
                                                {"seq_lens", {70, 0, 9}}, {"cache_lens", {3, 1, 20}}});
  for (const auto& [name, knobs] : cases) {
    SCOPED_TRACE(name);
    const bool automatic = name == "two_row_tiles_auto";
    for (std::uint64_t seed : {1, 2}) {
      const Bundle inputs = driver->generate(knobs, seed);
      Bundle expected = inputs;
      ASSERT_TRUE(driver->run(expected, RunOptions{Backend::reference}).ok());
      Bundle once = inputs, loop = inputs;
      Counters with_route, without;
      {
        DecodeOnceMode m(automatic ? core::RouteMode::automatic : core::RouteMode::on);
        const Status s = run_staged(*driver, once, RunOptions{Backend::cuda}, &with_route);
        ASSERT_TRUE(s.ok()) << s.message;
      }
      {
        DecodeOnceMode m(core::RouteMode::off);
        const Status s = run_staged(*driver, loop, RunOptions{Backend::cuda}, &without);
        ASSERT_TRUE(s.ok()) << s.message;
      }
      EXPECT_EQ(with_route.launches, without.launches + 1) << "the decode-once route was not taken";
      for (const auto& c : driver->compare(expected, once)) EXPECT_TRUE(c.pass) << goldens::describe(c);
      for (const auto& out : once.output_names())
        EXPECT_TRUE(once.at(out).same_bytes(loop.at(out))) << "'" << out << "' differs from the in-loop decode";
    }
  }
}

// ---- the warpgroup (wgmma) kernels --------------------------------------------------------------
// Every case of `cases` (seeds 1 and 2) with the wgmma kernels forced on, then on mma.sync: the
// route is counted exactly when takes(knobs, inputs), the golden comparison passes, no output is
// overrun, and both runs give the same bits (the emulation sums a wgmma product as it sums
// mma.sync's). The automatic mode takes the route exactly where it is taken when forced if
// `by_default` (the kernels measured faster on wgmma), else never. Returns the cases taken with
// seed 1.
int expect_wgmma_bits(const goldens::OpDriver& driver, const std::vector<std::pair<std::string, json>>& cases,
                      const std::function<bool(const json&, const Bundle&)>& takes, bool by_default) {
  int taken_cases = 0;
  for_cases_and_seeds(driver, cases, [&](const json& knobs, std::uint64_t seed, const Bundle& inputs,
                                         const Bundle& expected) {
    const bool taken = takes(knobs, inputs);
    Bundle actual = inputs, mma = inputs;
    {
      WgmmaMode m(core::RouteMode::on);
      const long before = cuda::wgmma_route::runs();
      const Status s = run_staged(driver, actual, RunOptions{Backend::cuda});
      EXPECT_TRUE(s.ok()) << s.message;
      EXPECT_EQ(cuda::wgmma_route::runs() - before, taken ? 1 : 0) << "the wgmma route";
      taken_cases += taken && seed == 1;
    }
    for (const auto& c : driver.compare(expected, actual)) EXPECT_TRUE(c.pass) << goldens::describe(c);
    for (const auto& out : actual.output_names()) EXPECT_TRUE(actual.at(out).guard_intact()) << out << " overrun";
    {
      // The mma.sync kernels: the automatic mode where it keeps them, else the route forced off.
      WgmmaMode m(by_default ? core::RouteMode::off : core::RouteMode::automatic);
      const long before = cuda::wgmma_route::runs();
      EXPECT_TRUE(run_staged(driver, mma, RunOptions{Backend::cuda}).ok());
      EXPECT_EQ(cuda::wgmma_route::runs(), before) << (by_default ? "taken when off" : "taken in the automatic mode");
    }
    for (const auto& out : actual.output_names())
      EXPECT_TRUE(actual.at(out).same_bytes(mma.at(out))) << "'" << out << "' differs from the mma.sync kernels'";
    if (by_default && seed == 1) {
      WgmmaMode m(core::RouteMode::automatic);
      Bundle automatic = inputs;
      const long before = cuda::wgmma_route::runs();
      EXPECT_TRUE(run_staged(driver, automatic, RunOptions{Backend::cuda}).ok());
      EXPECT_EQ(cuda::wgmma_route::runs() - before, taken ? 1 : 0) << "the automatic mode";
      for (const auto& out : actual.output_names())
        EXPECT_TRUE(actual.at(out).same_bytes(automatic.at(out))) << "'" << out << "' differs in the automatic mode";
    }
  });
  return taken_cases;
}

// Every op 5 case, and shapes the matrix lacks (two row tiles, a partial 128-column tile, fp8
// scales over several 128-column rows and k blocks), with the wgmma kernel forced on and GPTQ
// decoded once: it takes every call with bf16 activations and K a multiple of 16 (GPTQ through the
// decoded weight) and passes the golden comparison. The emulation sums each 16-k product as it
// sums mma.sync's, so its outputs are the bits of the mma.sync kernel: a check of every index of
// the layout, the fragments and the stages. Its accumulators read NaN until the wait and an
// operand overwritten before it is reported, so a stage reused too early fails. In the automatic
// mode it is not taken yet.
TEST(EmulatedCudaWgmma, TakesTheBf16GemmsAndGivesTheBitsOfTheMmaKernel) {
  const goldens::OpDriver* driver = goldens::find_driver("fused_qkv_paged");
  ASSERT_NE(driver, nullptr);
  std::vector<std::pair<std::string, json>> cases = matrix_cases(*driver);
  cases.emplace_back("dense_two_row_tiles", json{{"K", 128}, {"q_dim", 136}, {"seq_lens", {70, 9}}, {"cache_lens", {3, 20}}});
  cases.emplace_back("fp8_scale_rows", json{{"weight_format", "fp8_block"}, {"K", 400}, {"q_dim", 300},
                                            {"seq_lens", {65}}, {"cache_lens", {2}}});
  // The pipelined kernel's edges: two 128-row tiles, the second warpgroup of the last one past T,
  // over seven 64-k tiles (every stage of the ring reused, the last tile partial); a single k tile
  // (the ring's second group empty); an fp8 k block of one 48-wide tile whose second tile lies
  // past K.
  cases.emplace_back("dense_two_128_row_tiles", json{{"K", 400}, {"q_dim", 136}, {"seq_lens", {150, 9}},
                                                     {"cache_lens", {3, 20}}});
  cases.emplace_back("dense_one_k_tile", json{{"K", 32}, {"q_dim", 72}, {"seq_lens", {5, 3}}, {"cache_lens", {0, 7}}});
  cases.emplace_back("fp8_short_last_block", json{{"weight_format", "fp8_block"}, {"K", 176}, {"q_dim", 300},
                                                  {"seq_lens", {140}}, {"cache_lens", {1}}});
  DecodeOnceMode once(core::RouteMode::on);
  const int taken = expect_wgmma_bits(*driver, cases, [](const json&, const Bundle& b) {
    const Tensor& x = b.at("hidden_state");
    return x.shape()[0] > 0 && x.dtype() == DType::bf16 && x.shape()[1] % 16 == 0;
  }, false);
  EXPECT_GE(taken, 17) << "the bf16 cases of the matrix with K a multiple of 16, and the five above";
}

// Every op 3 case, and one whose KV projection spans two row tiles, a partial 128-column tile and
// several bk groups, with the wgmma kernels forced on: the KV projection takes the wgmma kernel
// where latent and bk are multiples of 16 and the call has window rows, the attention where nope,
// rope and v are multiples of 8 (16-byte tile loads), each call with new tokens counted once; the
// golden comparison passes and the outputs are the bits of the mma.sync kernels (as above).
TEST(EmulatedCudaWgmma, TakesOp3sKvProjectionAndGivesTheBitsOfTheMmaKernel) {
  const goldens::OpDriver* driver = goldens::find_driver("mla_prefill_fp8");
  ASSERT_NE(driver, nullptr);
  std::vector<std::pair<std::string, json>> cases = matrix_cases(*driver);
  cases.emplace_back("two_row_tiles_groups", json{{"seq_lens", {70}}, {"cache_lens", {20}}, {"num_heads", 5},
                                                  {"latent", 256}, {"bk", 64}, {"bn", 32}});
  // The pipelined kernel (bk 64 or 128): two 128-row tiles over three groups of two k tiles; a
  // last group of one partial tile (bk 64); a last group of 48 k whose second tile lies past latent.
  cases.emplace_back("pipe_bk128_two_128_row_tiles", json{{"seq_lens", {150}}, {"cache_lens", {30}}, {"num_heads", 5},
                                                          {"latent", 384}, {"bk", 128}, {"bn", 64}});
  cases.emplace_back("pipe_bk64_partial_group", json{{"seq_lens", {40, 9}}, {"cache_lens", {20, 3}}, {"num_heads", 3},
                                                     {"latent", 208}, {"bk", 64}, {"bn", 16}});
  cases.emplace_back("pipe_bk128_short_last_group", json{{"seq_lens", {33}}, {"cache_lens", {0}}, {"num_heads", 2},
                                                         {"latent", 176}, {"bk", 128}, {"bn", 128}});
  const int taken = expect_wgmma_bits(*driver, cases, [](const json&, const Bundle& b) {
    const Tensor& bro = b.at("buffer_row_offsets");
    const std::uint32_t rows = bro.data<std::uint32_t>()[bro.numel() - 1];
    const auto dim = [&](const char* key) { return b.params.at(key).get<std::int64_t>(); };
    const bool gemm = rows > 0 && dim("latent") % 16 == 0 && dim("bk") % 16 == 0;
    const bool attention = dim("nope") % 8 == 0 && dim("rope") % 8 == 0 && dim("v") % 8 == 0;
    return b.at("q").shape()[0] > 0 && (gemm || attention);
  }, false);
  EXPECT_GE(taken, 36) << "every case with new tokens: each has 16-byte attention tiles (the matrix's and the four above)";
}

// Op 1's scores with the wgmma kernels forced on: taken for 49-64 heads of 128 and sequences of four
// new rows or more (none of the matrix's cases), the golden comparison passes and the selected
// positions are the mma.sync kernel's. top_k covers every candidate, so the whole order of the
// scores is compared: over several key tiles and two key chunks, a block of rows spanning two
// sequences, padding heads, exact data (ties by position) and every mask. The scores themselves
// (a fold in another order would move them by a rounding, which the order rarely shows) are read
// from the call's temporaries as they are freed: the same bytes as the mma.sync kernel's.
TEST(EmulatedCudaWgmma, TakesOp1sScoresAndGivesTheBitsOfTheMmaKernel) {
  const goldens::OpDriver* driver = goldens::find_driver("lightning_indexer");
  ASSERT_NE(driver, nullptr);
  const auto deepseek = [](json extra) {
    json k = {{"num_heads", 64}, {"head_dim", 128}, {"page_size", 16}};
    k.update(extra);
    return k;
  };
  const std::vector<std::pair<std::string, json>> extra = {
      {"two_sequences_in_a_block", deepseek({{"seq_lens", {9, 5}}, {"cache_lens", {150, 70}}, {"top_k", 160}})},
      {"padding_heads", deepseek({{"num_heads", 50}, {"seq_lens", {6}}, {"cache_lens", {40}}, {"top_k", 46}})},
      {"exact_mask_none", deepseek({{"seq_lens", {5, 4}}, {"cache_lens", {30, 12}}, {"top_k", 40}, {"mask", "none"},
                                    {"data", "exact"}})},
      {"two_key_chunks", deepseek({{"seq_lens", {4}}, {"cache_lens", {1100}}, {"top_k", 1104}})}};
  std::vector<std::pair<std::string, json>> cases = matrix_cases(*driver);
  cases.insert(cases.end(), extra.begin(), extra.end());
  const int taken = expect_wgmma_bits(*driver, cases, [](const json&, const Bundle& b) {
    const auto dim = [&](const char* key) { return b.params.at(key).get<std::int64_t>(); };
    const Tensor& iro = b.at("input_row_offsets");
    std::int64_t max_rows = 0;
    for (std::int64_t i = 0; i + 1 < iro.numel(); ++i)
      max_rows = std::max<std::int64_t>(max_rows, iro.data<std::uint32_t>()[i + 1] - iro.data<std::uint32_t>()[i]);
    return b.at("q").shape()[0] > 0 && dim("num_heads") > 48 && dim("num_heads") <= 64 && dim("head_dim") == 128 &&
           max_rows >= 4;
  }, false);
  EXPECT_EQ(taken, 4) << "the four cases above";

  // The bytes of every device allocation freed during a run (the temporaries hold the scores), in
  // an order of their own (the staged tensors are freed in the order of their addresses).
  const auto freed_during = [&](const Bundle& inputs, core::RouteMode mode) {
    std::vector<std::vector<unsigned char>> freed;
    WgmmaMode m(mode);
    const auto saved = mlakit_cuda_emu::set_free_observer(
        [&](const unsigned char* p, std::size_t bytes) { freed.emplace_back(p, p + bytes); });
    Bundle b = inputs;
    EXPECT_TRUE(run_staged(*driver, b, RunOptions{Backend::cuda}).ok());
    mlakit_cuda_emu::set_free_observer(saved);
    std::sort(freed.begin(), freed.end(), [](const auto& x, const auto& y) {
      return x.size() != y.size() ? x.size() < y.size() : x < y;
    });
    return freed;
  };
  for_cases_and_seeds(*driver, extra, [&](const json&, std::uint64_t, const Bundle& inputs, const Bundle&) {
    const auto wg = freed_during(inputs, core::RouteMode::on), mma = freed_during(inputs, core::RouteMode::off);
    ASSERT_EQ(wg.size(), mma.size()) << "allocations freed";
    for (std::size_t i = 0; i < wg.size(); ++i)
      EXPECT_TRUE(wg[i] == mma[i]) << "a freed allocation of " << wg[i].size() << " bytes differs";
  });
}

// ---- op 3's attention tiles by cp.async ----------------------------------------------------------
// Runs `call` under the emulator's two serial schedules (each warp as far as it goes, in warp
// order and reversed) and expects the bytes of `outputs` (the lockstep run's) from each: a buffer
// one warp refills while another still reads it, unordered by a barrier, reads the poison of the
// refill's copies under one of them.
void expect_same_bits_when_warps_run_alone(const goldens::OpDriver& driver, const Bundle& inputs, const Bundle& outputs) {
  for (const auto schedule : {mlakit_cuda_emu::Schedule::warps_in_order, mlakit_cuda_emu::Schedule::warps_reversed}) {
    SCOPED_TRACE(schedule == mlakit_cuda_emu::Schedule::warps_in_order ? "warps in order" : "warps reversed");
    const mlakit_cuda_emu::Schedule saved = mlakit_cuda_emu::set_schedule(schedule);
    Bundle again = inputs;
    const Status s = run_staged(driver, again, RunOptions{Backend::cuda});
    mlakit_cuda_emu::set_schedule(saved);
    ASSERT_TRUE(s.ok()) << s.message;
    for (const auto& out : outputs.output_names())
      EXPECT_TRUE(again.at(out).same_bytes(outputs.at(out))) << "'" << out << "' differs from the lockstep run's";
  }
}

// `inputs` (seed `seed`) on cuda with a route forced on (Mode, a ScopedMode): `runs` counts it
// exactly when `takes`, the golden comparison against `expected` passes, no output is overrun,
// and with seed 1 a taken case gives the same bits with the warps run alone. Returns the outputs.
template <class Mode>
Bundle run_forced_on(const goldens::OpDriver& driver, const Bundle& inputs, const Bundle& expected, long (*runs)(),
                     bool takes, std::uint64_t seed) {
  Bundle actual = inputs;
  {
    Mode m(core::RouteMode::on);
    const long before = runs();
    const Status s = run_staged(driver, actual, RunOptions{Backend::cuda});
    EXPECT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(runs() - before, takes ? 1 : 0) << "the route forced on";
    if (s.ok() && takes && seed == 1) expect_same_bits_when_warps_run_alone(driver, inputs, actual);
  }
  for (const auto& c : driver.compare(expected, actual)) EXPECT_TRUE(c.pass) << goldens::describe(c);
  for (const auto& out : actual.output_names()) EXPECT_TRUE(actual.at(out).guard_intact()) << out << " overrun";
  return actual;
}

// Every op 3 case, and shapes the matrix lacks (many key tiles and two sequences in one block of
// query rows, under the max and the deepseek numerics, with and without topk_indices), with the
// attention's K and V tiles prefetched by cp.async: taken exactly where the loads are 16 bytes
// (nope, rope and v multiples of 8), the golden comparison passes, no output is overrun, and the
// outputs are the bits of the tiles loaded at the top of each tile, under every schedule of the
// emulator. A copy poisons its destination at the issue and lands only at its wait, so a tile read
// before its copies fails, and with the warps run one after another so does a buffer refilled
// while another warp still reads it. The automatic mode does not take it.
TEST(EmulatedCudaMla, PrefetchedTilesGiveTheBitsOfTheLoadedOnes) {
  const goldens::OpDriver* driver = goldens::find_driver("mla_prefill_fp8");
  ASSERT_NE(driver, nullptr);
  std::vector<std::pair<std::string, json>> cases = matrix_cases(*driver);
  cases.emplace_back("many_tiles_two_sequences", json{{"num_heads", 2}, {"nope", 32}, {"rope", 16}, {"v", 40},
                                                      {"seq_lens", {40, 230}}, {"cache_lens", {30, 150}}});
  cases.emplace_back("many_tiles_deepseek", json{{"numerics", "deepseek_ue8m0"}, {"num_heads", 2}, {"nope", 32},
                                                 {"rope", 16}, {"v", 24}, {"seq_lens", {200}}, {"cache_lens", {140}}});
  cases.emplace_back("many_tiles_topk", json{{"numerics", "deepseek_ue8m0"}, {"topk", 40}, {"num_heads", 2},
                                             {"nope", 16}, {"rope", 8}, {"v", 16}, {"seq_lens", {150}},
                                             {"cache_lens", {100}}});
  int taken_cases = 0;
  for_cases_and_seeds(*driver, cases, [&](const json&, std::uint64_t seed, const Bundle& inputs, const Bundle& expected) {
    const auto dim = [&](const char* key) { return inputs.params.at(key).get<std::int64_t>(); };
    const bool takes = inputs.at("q").shape()[0] > 0 && dim("nope") % 8 == 0 && dim("rope") % 8 == 0 && dim("v") % 8 == 0;
    const Bundle actual = run_forced_on<PrefetchMode>(*driver, inputs, expected, &cuda::mla_prefetch::runs, takes, seed);
    taken_cases += takes && seed == 1;
    Bundle loaded = inputs;
    {
      PrefetchMode m(core::RouteMode::automatic);
      const long before = cuda::mla_prefetch::runs();
      ASSERT_TRUE(run_staged(*driver, loaded, RunOptions{Backend::cuda}).ok());
      EXPECT_EQ(cuda::mla_prefetch::runs(), before) << "taken in the automatic mode";
    }
    for (const auto& out : actual.output_names())
      EXPECT_TRUE(actual.at(out).same_bytes(loaded.at(out))) << "'" << out << "' differs from the loaded tiles'";
  });
  EXPECT_GE(taken_cases, 34) << "the cases with nope, rope and v multiples of 8, and the three above";
}

// Op 3's attention on the warpgroup products, over many key tiles (two sequences in one block of
// query rows, qk 40 padded to 48 for the products), under the max and the deepseek numerics, with
// topk_indices, and with v in two blocks of columns, the second partial: with the wgmma kernels
// forced on the outputs pass the golden comparison, are the bits of the mma.sync kernels and stay
// so under every schedule of the emulator (a tile refilled while a warp's products still read it
// fails there). (The matrix's cases run in TakesOp3sKvProjectionAndGivesTheBitsOfTheMmaKernel.)
TEST(EmulatedCudaMla, WgmmaAttentionGivesTheBitsOfTheMmaKernelsUnderEverySchedule) {
  const goldens::OpDriver* driver = goldens::find_driver("mla_prefill_fp8");
  ASSERT_NE(driver, nullptr);
  const std::vector<std::pair<std::string, json>> cases = {
      {"many_tiles_two_sequences", json{{"num_heads", 2}, {"nope", 24}, {"rope", 16}, {"v", 40},
                                        {"seq_lens", {40, 230}}, {"cache_lens", {30, 150}}}},
      {"many_tiles_deepseek", json{{"numerics", "deepseek_ue8m0"}, {"num_heads", 2}, {"nope", 32}, {"rope", 16},
                                   {"v", 24}, {"seq_lens", {200}}, {"cache_lens", {140}}}},
      {"many_tiles_topk", json{{"numerics", "deepseek_ue8m0"}, {"topk", 40}, {"num_heads", 2}, {"nope", 16},
                               {"rope", 8}, {"v", 16}, {"seq_lens", {150}}, {"cache_lens", {100}}}},
      {"two_v_blocks", json{{"num_heads", 2}, {"nope", 16}, {"rope", 8}, {"v", 136}, {"seq_lens", {90}},
                            {"cache_lens", {70}}}}};
  for_cases_and_seeds(*driver, cases, [&](const json&, std::uint64_t seed, const Bundle& inputs, const Bundle& expected) {
    const Bundle actual = run_forced_on<WgmmaMode>(*driver, inputs, expected, &cuda::wgmma_route::runs, true, seed);
    Bundle mma = inputs;
    {
      WgmmaMode m(core::RouteMode::off);
      ASSERT_TRUE(run_staged(*driver, mma, RunOptions{Backend::cuda}).ok());
    }
    for (const auto& out : actual.output_names())
      EXPECT_TRUE(actual.at(out).same_bytes(mma.at(out))) << "'" << out << "' differs from the mma.sync kernels'";
  });
}

// ---- op 4's ring kernel --------------------------------------------------------------------------
// Whether the ring kernel takes a case: bf16 caches; fp8 caches with qk_depth a multiple of 16 and
// either one scale per row, or codes and tail in whole 16-byte copies with scale groups of a
// multiple of 16 columns (the golden cases' rows are aligned, v_depth <= 512).
// Whether an fp8 case's rows have one scale each (no bf16 tail, one scale group).
bool one_scale_rows(const json& knobs, std::int64_t qk) {
  const std::int64_t gran = knobs.value("quant_granularity", std::int64_t{0});
  return knobs.value("tail_size", std::int64_t{0}) == 0 && (gran == 0 || gran >= qk);
}
bool ring_takes(const json& knobs, const Bundle& b) {
  if (b.at("q").shape()[0] == 0) return false;
  if (knobs.value("cache_dtype", "bf16") == "bf16") return true;
  const std::int64_t qk = b.params.at("qk_depth").get<std::int64_t>();
  const std::int64_t wt = knobs.value("tail_size", std::int64_t{0}), wq = qk - wt;
  const std::int64_t gran = knobs.value("quant_granularity", std::int64_t{0}) == 0 ? wq : knobs.value("quant_granularity", std::int64_t{0});
  if (qk % 16 != 0) return false;
  if (one_scale_rows(knobs, qk)) return true;
  return wq % 16 == 0 && wt % 8 == 0 && gran % 16 == 0;
}

// Every op 4 case, and shapes the matrix lacks (two head groups with a partial one, five steps so
// that the ring's stages are reused, on bf16, single-scale fp8 and FlashMLA V32 caches, v_depth
// ending inside a 16-column pair of either half or reaching into a split row's tail), with the
// ring forced on: it takes every case it can (the others stay on the first kernel), passes the
// golden comparison and gives the same bits with the warps run alone. The emulator lands each
// cp.async copy only at its wait (reads before read NaN), so a stage read too early fails, and
// with the warps run one after another so does a stage refilled while another warp reads it. The
// automatic mode takes it for calls of 64 heads or more.
std::vector<std::pair<std::string, json>> ring_cases(const goldens::OpDriver& driver) {
  std::vector<std::pair<std::string, json>> cases = matrix_cases(driver);
  cases.emplace_back("two_head_groups", json{{"num_q_heads", 70}, {"T", 2}, {"indices_stride", 96}, {"sink", true},
                                             {"max_logits", true}});
  // Either side of the automatic mode's threshold (64 heads).
  cases.emplace_back("heads_64", json{{"T", 2}, {"num_q_heads", 64}, {"qk_depth", 64}, {"v_depth", 32},
                                      {"indices_stride", 48}, {"page_size", 16}});
  cases.emplace_back("heads_63", json{{"T", 2}, {"num_q_heads", 63}, {"qk_depth", 64}, {"v_depth", 32},
                                      {"indices_stride", 48}, {"page_size", 16}});
  cases.emplace_back("five_steps", json{{"T", 5}, {"num_q_heads", 3}, {"qk_depth", 40}, {"v_depth", 24},
                                        {"indices_stride", 160}, {"page_size", 5}, {"seq_lens", {300, 200}},
                                        {"invalid_fraction", 0.3}, {"empty_row_fraction", 0.2}});
  cases.emplace_back("v_past_a_half", json{{"T", 2}, {"num_q_heads", 17}, {"qk_depth", 320}, {"v_depth", 264},
                                           {"indices_stride", 40}, {"page_size", 16}});
  cases.emplace_back("v32_five_steps", json{{"T", 2}, {"num_q_heads", 3}, {"indices_stride", 160},
                                            {"seq_lens", {300, 200}}, {"cache_dtype", "f8e4m3"}, {"tail_size", 64},
                                            {"quant_granularity", 128}, {"nan_row", true}, {"sink", true},
                                            {"invalid_fraction", 0.2}, {"spare_blocks", 8}});
  cases.emplace_back("tail_in_v", json{{"T", 3}, {"num_q_heads", 5}, {"qk_depth", 64}, {"v_depth", 64},
                                       {"indices_stride", 96}, {"page_size", 16}, {"cache_dtype", "f8e4m3"},
                                       {"tail_size", 16}, {"quant_granularity", 16}, {"scale_dtype", "e8m0"},
                                       {"spare_blocks", 8}});
  cases.emplace_back("fp8_five_steps", json{{"T", 5}, {"num_q_heads", 3}, {"qk_depth", 64}, {"v_depth", 48},
                                            {"indices_stride", 160}, {"page_size", 5}, {"seq_lens", {300, 200}},
                                            {"cache_dtype", "f8e4m3"}, {"nan_row", true}, {"sink", true},
                                            {"invalid_fraction", 0.3}, {"spare_blocks", 8}});
  return cases;
}

TEST(EmulatedCudaRing, TakesEveryCaseItCanAndMatchesTheReference) {
  const goldens::OpDriver* driver = goldens::find_driver("sparse_mla_prefill");
  ASSERT_NE(driver, nullptr);
  int taken_cases = 0, automatic_cases = 0;
  for_cases_and_seeds(*driver, ring_cases(*driver),
                      [&](const json& knobs, std::uint64_t seed, const Bundle& inputs, const Bundle& expected) {
    const bool takes = ring_takes(knobs, inputs);
    run_forced_on<RingMode>(*driver, inputs, expected, &cuda::sparse_mla_ring::runs, takes, seed);
    taken_cases += takes && seed == 1;
    if (seed == 1 && takes) {
      RingMode m(core::RouteMode::automatic);
      const bool by_default = inputs.at("q").shape()[1] >= static_cast<std::int64_t>(cuda::sparse_mla_ring::kAutoMinHeads);
      const long before = cuda::sparse_mla_ring::runs();
      Bundle again = inputs;
      ASSERT_TRUE(run_staged(*driver, again, RunOptions{Backend::cuda}).ok());
      EXPECT_EQ(cuda::sparse_mla_ring::runs() - before, by_default ? 1 : 0) << "the automatic mode";
      automatic_cases += by_default;
    }
  });
  EXPECT_GE(taken_cases, 28) << "the bf16, single-scale fp8 and FlashMLA cases of the matrix";
  EXPECT_GE(automatic_cases, 2) << "two_head_groups and heads_64";
  EXPECT_LT(automatic_cases, taken_cases) << "cases of fewer heads";
}

// The ring kernel's cases with the wgmma kernels on as well: its scores run on warpgroup products
// over Q and the stages (fp8: the decoded rows) laid out as core matrices, per scale group on
// FlashMLA's split rows, and with v_depth 512 its P·V too (V read N-major from the stage, P as
// core matrices; other widths and grouped rows on mma.sync from the same layouts); the golden
// comparison passes and the outputs are the bits of the ring kernel on mma.sync (the emulation
// sums both alike).
TEST(EmulatedCudaWgmma, RingKernelsScoresGiveTheBitsOfTheMmaKernel) {
  const goldens::OpDriver* driver = goldens::find_driver("sparse_mla_prefill");
  ASSERT_NE(driver, nullptr);
  RingMode ring(core::RouteMode::on);
  const int taken = expect_wgmma_bits(*driver, ring_cases(*driver), ring_takes, true);
  EXPECT_GE(taken, 28) << "every case the ring kernel takes";
}

// The ring kernel's cases with its wide steps forced on (64 slots a step in two stages) and its
// products on wgmma: exactly the bf16 cases the ring kernel takes run on them, pass the golden
// comparison and overrun no output, with the same bits under every schedule of the emulator. The
// five-step cases and the matrix's long rows turn both stages over several times; a copy poisons
// its destination at the issue and lands only at its wait, so a stage read before its copies
// landed fails, and with the warps run one after another so does a stage refilled while another
// warp still reads it. The automatic mode never takes them.
TEST(EmulatedCudaRing, WideStepsTakeTheBf16CasesAndMatchTheReference) {
  const goldens::OpDriver* driver = goldens::find_driver("sparse_mla_prefill");
  ASSERT_NE(driver, nullptr);
  RingMode ring(core::RouteMode::on);
  WgmmaMode wgmma(core::RouteMode::on);
  int taken_cases = 0;
  for_cases_and_seeds(*driver, ring_cases(*driver),
                      [&](const json& knobs, std::uint64_t seed, const Bundle& inputs, const Bundle& expected) {
    const bool takes = ring_takes(knobs, inputs) && knobs.value("cache_dtype", "bf16") == "bf16";
    run_forced_on<WideMode>(*driver, inputs, expected, &cuda::sparse_mla_ring::wide_runs, takes, seed);
    taken_cases += takes && seed == 1;
    if (seed == 1) {
      WideMode m(core::RouteMode::automatic);
      const long before = cuda::sparse_mla_ring::wide_runs();
      Bundle again = inputs;
      ASSERT_TRUE(run_staged(*driver, again, RunOptions{Backend::cuda}).ok());
      EXPECT_EQ(cuda::sparse_mla_ring::wide_runs(), before) << "taken in the automatic mode";
    }
  });
  EXPECT_GE(taken_cases, 28) << "the bf16 cases of the matrix and of ring_cases";
}

// The ring kernel's cases with P in registers forced on and its products on wgmma, on 32-slot steps
// and then on wide steps: taken exactly by the cases the ring kernel takes with v_depth 512 and
// bf16 rows or one scale a row (most of the matrix: qk 576, v 512 by default), they pass the golden
// comparison, overrun no output, give the same bits under every schedule of the emulator, and the
// bits of P through shared memory. The products of a half's own P are issued before the barrier
// that publishes the other half's, so with the warps run one after another a product reading the
// other half's P early reads the last step's (or the poisoned start) and fails. The automatic mode
// never takes it.
TEST(EmulatedCudaRing, PInRegistersGivesTheBitsOfPThroughSharedMemory) {
  const goldens::OpDriver* driver = goldens::find_driver("sparse_mla_prefill");
  ASSERT_NE(driver, nullptr);
  RingMode ring(core::RouteMode::on);
  WgmmaMode wgmma(core::RouteMode::on);
  for (const bool wide : {false, true}) {
    SCOPED_TRACE(wide ? "wide steps" : "32-slot steps");
    WideMode w(wide ? core::RouteMode::on : core::RouteMode::off);
    int taken_cases = 0;
    for_cases_and_seeds(*driver, ring_cases(*driver),
                        [&](const json& knobs, std::uint64_t seed, const Bundle& inputs, const Bundle& expected) {
      const bool bf16 = knobs.value("cache_dtype", "bf16") == "bf16";
      if (wide && !bf16) return;  // fp8 rows take no wide steps: the first pass ran them
      const bool takes = ring_takes(knobs, inputs) && inputs.params.at("v_depth").get<std::int64_t>() == 512 &&
                         (bf16 || one_scale_rows(knobs, inputs.params.at("qk_depth").get<std::int64_t>()));
      const Bundle actual =
          run_forced_on<PRegsMode>(*driver, inputs, expected, &cuda::sparse_mla_ring::p_regs_runs, takes, seed);
      taken_cases += takes && seed == 1;
      Bundle shared = inputs;
      {
        PRegsMode m(core::RouteMode::automatic);
        const long before = cuda::sparse_mla_ring::p_regs_runs();
        ASSERT_TRUE(run_staged(*driver, shared, RunOptions{Backend::cuda}).ok());
        EXPECT_EQ(cuda::sparse_mla_ring::p_regs_runs(), before) << "taken in the automatic mode";
      }
      for (const auto& out : actual.output_names())
        EXPECT_TRUE(actual.at(out).same_bytes(shared.at(out))) << "'" << out << "' differs from P through shared memory";
    });
    EXPECT_GE(taken_cases, wide ? 7 : 10) << "the cases of v_depth 512 (wide: bf16 only)";
  }
}

// Each case (seeds 1 and 2) on the emulated cuda back-end against the reference: the golden
// comparison passes and no output is overrun.
void expect_cases_match_reference(const goldens::OpDriver& driver, const std::vector<json>& cases) {
  for (const json& knobs : cases)
    for (std::uint64_t seed : {1, 2}) {
      SCOPED_TRACE(knobs.dump() + " seed " + std::to_string(seed));
      const Bundle inputs = driver.generate(knobs, seed);
      Bundle expected = inputs;
      ASSERT_TRUE(driver.run(expected, RunOptions{Backend::reference}).ok());
      Bundle actual = inputs;
      const Status s = run_staged(driver, actual, RunOptions{Backend::cuda});
      ASSERT_TRUE(s.ok()) << s.message;
      for (const auto& c : driver.compare(expected, actual)) EXPECT_TRUE(c.pass) << goldens::describe(c);
      for (const auto& out : actual.output_names()) EXPECT_TRUE(actual.at(out).guard_intact()) << out << " overrun";
    }
}

// ---- op 1's key gather on both paths ------------------------------------------------------------
// The golden matrix's op 1 cases have head_dim a multiple of 16, where the codes arrive 16 at a
// time by cp.async into a ring of two key tiles; head dims that are not (24, 40) take the byte
// loads; a long row (11 key tiles in one chunk) turns the ring many times; 72 and 40 heads split
// into groups of head tiles with a partial last group. Each against the reference.
TEST(EmulatedCudaIndexer, BothKeyGathersMatchTheReference) {
  const goldens::OpDriver* driver = goldens::find_driver("lightning_indexer");
  ASSERT_NE(driver, nullptr);
  const std::vector<json> cases = {
      {{"head_dim", 24}, {"num_heads", 4}, {"seq_lens", {9, 4}}, {"cache_lens", {70, 3}}, {"top_k", 12}, {"page_size", 8}},
      {{"head_dim", 40}, {"num_heads", 3}, {"seq_lens", {5}}, {"cache_lens", {150}}, {"top_k", 20}, {"page_size", 16},
       {"mask", "none"}},
      {{"head_dim", 32}, {"num_heads", 4}, {"seq_lens", {3, 2}}, {"cache_lens", {700, 90}}, {"top_k", 40}, {"page_size", 16}},
      // Head tiles in groups that share the key fragments: five tiles with eight rows a block (a
      // group of four and one of one), three with four rows (groups of two: two and one).
      {{"head_dim", 32}, {"num_heads", 72}, {"seq_lens", {9, 4}}, {"cache_lens", {40, 3}}, {"top_k", 16}, {"page_size", 16}},
      {{"head_dim", 48}, {"num_heads", 40}, {"seq_lens", {5, 4}}, {"cache_lens", {70, 9}}, {"top_k", 16}, {"page_size", 8}},
  };
  expect_cases_match_reference(*driver, cases);
}

// ---- op 2's two selections ---------------------------------------------------------------------
// The golden matrix's op 2 cases select by a warp per (row, head) (rows of at most 256 blocks,
// topk at most 64). Rows of 257-1024 blocks take the warp kernel's wider registers, more than 1024
// blocks or more than 64 winners the block kernel's radix select; exact data (ties), NaN keys,
// forced blocks and reduce_heads on either. Each against the reference.
TEST(EmulatedCudaMsa, EverySelectionMatchesTheReference) {
  const goldens::OpDriver* driver = goldens::find_driver("msa_block_indexer");
  ASSERT_NE(driver, nullptr);
  const std::vector<json> cases = {
      // warp, 32 candidates a lane: up to 351 blocks
      {{"seq_lens", {3, 2}}, {"prefix_lens", {700, 400}}, {"block_size", 2}, {"topk", 20}, {"idx_head_dim", 16},
       {"init_blocks", 1}, {"local_blocks", 2}, {"data", "exact"}, {"scale", 0.125}},
      {{"seq_lens", {2, 1}}, {"prefix_lens", {900, 30}}, {"block_size", 1}, {"topk", 64}, {"idx_head_dim", 16},
       {"nan_keys", 6}, {"num_index_heads", 4}, {"reduce_heads", true}},
      // block: more than 64 winners
      {{"seq_lens", {4, 2}}, {"prefix_lens", {300, 150}}, {"block_size", 2}, {"topk", 70}, {"idx_head_dim", 16},
       {"init_blocks", 1}, {"local_blocks", 2}, {"data", "exact"}, {"scale", 0.125}},
      // block: more than 1024 blocks
      {{"seq_lens", {2}}, {"prefix_lens", {1100}}, {"block_size", 1}, {"topk", 5}, {"idx_head_dim", 16},
       {"nan_keys", 4}},
  };
  expect_cases_match_reference(*driver, cases);
}

// ---- remap_indices_to_rows on every lightning-indexer case ---------------------------------------
struct RemapCall {
  Bundle b;
  RemapIndicesArgs a;  // host views; views() gives the staged ones
  RemapIndicesArgs views() const {
    RemapIndicesArgs v = a;
    v.indices = b.at("out.output_indices").view();
    v.input_row_offsets = b.at("input_row_offsets").view();
    v.lookup_table = b.at("k_cache.lookup_table").view();
    v.rows = b.at("out.rows").view();
    return v;
  }
};

RemapCall remap_call(const goldens::OpDriver& driver, const goldens::CaseSpec& spec) {
  RemapCall c;
  c.b = driver.generate(spec.knobs, 1);
  EXPECT_TRUE(driver.run(c.b, RunOptions{Backend::reference}).ok());
  const Tensor& idx = c.b.at("out.output_indices");
  c.b.add("out.rows", DType::i32, idx.shape()).poison();
  c.a.page_size = c.b.params.at("page_size").get<std::int64_t>();
  c.a.num_blocks = c.b.at("k_cache.blocks").shape()[0];
  c.a = c.views();
  return c;
}

TEST(EmulatedCudaRemap, MatchesReferenceOnIndexerOutputs) {
  const goldens::OpDriver* driver = goldens::find_driver("lightning_indexer");
  ASSERT_NE(driver, nullptr);
  for (const auto& spec : driver->cases()) {
    RemapCall c = remap_call(*driver, spec);
    c.b.add("out.rows_reference", DType::i32, c.b.at("out.output_indices").shape()).poison();
    RemapIndicesArgs ra = c.a;
    ra.rows = c.b.at("out.rows_reference").view();
    ASSERT_TRUE(remap_indices_to_rows(ra, RunOptions{Backend::reference}).ok()) << spec.name;
    {
      goldens::DeviceStaging staging(c.b);
      ASSERT_TRUE(staging.upload_all().ok());
      const Counters before;
      const Status s = remap_indices_to_rows(c.views(), RunOptions{Backend::cuda});
      ASSERT_TRUE(s.ok()) << spec.name << ": " << s.message;
      EXPECT_LE(before.since().syncs, 1);
      ASSERT_TRUE(staging.finish().ok());
    }
    const Tensor& rows = c.b.at("out.rows");
    EXPECT_EQ(std::memcmp(rows.bytes(), c.b.at("out.rows_reference").bytes(), rows.nbytes()), 0) << spec.name;
    EXPECT_TRUE(rows.guard_intact());
  }
}

TEST(EmulatedCudaRemap, DeviceIndicesAreValidatedBeforeAnyWrite) {
  const goldens::OpDriver* driver = goldens::find_driver("lightning_indexer");
  ASSERT_NE(driver, nullptr);
  RemapCall c = remap_call(*driver, driver->cases().front());
  Tensor& idx = c.b.at("out.output_indices");
  ASSERT_GT(idx.numel(), 0);
  idx.data<std::int32_t>()[0] = -2;
  goldens::DeviceStaging staging(c.b);
  const Counters before;
  const Status s = remap_indices_to_rows(c.views(), RunOptions{Backend::cuda});
  EXPECT_EQ(s.code, StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("remap_indices_to_rows: indices[0, 0]=-2"), std::string::npos) << s.message;
  EXPECT_EQ(before.since().launches, 0);
  ASSERT_TRUE(staging.finish().ok());
  Tensor poisoned = c.b.at("out.rows");
  poisoned.poison();
  EXPECT_TRUE(c.b.at("out.rows").same_bytes(poisoned));
}

// ---- calls that must fail before anything is written ---------------------------------------------
// A content error in an index tensor that only the host mirror lets the validator see: each
// operator's first golden case, one value broken.
// The first golden case whose inputs include `tensor`.
Bundle first_case_with(const goldens::OpDriver& driver, const std::string& tensor) {
  for (const auto& spec : driver.cases()) {
    Bundle b = driver.generate(spec.knobs, 1);
    if (b.has(tensor)) return b;
  }
  ADD_FAILURE() << driver.name() << ": no golden case has " << tensor;
  return driver.generate(driver.cases().front().knobs, 1);
}

void break_index_tensor(const std::string& op, Bundle& b, std::string* field) {
  if (op == "sparse_mla_prefill") {
    // The only tensor its validator reads.
    ASSERT_TRUE(b.has("topk_lengths"));
    b.at("topk_lengths").data<std::uint32_t>()[0] = 1u << 30;
    *field = "sparse_mla_prefill: topk_lengths[0]=1073741824";
    return;
  }
  Tensor& iro = b.at("input_row_offsets");
  ASSERT_GE(iro.numel(), 2);
  iro.data<std::uint32_t>()[iro.numel() - 1] += 1;  // no longer the row count
  *field = op + ": input_row_offsets[";
}

TEST(EmulatedCudaValidation, DeviceIndexTensorsAreValidatedBeforeAnyWrite) {
  for (const char* op : kOps) {
    SCOPED_TRACE(op);
    const goldens::OpDriver* driver = goldens::find_driver(op);
    ASSERT_NE(driver, nullptr);
    Bundle b = first_case_with(*driver, op == std::string("sparse_mla_prefill") ? "topk_lengths" : "input_row_offsets");
    std::string expected;
    break_index_tensor(op, b, &expected);
    const long live_before = mlakit_cuda_emu::live_allocations();
    Counters during;
    const Status s = run_staged(*driver, b, RunOptions{Backend::cuda}, &during);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code, StatusCode::invalid_argument);
    EXPECT_NE(s.message.find(expected), std::string::npos) << s.message;
    EXPECT_EQ(during.launches, 0);
    EXPECT_LE(during.syncs, 1);
    EXPECT_EQ(mlakit_cuda_emu::live_allocations(), live_before);
    expect_nothing_written(b, op);
  }
}

// Without a device the call is unavailable with the driver's reason, before any copy.
TEST(EmulatedCudaValidation, NoDeviceIsUnavailableWithTheReason) {
  for (const char* op : kOps) {
    SCOPED_TRACE(op);
    const goldens::OpDriver* driver = goldens::find_driver(op);
    ASSERT_NE(driver, nullptr);
    for (Backend be : {Backend::cuda, Backend::automatic}) {
      Bundle b = driver->generate(driver->cases().front().knobs, 1);
      Counters during;
      Status s;
      {
        const int saved = mlakit_cuda_emu::set_device_count(0);
        s = run_staged(*driver, b, RunOptions{be}, &during);
        mlakit_cuda_emu::set_device_count(saved);
      }
      EXPECT_EQ(s.code, StatusCode::unavailable) << s.message;
      EXPECT_NE(s.message.find(std::string(op) + ": backend=cuda is unavailable: no usable GPU: "
                                                  "no CUDA-capable device is detected"),
                std::string::npos)
          << s.message;
      EXPECT_EQ(during.launches, 0);
      EXPECT_EQ(during.copies, 0);
      EXPECT_EQ(during.syncs, 0);
      expect_nothing_written(b, op);
    }
  }
}

// Device memory on a host back-end, host memory on the cuda back-end: refused, nothing copied.
TEST(EmulatedCudaValidation, BackEndAndMemorySpaceMustAgree) {
  for (const char* op : kOps) {
    SCOPED_TRACE(op);
    const goldens::OpDriver* driver = goldens::find_driver(op);
    ASSERT_NE(driver, nullptr);
    for (Backend be : {Backend::cpu, Backend::reference}) {
      Bundle b = driver->generate(driver->cases().front().knobs, 1);
      Counters during;
      const Status s = run_staged(*driver, b, RunOptions{be}, &during);
      EXPECT_EQ(s.code, StatusCode::invalid_argument);
      EXPECT_NE(s.message.find(std::string(op) + ": backend=" + backend_name(be) +
                               " but the tensors are in device memory (expected host memory)"),
                std::string::npos)
          << s.message;
      EXPECT_EQ(during.launches + during.copies + during.syncs, 0);
      expect_nothing_written(b, op);
    }
    Bundle b = driver->generate(driver->cases().front().knobs, 1);
    const Counters before;
    const Status s = driver->run(b, RunOptions{Backend::cuda});  // not staged: host memory
    EXPECT_EQ(s.code, StatusCode::invalid_argument);
    EXPECT_NE(s.message.find(std::string(op) + ": backend=cuda but the tensors are in host memory"), std::string::npos)
        << s.message;
    EXPECT_EQ(before.since().launches + before.since().copies + before.since().syncs, 0);
    expect_nothing_written(b, op);
  }
}

// Host calls are unchanged by the device path: no copy, no synchronization, no launch.
TEST(EmulatedCudaValidation, HostCallsTouchNoDevice) {
  for (const char* op : kOps) {
    SCOPED_TRACE(op);
    const goldens::OpDriver* driver = goldens::find_driver(op);
    ASSERT_NE(driver, nullptr);
    Bundle b = driver->generate(driver->cases().front().knobs, 1);
    const Counters before;
    const Status s = driver->run(b, RunOptions{Backend::automatic});
    ASSERT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(before.since().launches + before.since().copies + before.since().syncs, 0);
  }
}

// Mixed memory: one call uses one memory space. A validator that compares every tensor's space
// reports it; where a validator reads host index tensors beside device data (msa_block_indexer),
// the cuda branch refuses them.
TensorView host_view(const Tensor& t) {
  TensorView v = t.view();
  v.data = const_cast<std::uint8_t*>(t.bytes());
  v.memory = MemorySpace::host;
  return v;
}

TEST(EmulatedCudaValidation, MixedMemoryIsRefusedBeforeAnyWrite) {
  {
    const goldens::OpDriver* driver = goldens::find_driver("lightning_indexer");
    ASSERT_NE(driver, nullptr);
    Bundle b = driver->generate(driver->cases().front().knobs, 1);
    const json& p = b.params;
    LightningIndexerDesc d;
    d.num_heads = p.at("num_heads").get<std::int64_t>();
    d.head_dim = p.at("head_dim").get<std::int64_t>();
    d.top_k = p.at("top_k").get<std::int64_t>();
    d.mask = p.at("mask").get<std::string>() == "causal" ? IndexerMask::causal : IndexerMask::none;
    b.add("out.output_indices", DType::i32, {b.at("q").shape()[0], d.top_k}).poison();
    goldens::DeviceStaging staging(b);
    LightningIndexerArgs a;
    a.q = host_view(b.at("q"));  // host q beside device everything else
    a.q_s = b.at("q_s").view();
    a.input_row_offsets = b.at("input_row_offsets").view();
    a.k_cache = goldens::cache_view(b, "k_cache", p.at("quant_granularity").get<std::int64_t>());
    a.layer_idx = p.at("layer_idx").get<std::uint32_t>();
    a.output_indices = b.at("out.output_indices").view();
    const Counters before;
    const Status s = lightning_indexer(d, a, RunOptions{Backend::cuda});
    EXPECT_EQ(s.code, StatusCode::invalid_argument);
    EXPECT_NE(s.message.find("lightning_indexer: input_row_offsets is in device memory"), std::string::npos)
        << s.message;
    EXPECT_EQ(before.since().launches + before.since().copies + before.since().syncs, 0);
    ASSERT_TRUE(staging.finish().ok());
    expect_nothing_written(b, "lightning_indexer");
  }
  {
    const goldens::OpDriver* driver = goldens::find_driver("msa_block_indexer");
    ASSERT_NE(driver, nullptr);
    Bundle b = driver->generate(driver->cases().front().knobs, 1);
    const json& p = b.params;
    MsaBlockIndexerDesc d;
    d.num_index_heads = p.at("num_index_heads").get<std::int64_t>();
    d.idx_head_dim = p.at("idx_head_dim").get<std::int64_t>();
    d.block_size = p.at("block_size").get<std::int64_t>();
    d.topk = p.at("topk").get<std::int64_t>();
    d.init_blocks = p.at("init_blocks").get<std::int64_t>();
    d.local_blocks = p.at("local_blocks").get<std::int64_t>();
    d.scale = p.at("scale").get<float>();
    b.add("out.out_idxs", DType::i32, {d.num_index_heads, b.at("q").shape()[0], d.topk}).poison();
    goldens::DeviceStaging staging(b);
    MsaBlockIndexerArgs a;
    a.q = b.at("q").view();
    a.input_row_offsets = host_view(b.at("input_row_offsets"));  // host index tensors beside device data
    a.prefix_lens = host_view(b.at("prefix_lens"));
    a.k_cache = goldens::cache_view(b, "k_cache");
    a.k_cache.lookup_table = host_view(b.at("k_cache.lookup_table"));
    a.k_cache.cache_lengths = host_view(b.at("k_cache.cache_lengths"));
    a.layer_idx = p.at("layer_idx").get<std::uint32_t>();
    a.out_idxs = b.at("out.out_idxs").view();
    const Counters before;
    const Status s = msa_block_indexer(d, a, RunOptions{Backend::cuda});
    EXPECT_EQ(s.code, StatusCode::invalid_argument);
    EXPECT_NE(s.message.find("msa_block_indexer: input_row_offsets is in host memory but q is in device memory "
                             "(one call uses one)"),
              std::string::npos)
        << s.message;
    EXPECT_EQ(before.since().launches + before.since().copies + before.since().syncs, 0);
    ASSERT_TRUE(staging.finish().ok());
    expect_nothing_written(b, "msa_block_indexer");
  }
}

}  // namespace
}  // namespace mlakit
