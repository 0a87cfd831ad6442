// libFuzzer target for the golden-file reader (src/goldens/common/safetensors.hpp).
//
// Every input must either be rejected with a well-formed Status (invalid_argument, op
// "safetensors", a message naming the input) or load; a loaded bundle must serialize, parse back to
// the same bundle, and serialize to the same bytes again (the writer's output is a fixed point).
// Any other outcome aborts, and so does anything the sanitizers see.
//
// Seed mode: with MLAKIT_FUZZ_WRITE_SEEDS=DIR set, the binary writes a few small valid files to DIR
// (every dtype, scalars, empty and rank-6 tensors, foreign metadata, a hand-laid-out file with its
// entries out of data order) and exits; fuzz/run.sh uses them as part of the seed corpus.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "goldens/common/safetensors.hpp"

namespace {

using namespace mlakit;
using namespace mlakit::goldens;

constexpr const char* kLabel = "fuzz-input";

[[noreturn]] void die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "safetensors_fuzz: %s: %s\n", what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

void fill(Tensor& t, std::uint32_t seed) {
  for (std::size_t i = 0; i < t.nbytes(); ++i) {
    seed = seed * 1664525u + 1013904223u;
    t.bytes()[i] = static_cast<std::uint8_t>(seed >> 24);
  }
}

bool write_raw(const std::filesystem::path& p, const std::string& header, std::size_t data_bytes) {
  std::ofstream f(p, std::ios::binary);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
  f << header << std::string(data_bytes, '\x3c');
  return static_cast<bool>(f);
}

int write_seeds(const char* dir_name) {
  const std::filesystem::path dir(dir_name);
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, Bundle>> seeds;

  seeds.emplace_back("empty", Bundle{});

  Bundle all;
  all.op = "lightning_indexer";
  all.params = {{"num_heads", 2}, {"mask", "causal"}, {"scale", 0.0625}, {"list", {1, -2, 3.5, nullptr, true}}};
  all.tolerance = {{"out.y", {{"atol", 1e-3}, {"rtol", 1e-2}, {"min_cosine", 0.999}}}};
  all.metadata = {{"case", "seed"}, {"seed", "1"}, {"producer", "safetensors_fuzz"}};
  const DType types[] = {DType::f8e4m3, DType::bf16, DType::f16, DType::f32,
                         DType::f64,    DType::i32,  DType::u32, DType::u8};
  std::uint32_t k = 1;
  for (DType t : types) fill(all.add("t." + std::string(safetensors_dtype_name(t)), t, {2, 3}), k++);
  fill(all.add("out.y", DType::f32, {3}), 99);
  seeds.emplace_back("every_dtype", all);

  Bundle shapes;
  shapes.op = "sparse_mla_prefill";
  fill(shapes.add("scalar", DType::f32, {}), 5);
  shapes.add("empty", DType::bf16, {0, 4});
  fill(shapes.add("rank6", DType::u8, {1, 2, 1, 2, 1, 3}), 6);
  fill(shapes.add("odd", DType::u8, {3}), 7);
  seeds.emplace_back("shapes", shapes);

  Bundle foreign;
  foreign.metadata = {{"format", "pt"}};
  fill(foreign.add("weight", DType::bf16, {4}), 8);
  seeds.emplace_back("foreign_metadata", foreign);

  for (const auto& [name, b] : seeds) {
    const Status s = write_safetensors((dir / (name + ".safetensors")).string(), b);
    if (!s.ok()) {
      std::fprintf(stderr, "safetensors_fuzz: cannot write seed %s: %s\n", name.c_str(), s.message.c_str());
      return 1;
    }
  }
  // Valid but not as our writer lays it out: entries out of data order, no metadata, padding.
  const std::string header =
      "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}     ";
  if (!write_raw(dir / "hand_laid_out.safetensors", header, 6)) return 1;
  std::printf("safetensors_fuzz: wrote %zu seeds to %s\n", seeds.size() + 1, dir_name);
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("MLAKIT_FUZZ_WRITE_SEEDS")) std::exit(write_seeds(dir));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Bundle first;
  Status s = parse_safetensors(data, size, kLabel, &first);
  if (!s.ok()) {
    const std::string prefix = std::string("safetensors: ") + kLabel + ": ";
    if (s.code != StatusCode::invalid_argument || s.op != "safetensors" || s.message.rfind(prefix, 0) != 0 ||
        s.message.size() == prefix.size())
      die("a rejection without a proper status", s.message);
    if (!first.tensors.empty() || !first.op.empty()) die("a rejection wrote into the bundle", s.message);
    return 0;
  }
  for (const auto& [name, t] : first.tensors)
    if (!t.guard_intact()) die("guard bytes overwritten", name);

  std::vector<std::uint8_t> bytes;
  s = serialize_safetensors(first, &bytes);
  if (!s.ok()) die("a bundle the reader accepted does not serialize", s.message);
  Bundle second;
  s = parse_safetensors(bytes.data(), bytes.size(), "reserialized", &second);
  if (!s.ok()) die("serialized bytes do not parse back", s.message);
  std::string why;
  if (!same_bundle(first, second, &why)) die("the round trip changed the bundle", why);
  std::vector<std::uint8_t> again;
  s = serialize_safetensors(second, &again);
  if (!s.ok()) die("the re-read bundle does not serialize", s.message);
  if (again != bytes) die("serialization is not a fixed point", std::to_string(bytes.size()) + " bytes");
  return 0;
}
