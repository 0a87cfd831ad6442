// The golden drivers' buffer placement (engine_allocator.hpp): cache-line starts, 2 MiB starts and the
// huge-page advice for large buffers, and that every byte of either kind is usable.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "goldens/common/engine_allocator.hpp"
#include "goldens/common/tensor.hpp"

namespace mlakit::goldens {
namespace {

using Alloc = EngineAllocator<std::uint8_t>;

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// "THPeligible" of the mapping that holds p (Linux), or -1 when smaps does not say.
int thp_eligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = address(p) >= lo && address(p) < hi;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

bool thp_offered() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(f, s);
  return !s.empty() && s.find("[never]") == std::string::npos;
}

TEST(EngineAllocator, SmallBuffersStartOnACacheLine) {
  for (std::size_t n : {1u, 63u, 64u, 4097u, (4u << 20) - 1}) {
    std::vector<std::uint8_t, Alloc> v(n, 1);  // every byte written
    EXPECT_EQ(address(v.data()) % 64, 0u) << n;
    EXPECT_EQ(v.back(), 1);
  }
}

TEST(EngineAllocator, LargeBuffersStartOnA2MiBPageAndAreAdvisedOntoHugePages) {
  const std::size_t n = (5u << 20) + 3;  // not a whole number of huge pages
  std::vector<std::uint8_t, Alloc> v(n, 7);
  if (!huge_pages_wanted()) {
    EXPECT_EQ(address(v.data()) % 64, 0u);
    return;
  }
  EXPECT_EQ(address(v.data()) % (2u << 20), 0u);
  EXPECT_EQ(v.back(), 7);
#if defined(__linux__)
  const int eligible = thp_eligible(v.data());
  if (thp_offered() && eligible >= 0) {
    EXPECT_EQ(eligible, 1) << "madvise(MADV_HUGEPAGE) not applied";
  }
#endif
}

TEST(EngineAllocator, LargeTensorKeepsItsGuardBytes) {
  Tensor t(DType::f32, {3, 1 << 20});  // 12 MiB
  EXPECT_EQ(address(t.bytes()) % 64, 0u);
  t.poison();
  EXPECT_TRUE(t.guard_intact());
  t.bytes()[t.nbytes()] ^= 1;  // the first guard byte
  EXPECT_FALSE(t.guard_intact());
}

}  // namespace
}  // namespace mlakit::goldens
