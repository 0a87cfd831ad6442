// Plan once, run many on device memory, with the cuda kernels on the CPU emulation: a decode step's
// 61-layer loop of run() copies nothing to the host, never waits on a stream (so it can be
// captured in a CUDA graph) and allocates no device memory (the plan keeps the temporaries), with
// the same bits as the one-shot call; a plan can be made from the
// engine's host copies of the metadata; and what only the device holds (op 4's topk_lengths, the
// remap's indices, GPTQ's g_idx) is caught by the device error flag, reported once and cleared.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/common/route_switch.hpp"
#include "cuda/fused_qkv_paged.hpp"
#include "cuda_runtime.h"
#include "goldens/common/cache_layout.hpp"
#include "goldens/common/device_staging.hpp"
#include "goldens/common/driver.hpp"
#include "mlakit/mlakit.hpp"
#include "support/pristine_outputs.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::Tensor;

constexpr int kLayers = 61;  // DeepSeek-V3's layer count: one plan, 61 runs

struct Counters {
  long launches = mlakit_cuda_emu::launches();
  long copies = mlakit_cuda_emu::copies_to_host();
  long syncs = mlakit_cuda_emu::stream_synchronizations();
  long allocs = mlakit_cuda_emu::allocations_made();
};

// The op's smallest golden case (emulating 61 runs of it stays quick).
goldens::CaseSpec small_case(const goldens::OpDriver& d) {
  goldens::CaseSpec best = d.cases().front();
  double least = 1e300;
  for (const auto& c : d.cases()) {
    const double w = d.work(d.generate(c.knobs, 1)).flops;
    if (w > 0 && w < least) {
      least = w;
      best = c;
    }
  }
  return best;
}

// One plan of `spec`, `runs` runs on device memory: no copy to the host, no stream wait, no
// allocation after the plan, and the bits of the one-shot call.
void expect_quiet_planned_runs(const goldens::OpDriver* driver, const goldens::CaseSpec& spec, int runs) {
  const Bundle inputs = driver->generate(spec.knobs, 1);

  // The one-shot call on device memory.
  Bundle one_shot = inputs;
  {
    goldens::DeviceStaging staging(one_shot);
    ASSERT_TRUE(staging.upload_all().ok());
    const Status s = driver->run(one_shot, RunOptions{Backend::cuda});
    ASSERT_TRUE(s.ok()) << s.message;
    ASSERT_TRUE(staging.finish().ok());
  }

  Bundle planned = inputs;
  driver->prepare_outputs(planned);
  // mla_prefill_fp8 rewrites q and the new cache rows in place: each of its runs starts from the
  // outputs as prepared, restored device to device, as an engine's layer starts from its inputs.
  const bool in_place = std::string(driver->name()) == "mla_prefill_fp8";
  const Bundle fresh = planned;
  Counters after_plan, after_runs;
  {
    goldens::DeviceStaging staging(planned);
    ASSERT_TRUE(staging.upload_all().ok());
    test::PristineOutputs pristine;
    if (in_place) {
      ASSERT_EQ(pristine.make(planned, fresh), cudaSuccess);
    }
    goldens::PlannedRun pr;
    pr.runs = runs;
    pr.after_plan = [&] { after_plan = Counters{}; };
    if (in_place)
      pr.runner = [&](const std::function<Status()>& run_once) {
        Status s;
        for (int i = 0; s.ok() && i < runs; ++i) {
          if (pristine.restore(nullptr) != cudaSuccess)
            return Status::error(StatusCode::internal, "test", "restore", "restoring the outputs failed");
          s = run_once();
        }
        return s;
      };
    const Status s = driver->call_planned(planned, &pr);
    after_runs = Counters{};
    ASSERT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(pr.implementation, "cuda");
    ASSERT_TRUE(staging.finish().ok());
  }
  EXPECT_EQ(after_runs.copies - after_plan.copies, 0) << "a run copied from the device";
  EXPECT_EQ(after_runs.syncs - after_plan.syncs, 0) << "a run waited on a stream";
  EXPECT_EQ(after_runs.allocs - after_plan.allocs, 0) << "a run allocated device memory (the plan keeps its temporaries)";
  EXPECT_GE(after_runs.launches - after_plan.launches, runs);
  ASSERT_TRUE(check_device_errors().ok());
  for (const auto& name : one_shot.output_names())
    EXPECT_TRUE(planned.at(name).same_bytes(one_shot.at(name))) << name << " differs from the one-shot call";
}

class EmulatedPlan : public ::testing::TestWithParam<std::string> {};

TEST_P(EmulatedPlan, SixtyOneRunsNeitherCopyWaitNorAllocate) {
  const goldens::OpDriver* driver = goldens::find_driver(GetParam());
  ASSERT_NE(driver, nullptr);
  expect_quiet_planned_runs(driver, small_case(*driver), kLayers);
}

