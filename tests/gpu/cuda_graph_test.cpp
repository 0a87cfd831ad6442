// The cuda back-end on a real GPU, as an engine drives it: plan once, then run() captured in a CUDA
// graph (strict global capture mode: a host copy, a stream wait or a synchronous allocation inside
// run() invalidates the capture) and the graph replayed 61 times, a decode step's layer loop. The
// replays start from poisoned outputs and must give the bits of the one-shot call. A kernel-side
// input error (topk_lengths past indices_stride) raises the device flag that check_device_errors
// reports once. Without a GPU every test skips, unless MLAKIT_REQUIRE_GPU=1 (a GPU host's run,
// where a skip would be a false green) makes that a failure.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "goldens/common/device_staging.hpp"
#include "goldens/common/driver.hpp"
#include "mlakit/mlakit.hpp"
#include "support/pristine_outputs.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;

constexpr int kLayers = 61;

bool gpu_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define MLAKIT_NEED_GPU()                                                                      \
  do {                                                                                         \
    if (!gpu_present()) {                                                                      \
      const char* req = std::getenv("MLAKIT_REQUIRE_GPU");                                     \
      if (req != nullptr && std::strcmp(req, "1") == 0) FAIL() << "no usable CUDA device";     \
      GTEST_SKIP() << "no CUDA device";                                                        \
    }                                                                                          \
  } while (0)

Status cuda_status(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return Status::success();
  return Status::error(StatusCode::internal, "test", what, std::string(what) + ": " + cudaGetErrorString(e));
}

class CudaGraph : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGraph, SixtyOneReplaysOfACapturedRunGiveTheOneShotBits) {
  MLAKIT_NEED_GPU();
  const goldens::OpDriver* driver = goldens::find_driver(GetParam());
  ASSERT_NE(driver, nullptr);
  for (const std::uint64_t seed : {1u, 2u}) {
    const Bundle inputs = driver->generate(driver->cases().front().knobs, seed);

    Bundle one_shot = inputs;
    {
      goldens::DeviceStaging staging(one_shot);
      ASSERT_TRUE(staging.active());
      const Status s = driver->run(one_shot, RunOptions{Backend::cuda});
      ASSERT_TRUE(s.ok()) << s.message;
      ASSERT_TRUE(staging.finish().ok());
    }

    Bundle planned = inputs;
    driver->prepare_outputs(planned);
    const Bundle fresh = planned;  // poisoned outputs, in-place caches as given
    // mla_prefill_fp8 rewrites q and the new cache rows in place: its captured layer starts with
    // device-to-device copies of the outputs as prepared, so that every replay repeats one result.
    const bool in_place = GetParam() == "mla_prefill_fp8";
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    {
      goldens::DeviceStaging staging(planned);
      ASSERT_TRUE(staging.upload_all().ok());
      // The uploads went to the legacy default stream, which a non-blocking stream does not wait for.
      ASSERT_TRUE(staging.synchronize().ok());
      test::PristineOutputs pristine;
      if (in_place) {
        ASSERT_EQ(pristine.make(planned, fresh), cudaSuccess);
      }
      goldens::PlannedRun pr;
      pr.options.cuda_stream = stream;
      pr.context.cuda_stream = stream;
      pr.runner = [&](const std::function<Status()>& run_once) -> Status {
        const auto layer = [&]() -> Status {
          if (in_place)
            if (Status c = cuda_status("restoring the outputs on the device", pristine.restore(stream)); !c.ok())
              return c;
          return run_once();
        };
        // An engine warms up once before it captures (first-use attributes, lazy loading).
        Status s = layer();
        if (!s.ok()) return s;
        if (Status c = cuda_status("cudaStreamSynchronize", cudaStreamSynchronize(stream)); !c.ok()) return c;
        if (Status c = cuda_status("cudaStreamBeginCapture", cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
            !c.ok())
          return c;
        s = layer();
        cudaGraph_t graph = nullptr;
        const cudaError_t end = cudaStreamEndCapture(stream, &graph);
        if (!s.ok()) return s;
        if (Status c = cuda_status("cudaStreamEndCapture (run() did something a graph cannot hold)", end); !c.ok())
          return c;
        cudaGraphExec_t exec = nullptr;
        Status c = cuda_status("cudaGraphInstantiate", cudaGraphInstantiate(&exec, graph, 0));
        // The replays start from the state before the call: poisoned outputs, the caches as given.
        for (const auto& name : fresh.output_names()) {
          if (!c.ok()) break;
          const TensorView dev = planned.at(name).view();
          c = cuda_status("restoring an output", cudaMemcpy(dev.data, fresh.at(name).bytes(), fresh.at(name).nbytes(),
                                                            cudaMemcpyHostToDevice));
        }
        if (c.ok()) c = cuda_status("cudaDeviceSynchronize", cudaDeviceSynchronize());
        for (int i = 0; c.ok() && i < kLayers; ++i) c = cuda_status("cudaGraphLaunch", cudaGraphLaunch(exec, stream));
        if (c.ok()) c = cuda_status("cudaStreamSynchronize", cudaStreamSynchronize(stream));
        if (exec != nullptr) cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        return c;
      };
      const Status s = driver->call_planned(planned, &pr);
      ASSERT_TRUE(s.ok()) << s.message;
      EXPECT_EQ(pr.implementation, "cuda");
      ASSERT_TRUE(staging.finish().ok());
    }
    cudaStreamDestroy(stream);
    ASSERT_TRUE(check_device_errors().ok());
    for (const auto& name : one_shot.output_names())
      EXPECT_TRUE(planned.at(name).same_bytes(one_shot.at(name)))
          << name << " after the replays differs from the one-shot call (seed " << seed << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaGraph,
                         ::testing::Values("lightning_indexer", "msa_block_indexer", "mla_prefill_fp8",
                                           "sparse_mla_prefill", "fused_qkv_paged"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(CudaDeviceErrors, TopkLengthsPastTheStrideRaiseTheFlag) {
  MLAKIT_NEED_GPU();
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
  ASSERT_TRUE(s.ok()) << s.message;
  const Status e = check_device_errors();
  EXPECT_EQ(e.op, "sparse_mla_prefill");
  EXPECT_EQ(e.field, "topk_lengths");
  EXPECT_TRUE(check_device_errors().ok()) << "the flag is cleared once reported";
  ASSERT_TRUE(staging.finish().ok());
}

}  // namespace
}  // namespace mlakit
