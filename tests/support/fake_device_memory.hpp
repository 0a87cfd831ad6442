// Fake device memory for tests: "device" buffers are host memory from counting allocation and
// copy functions, so device-memory paths (staging, mirrors, routing) run on machines without a GPU.
// Copies into or out of memory it did not allocate fail the test.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "core/common/device_mirror.hpp"

namespace mlakit::test_support {

struct FakeDevice {
  static inline std::set<void*> live;
  static inline int uploads = 0, downloads = 0, allocations = 0;
  static inline bool fail_allocation = false;

  static bool allocate(void** p, std::size_t bytes, std::string* error) {
    if (fail_allocation) {
      *error = "fake out of memory";
      return false;
    }
    *p = ::operator new(bytes);
    live.insert(*p);
    ++allocations;
    return true;
  }
  static bool release(void* p, std::string* error) {
    if (live.erase(p) == 0) {
      *error = "double free";
      return false;
    }
    ::operator delete(p);
    return true;
  }
  static bool copy_to_device(void* dst, const void* src, std::size_t bytes, void*, std::string*) {
    EXPECT_TRUE(live.count(dst));
    std::memcpy(dst, src, bytes);
    ++uploads;
    return true;
  }
  static bool copy_to_host(void* dst, const void* src, std::size_t bytes, void*, std::string*) {
    EXPECT_TRUE(live.count(const_cast<void*>(src)));
    std::memcpy(dst, src, bytes);
    ++downloads;
    return true;
  }
  static bool synchronize(void*, std::string*) { return true; }
  static core::DeviceMemoryOps ops() {
    core::DeviceMemoryOps o;
    o.name = "fake";
    o.allocate = allocate;
    o.release = release;
    o.copy_to_device = copy_to_device;
    o.copy_to_host = copy_to_host;
    o.synchronize = synchronize;
    return o;
  }
  static void reset() {
    live.clear();
    uploads = downloads = allocations = 0;
    fail_allocation = false;
  }
};

}  // namespace mlakit::test_support
