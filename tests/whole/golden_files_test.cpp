// The committed golden files (data/golden): each one regenerates to identical bytes from its case
// and seed, and every back-end present reproduces its outputs within the file's tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <fstream>
#include <iterator>

#include "goldens/common/driver.hpp"
#include "goldens/common/safetensors.hpp"
#include "support/matrix.hpp"

namespace mlakit::goldens {
namespace {

std::vector<std::string> golden_files() {
  std::vector<std::string> files;
  // MLAKIT_SOURCE_DIR in the environment overrides the build's source tree: test programs copied
  // to another machine (scripts/gpu-check.sh) read the files there.
  const char* source = std::getenv("MLAKIT_SOURCE_DIR");
  const std::filesystem::path dir = std::filesystem::path(source ? source : MLAKIT_SOURCE_DIR) / "data" / "golden";
  if (std::filesystem::exists(dir))
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class GoldenFile : public ::testing::TestWithParam<std::string> {};

TEST(GoldenFiles, DataSetCoversEveryOperator) {
  std::set<std::string> ops;
  for (const auto& f : golden_files()) {
    Bundle b;
    ASSERT_TRUE(read_safetensors(f, &b).ok()) << f;
    ops.insert(b.op);
  }
  for (const OpDriver* d : all_drivers()) EXPECT_TRUE(ops.count(d->name())) << "no golden file for " << d->name();
}

TEST_P(GoldenFile, RegeneratesToIdenticalBytes) {
  Bundle file;
  const Status s = read_safetensors(GetParam(), &file);
  ASSERT_TRUE(s.ok()) << s.message;
  const OpDriver* d = find_driver(file.op);
  ASSERT_NE(d, nullptr) << file.op;
  auto specs = d->cases();
  specs.push_back(d->default_case());
  const CaseSpec* spec = nullptr;
  for (const auto& c : specs)
    if (c.name == file.metadata["case"]) spec = &c;
  ASSERT_NE(spec, nullptr) << "unknown case " << file.metadata["case"];
  json knobs;
  std::string why;
  ASSERT_TRUE(merge_knobs(d->default_knobs(), spec->knobs, &knobs, &why)) << why;
  Bundle b = d->generate(knobs, std::stoull(file.metadata["seed"]));
  ASSERT_TRUE(d->run(b, RunOptions{Backend::reference}).ok());
  b.tolerance = d->tolerance(b);
  b.metadata = file.metadata;  // the producer line names the machine that wrote the file
  std::vector<std::uint8_t> bytes;
  ASSERT_TRUE(serialize_safetensors(b, &bytes).ok());
  EXPECT_TRUE(bytes == file_bytes(GetParam())) << GetParam() << " no longer regenerates to the same bytes";
}

TEST_P(GoldenFile, EveryBackendMatches) {
  Bundle expected;
  ASSERT_TRUE(read_safetensors(GetParam(), &expected).ok());
  const OpDriver* d = find_driver(expected.op);
  ASSERT_NE(d, nullptr);
  int ran = 0;
  for (const auto& be : testing::backends_under_test()) {
    if (!testing::skip_reason(be).empty()) continue;
    testing::IsaCap cap(be.isa);
    Bundle actual = expected;
    actual.remove_outputs();
    const Status s = d->run(actual, RunOptions{be.backend});
    if (s.code == StatusCode::unsupported) continue;
    ASSERT_TRUE(s.ok()) << be.label << ": " << s.message;
    for (const auto& c : d->compare(expected, actual)) EXPECT_TRUE(c.pass) << be.label << ": " << describe(c);
    ++ran;
  }
  Bundle ref = expected;
  ref.remove_outputs();
  ASSERT_TRUE(d->run(ref, RunOptions{Backend::reference}).ok());
  for (const auto& name : expected.output_names())
    EXPECT_TRUE(ref.at(name).same_bytes(expected.at(name))) << "reference differs from the file in " << name;
  if (ran == 0) GTEST_SKIP() << "no optimized back-end runs this operator here (the reference was checked)";
}

INSTANTIATE_TEST_SUITE_P(Data, GoldenFile, ::testing::ValuesIn(golden_files()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = std::filesystem::path(info.param).stem().string();
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenFile);

}  // namespace
}  // namespace mlakit::goldens
