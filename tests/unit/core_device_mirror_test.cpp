// core::DeviceMirror: host mirrors of the index tensors of a device-memory call, so that the host
// validators run unchanged. "Device memory" here is host memory handed out by fake memory
// functions that count every copy and synchronization.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/common/device_mirror.hpp"
#include "core/common/validate.hpp"

namespace mlakit::core {
namespace {

struct FakeDevice {
  static inline int copies_to_host = 0;
  static inline int syncs = 0;
  static inline void* last_stream = nullptr;
  static inline bool fail_copies = false;

  static bool copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream, std::string* error) {
    if (fail_copies) {
      *error = "fake copy failure";
      return false;
    }
    ++copies_to_host;
    last_stream = stream;
    std::memcpy(dst, src, bytes);
    return true;
  }
  static bool copy_to_device(void* dst, const void* src, std::size_t bytes, void*, std::string*) {
    std::memcpy(dst, src, bytes);
    return true;
  }
  static bool synchronize(void* stream, std::string*) {
    ++syncs;
    last_stream = stream;
    return true;
  }
  static DeviceMemoryOps ops() {
    DeviceMemoryOps o;
    o.name = "fake";
    o.copy_to_host = copy_to_host;
    o.copy_to_device = copy_to_device;
    o.synchronize = synchronize;
    return o;
  }
};

// Installs the fake functions for one test and restores whatever was registered before.
class DeviceMirrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeDevice::copies_to_host = 0;
    FakeDevice::syncs = 0;
    FakeDevice::last_stream = nullptr;
    FakeDevice::fail_copies = false;
    saved_ = set_device_memory_ops(&ops_);
  }
  void TearDown() override { set_device_memory_ops(saved_); }

  DeviceMemoryOps ops_ = FakeDevice::ops();
  const DeviceMemoryOps* saved_ = nullptr;
};

// A small call in the shape of an operator's arguments: offsets + page table read on the host,
// q read by kernels only, out written.
struct ToyArgs {
  TensorView offsets;  // u32 [B+1]
  TensorView lut;      // u32 [B, pages]
  TensorView q;        // f32 [T, 4]
  TensorView out;      // f32 [T, 4]
};

TensorView dev(TensorView v) {
  v.memory = MemorySpace::device;
  return v;
}

// A validator written for host calls, as the operators' validators are.
Status validate_toy(const ToyArgs& a, MemorySpace* space) {
  Validator v("toy");
  if (!v.tensor("q", a.q, {DType::f32}, {kAnyDim, 4})) return v.status();
  const std::int64_t T = a.q.shape[0];
  if (!v.row_offsets("offsets", a.offsets, T)) return v.status();
  const std::int64_t B = a.offsets.shape[0] - 1;
  if (!v.tensor("lut", a.lut, {DType::u32}, {B, kAnyDim})) return v.status();
  if (a.lut.memory != MemorySpace::host) return (v.fail("lut", " is in device memory"), v.status());
  for (std::int64_t i = 0; i < a.lut.numel(); ++i)
    if (u32_at(a.lut, i) >= 100)
      return (v.fail("lut[" + std::to_string(i) + "]", "=" + std::to_string(u32_at(a.lut, i)) + " (must be < 100)"),
              v.status());
  v.tensor("out", a.out, {DType::f32}, {T, 4});
  v.no_overlap("out", a.out, "q", a.q);
  v.no_overlap("out", a.out, "offsets", a.offsets);
  v.same_memory({{"offsets", &a.offsets}, {"lut", &a.lut}, {"q", &a.q}, {"out", &a.out}}, space);
  return v.status();
}

// The entry-point pattern of device_mirror.hpp; `launch` plays the back-end (the mirrors live as
// long as the DeviceMirror does, i.e. for the whole call).
Status run_toy(const ToyArgs& a, void* stream, MemorySpace* space,
               const std::function<void(const ToyArgs&)>& launch = {}) {
  ToyArgs h = a;
  DeviceMirror mirror("toy", stream);
  Status s = mirror.prepare({{"offsets", &h.offsets, MirrorUse::host_read},
                             {"lut", &h.lut, MirrorUse::host_read},
                             {"q", &h.q, MirrorUse::device},
                             {"out", &h.out, MirrorUse::written}});
  if (!s.ok()) return s;
  *space = MemorySpace::host;
  s = validate_toy(h, space);
  if (!s.ok()) return s;
  s = mirror.finish(space);
  if (!s.ok()) return s;
  s = mirror.require_device();  // the cuda branch, after routing
  if (s.ok() && launch) launch(h);
  return s;
}

