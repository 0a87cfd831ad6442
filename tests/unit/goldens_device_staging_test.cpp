// goldens::DeviceStaging: inside a scope Tensor::view() serves device mirrors; finish() brings the
// out.* tensors back, checks the inputs and frees everything. "Device memory" is host memory from
// fake allocation functions that count allocations, uploads and downloads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "goldens/common/device_staging.hpp"
#include "goldens/common/driver.hpp"
#include "goldens/common/tensor.hpp"
#include "support/fake_device_memory.hpp"

namespace mlakit::goldens {
namespace {

using test_support::FakeDevice;

class DeviceStagingTest : public ::testing::Test {
 protected:
  void SetUp() override { FakeDevice::reset(); }
  void TearDown() override { EXPECT_TRUE(FakeDevice::live.empty()) << "device memory leaked"; }
  core::DeviceMemoryOps ops_ = FakeDevice::ops();
};

Bundle two_tensors() {
  Bundle b;
  Tensor& in = b.add("x", DType::f32, {2, 3});
  for (int i = 0; i < 6; ++i) in.data<float>()[i] = static_cast<float>(i);
  b.add("out.y", DType::i32, {4}).poison();
  return b;
}

TEST_F(DeviceStagingTest, WithoutMemoryFunctionsTheScopeIsInactive) {
  Bundle b = two_tensors();
  DeviceStaging staging(b, nullptr);
  EXPECT_FALSE(staging.active());
  EXPECT_EQ(current_staging(), nullptr);
  const TensorView v = b.at("x").view();
  EXPECT_EQ(v.memory, MemorySpace::host);
  EXPECT_EQ(v.data, b.at("x").bytes());
  EXPECT_TRUE(staging.finish().ok());
}

TEST_F(DeviceStagingTest, ViewsAreDeviceMirrorsUploadedOnceWithTheirGuardBytes) {
  Bundle b = two_tensors();
  DeviceStaging staging(b, &ops_);
  ASSERT_TRUE(staging.active());
  EXPECT_EQ(current_staging(), &staging);
  const TensorView v = b.at("x").view();
  EXPECT_EQ(v.memory, MemorySpace::device);
  EXPECT_NE(v.data, b.at("x").bytes());
  EXPECT_EQ(v.dtype, DType::f32);
  EXPECT_EQ(v.rank, 2);
  EXPECT_EQ(v.shape[1], 3);
  EXPECT_EQ(std::memcmp(v.data, b.at("x").bytes(), b.at("x").nbytes() + Tensor::kGuardBytes), 0);
  EXPECT_EQ(b.at("x").view().data, v.data);  // the same mirror again
  EXPECT_EQ(FakeDevice::uploads, 1);
  EXPECT_EQ(staging.mirror_count(), 1u);
  EXPECT_TRUE(staging.finish().ok());
  EXPECT_EQ(current_staging(), nullptr);
  EXPECT_EQ(b.at("x").view().memory, MemorySpace::host);  // the scope is over
}

TEST_F(DeviceStagingTest, FinishBringsOutputsBackAndLeavesInputsAlone) {
  Bundle b = two_tensors();
  const Tensor x_before = b.at("x");
  {
    DeviceStaging staging(b, &ops_);
    const TensorView y = b.at("out.y").view();
    (void)b.at("x").view();
    for (int i = 0; i < 4; ++i) static_cast<std::int32_t*>(y.data)[i] = 10 + i;  // the "kernel"
    const Status s = staging.finish();
    EXPECT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(FakeDevice::downloads, 2);  // the output, and the input for the check
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.at("out.y").data<std::int32_t>()[i], 10 + i);
  EXPECT_TRUE(b.at("out.y").guard_intact());
  EXPECT_TRUE(b.at("x").same_bytes(x_before));
}

TEST_F(DeviceStagingTest, DeviceWritePastTheEndShowsUpInTheHostGuard) {
  Bundle b = two_tensors();
  DeviceStaging staging(b, &ops_);
  const TensorView y = b.at("out.y").view();
  static_cast<std::int32_t*>(y.data)[4] = 7;  // one element past the end
  EXPECT_TRUE(staging.finish().ok());
  EXPECT_FALSE(b.at("out.y").guard_intact());
}

TEST_F(DeviceStagingTest, ModifiedInputMirrorIsReported) {
  Bundle b = two_tensors();
  DeviceStaging staging(b, &ops_);
  const TensorView x = b.at("x").view();
  static_cast<float*>(x.data)[5] = -1.0f;
  const Status s = staging.finish();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code, StatusCode::internal);
  EXPECT_NE(s.message.find("input 'x' was modified"), std::string::npos) << s.message;
  EXPECT_EQ(b.at("x").data<float>()[5], 5.0f);  // the host input is not touched
}

TEST_F(DeviceStagingTest, ReplacedTensorIsStagedAgain) {
  Bundle b = two_tensors();
  DeviceStaging staging(b, &ops_);
  const TensorView first = b.at("out.y").view();
  b.add("out.y", DType::i32, {8}).poison();  // same map node, new storage
  const TensorView second = b.at("out.y").view();
  EXPECT_EQ(second.shape[0], 8);
  EXPECT_EQ(FakeDevice::uploads, 2);
  EXPECT_EQ(staging.mirror_count(), 1u);
  (void)first;
  EXPECT_TRUE(staging.finish().ok());
}

TEST_F(DeviceStagingTest, ScopesNestAndTheDestructorFreesWhatFinishDidNot) {
  Bundle a = two_tensors(), b = two_tensors();
  {
    DeviceStaging outer(a, &ops_);
    {
      DeviceStaging inner(b, &ops_);
      EXPECT_EQ(current_staging(), &inner);
      (void)b.at("x").view();
    }
    EXPECT_EQ(current_staging(), &outer);
    (void)a.at("x").view();
    EXPECT_EQ(FakeDevice::live.size(), 1u);
  }
  EXPECT_EQ(current_staging(), nullptr);
}

TEST_F(DeviceStagingTest, FailedAllocationIsReportedAndTheCallSeesHostMemory) {
  Bundle b = two_tensors();
  DeviceStaging staging(b, &ops_);
  FakeDevice::fail_allocation = true;
  const TensorView v = b.at("x").view();
  EXPECT_EQ(v.memory, MemorySpace::host);
  ASSERT_FALSE(staging.error().ok());
  EXPECT_NE(staging.error().message.find("fake out of memory"), std::string::npos);
  EXPECT_FALSE(staging.finish().ok());
}

// A driver whose "operator" adds 1 to every element of x into out.y, through the views it builds.
class PlusOneDriver : public OpDriver {
 public:
  const char* name() const override { return "plus_one"; }
  json default_knobs() const override { return json::object(); }
  std::vector<CaseSpec> cases() const override { return {}; }
  CaseSpec default_case() const override { return {}; }
  std::vector<CaseSpec> bench_cases() const override { return {}; }
  Bundle generate(const json&, std::uint64_t) const override { return {}; }
  void check_inputs(const Bundle&) const override {}
  Status validate(const Bundle&) const override { return Status::success(); }
  void prepare_outputs(Bundle& b) const override {
    b.remove_outputs();
    b.add("out.y", DType::f32, {2, 3}).poison();
  }
  Status call(Bundle& b, const RunOptions& o) const override {
    const TensorView x = b.at("x").view();
    const TensorView y = b.at("out.y").view();
    seen = x.memory;
    if (x.memory != y.memory) return Status::error(StatusCode::invalid_argument, "plus_one", "x", "mixed");
    (void)o;
    for (int i = 0; i < 6; ++i) static_cast<float*>(y.data)[i] = static_cast<const float*>(x.data)[i] + 1.0f;
    return Status::success();
  }
  Status call_planned(Bundle&, PlannedRun*) const override {
    return Status::error(StatusCode::unsupported, "plus_one", "plan", "plus_one has no plan");
  }
  Status plan(const Bundle&, const PlanOptions&, std::unique_ptr<PlannedCall>*) const override {
    return Status::error(StatusCode::unsupported, "plus_one", "plan", "plus_one has no plan");
  }
  json tolerance(const Bundle&) const override { return json::object(); }
  std::vector<Comparison> compare(const Bundle&, const Bundle&) const override { return {}; }
  Work work(const Bundle&) const override { return {}; }
  mutable MemorySpace seen = MemorySpace::host;
};

TEST_F(DeviceStagingTest, RunDriverStagesCudaRunsOnly) {
  PlusOneDriver d;
  Bundle b = two_tensors();
  ASSERT_TRUE(run_driver(d, b, RunOptions{Backend::cuda}, &ops_).ok());
  EXPECT_EQ(d.seen, MemorySpace::device);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b.at("out.y").data<float>()[i], static_cast<float>(i + 1));
  EXPECT_TRUE(b.at("out.y").guard_intact());