// Op 5's GPTQ decode-once route needs a decoded-weight workspace: the plan sizes and keeps it.
TEST(EmulatedPlanGptq, TheDecodeOnceWorkspaceIsThePlans) {
  const goldens::OpDriver* driver = goldens::find_driver("fused_qkv_paged");
  ASSERT_NE(driver, nullptr);
  const core::RouteMode saved = cuda::gptq_decode_once::mode();
  cuda::gptq_decode_once::set_mode(core::RouteMode::on);
  goldens::CaseSpec spec;
  spec.name = "gptq_decode_once";
  spec.knobs = {{"weight_format", "gptq"}, {"has_zp", true}, {"group_size", 64}};
  expect_quiet_planned_runs(driver, spec, 3);
  cuda::gptq_decode_once::set_mode(saved);
}

INSTANTIATE_TEST_SUITE_P(Ops, EmulatedPlan,
                         ::testing::Values("lightning_indexer", "msa_block_indexer", "mla_prefill_fp8",
                                           "sparse_mla_prefill", "fused_qkv_paged"));

// An engine plans a device step from the host copies of its metadata it has before uploading, and
// names the step by id; the plan then reads nothing from the device.
TEST(EmulatedPlanFromHostCopies, TheStepIdStandsForTheDeviceMetadata) {
  const goldens::OpDriver* driver = goldens::find_driver("lightning_indexer");
  Bundle b = driver->generate(driver->cases().front().knobs, 1);
  Bundle expected = b;
  ASSERT_TRUE(driver->run(expected, RunOptions{Backend::reference}).ok());
  driver->prepare_outputs(b);
  const std::int64_t qg = b.params.at("quant_granularity");
  LightningIndexerDesc d;
  d.num_heads = b.params.at("num_heads");
  d.head_dim = b.params.at("head_dim");
  d.top_k = b.params.at("top_k");
  d.mask = b.params.at("mask") == "causal" ? IndexerMask::causal : IndexerMask::none;
  auto args = [&] {
    LightningIndexerArgs a;
    a.q = b.at("q").view();
    a.q_s = b.at("q_s").view();
    a.input_row_offsets = b.at("input_row_offsets").view();
    a.k_cache = goldens::cache_view(b, "k_cache", qg);
    a.layer_idx = b.params.at("layer_idx");
    a.output_indices = b.at("out.output_indices").view();
    return a;
  };
  const LightningIndexerArgs host = args();
  goldens::DeviceStaging staging(b);
  ASSERT_TRUE(staging.upload_all().ok());
  const LightningIndexerArgs dev = args();
  LightningIndexerArgs step = dev;  // device data, host metadata
  step.input_row_offsets = host.input_row_offsets;
  step.k_cache.lookup_table = host.k_cache.lookup_table;
  step.k_cache.cache_lengths = host.k_cache.cache_lengths;
  ASSERT_TRUE(check_device_errors().ok());  // the flag exists and is clear: the plan's check copies it once
  PlanOptions po;
  po.step_id = 41;
  LightningIndexerPlan p;
  const Counters before_plan;
  ASSERT_TRUE(plan(d, step, po, &p).ok());
  const Counters after_plan;
  EXPECT_LE(after_plan.copies - before_plan.copies, 1) << "only the device error flag is read back";
  RunContext ctx;
  ctx.step_id = 41;
  for (int layer = 0; layer < 3; ++layer) ASSERT_TRUE(run(p, dev, ctx).ok());
  const Counters after_runs;
  EXPECT_EQ(after_runs.copies - after_plan.copies, 0);
  EXPECT_EQ(after_runs.syncs - after_plan.syncs, 0);
  ctx.step_id = 42;
  EXPECT_EQ(run(p, dev, ctx).field, "context.step_id");
  ASSERT_TRUE(staging.finish().ok());
  for (const auto& c : driver->compare(expected, b)) EXPECT_TRUE(c.pass) << goldens::describe(c);
}

// topk_lengths past indices_stride on the device: the run reads indices_stride slots, raises the
// flag; check_device_errors reports it once, naming the operator and field, and clears it.
TEST(EmulatedDeviceErrors, TopkLengthsAreCheckedByTheKernel) {
  const goldens::OpDriver* driver = goldens::find_driver("sparse_mla_prefill");
  Bundle b;
  for (const auto& c : driver->cases()) {
    b = driver->generate(c.knobs, 1);
    if (b.has("topk_lengths") && b.at("topk_lengths").numel() > 0) break;
  }
  ASSERT_TRUE(b.has("topk_lengths"));
  b.at("topk_lengths").data<std::uint32_t>()[0] = 1u << 20;
  driver->prepare_outputs(b);
  goldens::DeviceStaging staging(b);
  ASSERT_TRUE(staging.upload_all().ok());
  goldens::PlannedRun pr;
  const Status s = driver->call_planned(b, &pr);
  ASSERT_TRUE(s.ok()) << "a run does not read device data back: " << s.message;
  const Status e = check_device_errors();
  EXPECT_EQ(e.code, StatusCode::invalid_argument);
  EXPECT_EQ(e.op, "sparse_mla_prefill");
  EXPECT_EQ(e.field, "topk_lengths");
  EXPECT_NE(e.message.find("a value above indices_stride"), std::string::npos) << e.message;
  EXPECT_TRUE(check_device_errors().ok()) << "the flag is cleared once reported";
  ASSERT_TRUE(staging.finish().ok());
}

