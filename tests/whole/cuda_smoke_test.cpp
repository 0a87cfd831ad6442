// The cuda back-end on a real GPU: the memory functions the device path relies on, then every
// operator's default (DeepSeek-sized) case and first golden case through the drivers, staged in
// device memory, against the reference. Skipped, with the reason, where no GPU is usable; there,
// a device call through each public entry point is checked to be unavailable before any copy.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/common/device_mirror.hpp"
#include "goldens/common/device_staging.hpp"
#include "goldens/common/driver.hpp"
#include "support/fake_device_memory.hpp"
#include "support/matrix.hpp"

namespace mlakit {
namespace {

std::string no_gpu_reason() {
  std::string why;
  return backend_available(Backend::cuda, &why) ? std::string() : why;
}

TEST(CudaSmoke, DeviceMemoryFunctionsRoundTrip) {
  const std::string why = no_gpu_reason();
  if (!why.empty()) GTEST_SKIP() << "cuda: " << why;
  const core::DeviceMemoryOps* ops = core::device_memory_ops();
  ASSERT_NE(ops, nullptr) << "the cuda back-end registered no memory functions";
  std::vector<std::uint8_t> in(1000), out(1000, 0);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint8_t>(i * 7);
  void* dev = nullptr;
  std::string error;
  ASSERT_TRUE(ops->allocate(&dev, in.size(), &error)) << error;
  ASSERT_TRUE(ops->copy_to_device(dev, in.data(), in.size(), nullptr, &error)) << error;
  ASSERT_TRUE(ops->copy_to_host(out.data(), dev, out.size(), nullptr, &error)) << error;
  ASSERT_TRUE(ops->synchronize(nullptr, &error)) << error;
  EXPECT_EQ(in, out);
  ASSERT_TRUE(ops->release(dev, &error)) << error;
}

using test_support::FakeDevice;  // "device" memory without a GPU, counting its copies

TEST(CudaSmoke, WithoutAGpuDeviceCallsAreUnavailableBeforeAnyCopy) {
  std::string why;
  if (backend_available(Backend::cuda, &why)) GTEST_SKIP() << "a GPU is usable here";
  const core::DeviceMemoryOps fake = FakeDevice::ops();
  for (const auto* driver : goldens::all_drivers()) {
    SCOPED_TRACE(driver->name());
    for (Backend be : {Backend::cuda, Backend::automatic}) {
      FakeDevice::reset();
      goldens::Bundle b = driver->generate(driver->cases().front().knobs, 1);
      goldens::DeviceStaging staging(b, &fake);
      ASSERT_TRUE(staging.upload_all().ok());
      FakeDevice::downloads = 0;
      const Status s = driver->run(b, RunOptions{be});
      EXPECT_EQ(FakeDevice::downloads, 0) << "index tensors were copied for a call that cannot run";
      ASSERT_TRUE(staging.finish().ok());
      EXPECT_TRUE(FakeDevice::live.empty()) << "staged device memory leaked";
      EXPECT_EQ(s.code, StatusCode::unavailable) << s.message;
      EXPECT_NE(s.message.find(std::string(driver->name()) + ": backend=cuda is unavailable: " + why), std::string::npos)
          << s.message;
      for (const auto& name : b.output_names()) {
        const goldens::Tensor& out = b.at(name);
        const std::string source = name.substr(4);
        if (b.has(source) && b.at(source).shape() == out.shape()) {
          EXPECT_TRUE(out.same_bytes(b.at(source))) << name << " (in place) was modified";
        } else {
          goldens::Tensor poisoned = out;
          poisoned.poison();
          EXPECT_TRUE(out.same_bytes(poisoned)) << name << " was written";
        }
      }
    }
  }
}

struct SmokeCase {
  std::string op;
  goldens::CaseSpec spec;
};

std::vector<SmokeCase> smoke_cases() {
  std::vector<SmokeCase> v;
  for (const auto* d : goldens::all_drivers()) {
    v.push_back({d->name(), d->default_case()});
    if (!d->cases().empty()) v.push_back({d->name(), d->cases().front()});
  }
  return v;
}

void PrintTo(const SmokeCase& c, std::ostream* os) { *os << c.op << "/" << c.spec.name; }

class CudaSmokeOps : public ::testing::TestWithParam<SmokeCase> {};

TEST_P(CudaSmokeOps, MatchesReference) {
  const std::string why = no_gpu_reason();
  if (!why.empty()) GTEST_SKIP() << "cuda: " << why;
  const auto* driver = goldens::find_driver(GetParam().op);
  ASSERT_NE(driver, nullptr);
  goldens::Bundle probe = driver->generate(GetParam().spec.knobs, 1);
  const Status s = goldens::run_driver(*driver, probe, RunOptions{Backend::cuda});
  if (s.code == StatusCode::unavailable || s.code == StatusCode::unsupported)
    GTEST_SKIP() << "cuda: " << s.message;
  ASSERT_TRUE(s.ok()) << s.message;
  testing::run_against_reference(*driver, GetParam().spec, 1, {Backend::cuda, Isa::generic, "cuda"});
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaSmokeOps, ::testing::ValuesIn(smoke_cases()),
                         [](const ::testing::TestParamInfo<SmokeCase>& info) {
                           return info.param.op + "_" + info.param.spec.name;
                         });

}  // namespace
}  // namespace mlakit