  Bundle c = two_tensors();
  ASSERT_TRUE(run_driver(d, c, RunOptions{Backend::reference}, &ops_).ok());
  EXPECT_EQ(d.seen, MemorySpace::host);
  EXPECT_EQ(c.at("out.y").data<float>()[5], 6.0f);
}

// The benchmarks' pattern: outputs prepared and everything uploaded once, then call() again and
// again on the device mirrors with no further uploads; finish() brings the last result back.
TEST_F(DeviceStagingTest, RepeatedCallsOnAPreparedBundleUploadNothingMore) {
  PlusOneDriver d;
  Bundle b = two_tensors();
  d.prepare_outputs(b);
  DeviceStaging staging(b, &ops_);
  ASSERT_TRUE(staging.upload_all().ok());
  const int uploads = FakeDevice::uploads, allocations = FakeDevice::allocations;
  ASSERT_GT(uploads, 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(d.call(b, RunOptions{Backend::cuda}).ok());
    ASSERT_TRUE(staging.synchronize().ok());
  }
  EXPECT_EQ(d.seen, MemorySpace::device);
  EXPECT_EQ(FakeDevice::uploads, uploads);
  EXPECT_EQ(FakeDevice::allocations, allocations);
  EXPECT_TRUE(std::isnan(b.at("out.y").data<float>()[0]));  // the host poison until finish()
  ASSERT_TRUE(staging.finish().ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b.at("out.y").data<float>()[i], static_cast<float>(i + 1));
  EXPECT_TRUE(FakeDevice::live.empty());
}

TEST_F(DeviceStagingTest, RunDriverLeavesCudaRunsAloneWithoutAUsableDevice) {
  if (backend_available(Backend::cuda)) GTEST_SKIP() << "a GPU is present";
  PlusOneDriver d;
  Bundle b = two_tensors();
  ASSERT_TRUE(run_driver(d, b, RunOptions{Backend::cuda}).ok());
  EXPECT_EQ(d.seen, MemorySpace::host);  // the entry point would then report the missing device
  EXPECT_EQ(FakeDevice::allocations, 0);
}

}  // namespace
}  // namespace mlakit::goldens
