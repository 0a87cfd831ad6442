// Caches as engines keep them (a padded block stride, K and V interleaved per layer, the layers
// outermost), and rows padded to odd starts (no vector alignment): every golden case of every operator on the reference and cpu back-ends, the cache
// handed over in that layout, must give the same bits as on the contiguous copy of the same cache,
// caches the operator writes included (compared after copying them back).
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "goldens/common/cache_layout.hpp"
#include "goldens/common/driver.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::CacheLayout;
using goldens::OpDriver;

struct Param {
  const OpDriver* driver;
  goldens::CaseSpec spec;
  Backend backend;
  CacheLayout layout;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << p.driver->name() << "/" << p.spec.name << "/" << backend_name(p.backend) << "/"
      << goldens::cache_layout_name(p.layout);
}

std::vector<Param> params() {
  std::vector<Param> out;
  const CacheLayout layouts[] = {CacheLayout::padded_blocks, CacheLayout::kv_interleaved, CacheLayout::layers_outer,
                                 CacheLayout::padded_rows};
  for (const OpDriver* d : goldens::all_drivers()) {
    int i = 0;
    for (const goldens::CaseSpec& c : d->cases()) {
      for (CacheLayout l : layouts) out.push_back({d, c, Backend::cpu, l});
      // The reference (the slow oracle) on every other case, one layout in turn.
      if (i % 2 == 0) out.push_back({d, c, Backend::reference, layouts[(i / 2) % 4]});
      ++i;
    }
  }
  return out;
}

class CacheLayouts : public ::testing::TestWithParam<Param> {};

TEST_P(CacheLayouts, GiveTheBitsOfTheContiguousCache) {
  const Param& p = GetParam();
  constexpr std::uint64_t kSeed = 3;
  Bundle contiguous = p.driver->generate(p.spec.knobs, kSeed);
  Bundle relaid = p.driver->generate(p.spec.knobs, kSeed);
  RunOptions o;
  o.backend = p.backend;
  const Status s1 = p.driver->run(contiguous, o);
  ASSERT_TRUE(s1.ok()) << s1.message;
  p.driver->prepare_outputs(relaid);
  {
    goldens::CacheRelayout scope(p.layout);
    const Status s2 = p.driver->call(relaid, o);
    ASSERT_TRUE(s2.ok()) << s2.message;
    scope.finish();
  }
  for (const std::string& name : contiguous.output_names()) {
    ASSERT_TRUE(relaid.has(name)) << name;
    EXPECT_TRUE(relaid.at(name).same_bytes(contiguous.at(name))) << name << " differs from the contiguous cache's";
    EXPECT_TRUE(relaid.at(name).guard_intact()) << name;
  }
}

std::string name_of(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  return std::string(p.driver->name()) + "_" + p.spec.name + "_" + backend_name(p.backend) + "_" +
         goldens::cache_layout_name(p.layout);
}

INSTANTIATE_TEST_SUITE_P(Ops, CacheLayouts, ::testing::ValuesIn(params()), name_of);

}  // namespace
}  // namespace mlakit