TEST(EmulatedDeviceErrors, RemapIndicesAreCheckedByTheKernel) {
  const goldens::OpDriver* driver = goldens::find_driver("lightning_indexer");
  Bundle b = driver->generate(driver->cases().front().knobs, 1);
  ASSERT_TRUE(driver->run(b, RunOptions{Backend::reference}).ok());
  Tensor& idx = b.at("out.output_indices");
  ASSERT_GT(idx.numel(), 1);
  idx.data<std::int32_t>()[0] = -7;
  b.add("out.rows", DType::i32, idx.shape()).poison();
  RemapIndicesArgs a;
  a.page_size = b.params.at("page_size").get<std::int64_t>();
  a.num_blocks = b.at("k_cache.blocks").shape()[0];
  goldens::DeviceStaging staging(b);
  ASSERT_TRUE(staging.upload_all().ok());
  a.indices = b.at("out.output_indices").view();
  a.input_row_offsets = b.at("input_row_offsets").view();
  a.lookup_table = b.at("k_cache.lookup_table").view();
  a.rows = b.at("out.rows").view();
  RemapIndicesPlan p;
  ASSERT_TRUE(plan(a, PlanOptions{}, &p).ok());
  ASSERT_TRUE(run(p, a).ok());
  const Status e = check_device_errors();
  EXPECT_EQ(e.op, "remap_indices_to_rows");
  EXPECT_EQ(e.field, "indices");
  ASSERT_TRUE(staging.finish().ok());
  EXPECT_EQ(b.at("out.rows").data<std::int32_t>()[0], -1) << "a bad index is written as -1";
}

TEST(EmulatedDeviceErrors, GptqGroupIndicesAreCheckedByTheKernel) {
  const goldens::OpDriver* driver = goldens::find_driver("fused_qkv_paged");
  Bundle b;
  for (const auto& c : driver->cases()) {
    b = driver->generate(c.knobs, 1);
    if (b.has("g_idx") && b.at("input_row_offsets").data<std::uint32_t>()[b.at("input_row_offsets").numel() - 1] > 0)
      break;
  }
  ASSERT_TRUE(b.has("g_idx"));
  b.at("g_idx").data<std::int32_t>()[0] = 1 << 20;
  driver->prepare_outputs(b);
  goldens::DeviceStaging staging(b);
  ASSERT_TRUE(staging.upload_all().ok());
  goldens::PlannedRun pr;
  ASSERT_TRUE(driver->call_planned(b, &pr).ok());
  const Status e = check_device_errors();
  EXPECT_EQ(e.op, "fused_qkv_paged");
  EXPECT_EQ(e.field, "g_idx");
  ASSERT_TRUE(staging.finish().ok());
}

// The cuda kernels on caches laid out as engines keep them: the first golden cases of each
// operator, each layout, the same bits as on the contiguous cache.
TEST(EmulatedCacheLayouts, GiveTheBitsOfTheContiguousCache) {
  const char* const ops[] = {"lightning_indexer", "msa_block_indexer", "mla_prefill_fp8", "sparse_mla_prefill",
                             "fused_qkv_paged"};
  for (const char* op : ops) {
    const goldens::OpDriver* driver = goldens::find_driver(op);
    ASSERT_NE(driver, nullptr);
    const auto cases = driver->cases();
    for (std::size_t i = 0; i < cases.size() && i < 3; ++i) {
      for (goldens::CacheLayout layout : {goldens::CacheLayout::padded_blocks, goldens::CacheLayout::kv_interleaved,
                                          goldens::CacheLayout::layers_outer, goldens::CacheLayout::padded_rows}) {
        SCOPED_TRACE(std::string(op) + "/" + cases[i].name + "/" + goldens::cache_layout_name(layout));
        Bundle contiguous = driver->generate(cases[i].knobs, 1);
        Bundle relaid = contiguous;
        for (Bundle* b : {&contiguous, &relaid}) {
          driver->prepare_outputs(*b);
          goldens::DeviceStaging staging(*b);
          ASSERT_TRUE(staging.upload_all().ok());
          goldens::CacheRelayout scope(b == &relaid ? layout : goldens::CacheLayout::contiguous);
          const Status s = driver->call(*b, RunOptions{Backend::cuda});
          ASSERT_TRUE(s.ok()) << s.message;
          scope.finish();
          ASSERT_TRUE(staging.finish().ok());
        }
        for (const auto& name : contiguous.output_names())
          EXPECT_TRUE(relaid.at(name).same_bytes(contiguous.at(name))) << name;
      }
    }
  }
}

}  // namespace
}  // namespace mlakit