struct ToyData {
  std::vector<std::uint32_t> offsets = {0, 2, 3};
  std::vector<std::uint32_t> lut = {1, 2, 3, 4};
  std::vector<float> q = std::vector<float>(12, 1.0f);
  std::vector<float> out = std::vector<float>(12, 0.0f);
  ToyArgs host() {
    ToyArgs a;
    a.offsets = TensorView::contiguous(offsets.data(), DType::u32, {3});
    a.lut = TensorView::contiguous(lut.data(), DType::u32, {2, 2});
    a.q = TensorView::contiguous(q.data(), DType::f32, {3, 4});
    a.out = TensorView::contiguous(out.data(), DType::f32, {3, 4});
    return a;
  }
  ToyArgs device() {
    ToyArgs a = host();
    a.offsets = dev(a.offsets);
    a.lut = dev(a.lut);
    a.q = dev(a.q);
    a.out = dev(a.out);
    return a;
  }
};

TEST_F(DeviceMirrorTest, HostCallIsLeftAloneWithoutCopiesOrSynchronization) {
  ToyData d;
  MemorySpace space = MemorySpace::device;
  const void* seen = nullptr;
  ASSERT_TRUE(run_toy(d.host(), nullptr, &space, [&](const ToyArgs& h) { seen = h.offsets.data; }).ok());
  EXPECT_EQ(space, MemorySpace::host);
  EXPECT_EQ(FakeDevice::copies_to_host, 0);
  EXPECT_EQ(FakeDevice::syncs, 0);
  EXPECT_EQ(seen, d.offsets.data());
}

TEST_F(DeviceMirrorTest, DeviceCallMirrorsIndexTensorsWithOneStreamSynchronization) {
  ToyData d;
  int stream_tag = 0;
  MemorySpace space = MemorySpace::host;
  bool launched = false;
  const Status s = run_toy(d.device(), &stream_tag, &space, [&](const ToyArgs& h) {
    launched = true;
    // The host mirrors: other buffers, host memory, same contents.
    EXPECT_NE(h.offsets.data, d.offsets.data());
    EXPECT_EQ(h.offsets.memory, MemorySpace::host);
    EXPECT_EQ(std::memcmp(h.offsets.data, d.offsets.data(), 12), 0);
    EXPECT_EQ(h.lut.memory, MemorySpace::host);
    EXPECT_EQ(std::memcmp(h.lut.data, d.lut.data(), 16), 0);
    // The rest keeps the caller's device pointers and labels.
    EXPECT_EQ(h.q.data, d.q.data());
    EXPECT_EQ(h.q.memory, MemorySpace::device);
    EXPECT_EQ(h.out.data, d.out.data());
    EXPECT_EQ(h.out.memory, MemorySpace::device);
  });
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_TRUE(launched);
  EXPECT_EQ(space, MemorySpace::device);
  EXPECT_EQ(FakeDevice::copies_to_host, 2);  // offsets and lut only
  EXPECT_EQ(FakeDevice::syncs, 1);           // one wait, on the call's stream
  EXPECT_EQ(FakeDevice::last_stream, &stream_tag);
}

TEST_F(DeviceMirrorTest, ValidatorReadsTheMirrorsAndReportsDeviceContents) {
  ToyData d;
  d.offsets[1] = 5;  // rises past the total (3), then falls
  MemorySpace space;
  Status s = run_toy(d.device(), nullptr, &space);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code, StatusCode::invalid_argument);
  EXPECT_EQ(s.field, "offsets[2]");
  EXPECT_NE(s.message.find("toy: offsets[2]=3 < offsets[1]=5"), std::string::npos) << s.message;

  ToyData e;
  e.lut[3] = 100;
  s = run_toy(e.device(), nullptr, &space);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.field, "lut[3]");
  EXPECT_NE(s.message.find("=100 (must be < 100)"), std::string::npos) << s.message;
}

TEST_F(DeviceMirrorTest, FailedCopyIsAnInternalErrorNamingTheField) {
  ToyData d;
  FakeDevice::fail_copies = true;
  MemorySpace space;
  const Status s = run_toy(d.device(), nullptr, &space);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code, StatusCode::internal);
  EXPECT_EQ(s.op, "toy");
  EXPECT_EQ(s.field, "offsets");
  EXPECT_NE(s.message.find("toy: offsets could not be copied from device memory"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("fake copy failure"), std::string::npos) << s.message;
}

TEST_F(DeviceMirrorTest, MixedMemoryIsRefused) {
  ToyData d;
  ToyArgs a = d.device();
  a.offsets = d.host().offsets;  // host index tensors, device data
  a.lut = d.host().lut;
  MemorySpace space;
  const Status s = run_toy(a, nullptr, &space);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code, StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("toy: q is in device memory but offsets is in host memory (one call uses one)"),
            std::string::npos)
      << s.message;
  EXPECT_EQ(FakeDevice::copies_to_host, 0);
}

TEST_F(DeviceMirrorTest, MixedMemoryAcceptedByTheValidatorIsRefusedForTheDevice) {
  // A validator that (like msa_block_indexer's) does not compare the index tensors' memory space.
  ToyData d;
  ToyArgs a = d.device();
  a.offsets = d.host().offsets;
  ToyArgs h = a;
  DeviceMirror mirror("toy", nullptr);
  ASSERT_TRUE(mirror.prepare({{"offsets", &h.offsets, MirrorUse::host_read}, {"q", &h.q, MirrorUse::device}}).ok());
  EXPECT_FALSE(mirror.active());
  MemorySpace space = MemorySpace::host;
  ASSERT_TRUE(mirror.finish(&space).ok());  // routing decides first (host back-ends refuse device q)
  const Status s = mirror.require_device();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.field, "q");
  EXPECT_NE(s.message.find("toy: q is in device memory but offsets is in host memory"), std::string::npos) << s.message;
}

TEST_F(DeviceMirrorTest, WrittenTensorOverlappingADeviceIndexTensorIsRefused) {
  // The validator compares `out` with the host mirror and sees no overlap; finish() compares the
  // device ranges.
  std::vector<float> storage(16, 0.0f);
  ToyData d;
  ToyArgs a = d.device();
  std::memcpy(storage.data(), d.offsets.data(), 12);
  a.offsets = dev(TensorView::contiguous(storage.data(), DType::u32, {3}));
  a.out = dev(TensorView::contiguous(storage.data() + 1, DType::f32, {3, 4}));
  MemorySpace space;
  const Status s = run_toy(a, nullptr, &space);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.field, "out");
  EXPECT_NE(s.message.find("toy: out overlaps offsets in memory"), std::string::npos) << s.message;
}

TEST_F(DeviceMirrorTest, ViewThatCannotBeCopiedWholeIsLeftForTheValidator) {
  ToyData d;
  ToyArgs a = d.device();
  a.offsets.strides[0] = 2;  // not contiguous
  MemorySpace space;
  const Status s = run_toy(a, nullptr, &space);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.field, "offsets.strides");
  EXPECT_EQ(FakeDevice::copies_to_host, 1);  // the lut only
}

TEST_F(DeviceMirrorTest, EmptyTensorsAreMirroredWithoutCopies) {
  ToyData d;
  ToyArgs a = d.device();
  a.q.shape[0] = 0;
  a.out.shape[0] = 0;
  std::vector<std::uint32_t> zero = {0};
  a.offsets = dev(TensorView::contiguous(zero.data(), DType::u32, {1}));
  a.lut = dev(TensorView::contiguous(zero.data(), DType::u32, {0, 3}));
  MemorySpace space;
  const Status s = run_toy(a, nullptr, &space, [&](const ToyArgs& h) {
    EXPECT_NE(h.lut.data, nullptr);
    EXPECT_EQ(h.lut.memory, MemorySpace::host);
  });
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(FakeDevice::copies_to_host, 1);  // the 4-byte offsets; the empty lut needs no copy
}

TEST_F(DeviceMirrorTest, WithoutADeviceBackEndDeviceCallsReachTheValidatorUnchanged) {
  set_device_memory_ops(nullptr);
  ToyData d;
  MemorySpace space;
  const Status s = run_toy(d.device(), nullptr, &space);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.field, "offsets");
  EXPECT_NE(s.message.find("device memory"), std::string::npos) << s.message;
  EXPECT_EQ(FakeDevice::copies_to_host, 0);
}

TEST(DeviceMemoryOps, SetReturnsThePreviousFunctions) {
  const DeviceMemoryOps a, b;
  const DeviceMemoryOps* saved = set_device_memory_ops(&a);
  EXPECT_EQ(device_memory_ops(), &a);
  EXPECT_EQ(set_device_memory_ops(&b), &a);
  EXPECT_EQ(set_device_memory_ops(saved), &b);
  EXPECT_EQ(device_memory_ops(), saved);
}

}  // namespace
}  // namespace mlakit::core
