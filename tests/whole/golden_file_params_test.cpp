// Golden files with broken metadata, for every operator: each class of bad params (missing, null,
// wrong JSON kind, zero, negative, huge, unknown key, keys that contradict the tensors or each
// other) and bad tolerance entries is refused with one message naming the operator and the key,
// through both `run` and `check --candidate` paths, and no out.* tensor is written (the bundle's
// outputs keep the bytes the file had).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "goldens/common/driver.hpp"
#include "goldens/common/golden_check.hpp"
#include "goldens/common/safetensors.hpp"

namespace mlakit::goldens {
namespace {

std::filesystem::path golden_dir() {
  const char* source = std::getenv("MLAKIT_SOURCE_DIR");
  return std::filesystem::path(source ? source : MLAKIT_SOURCE_DIR) / "data" / "golden";
}

// One committed file per operator, and the size key that shapes its first output.
struct OpFile {
  const char* op;
  const char* file;
  const char* size_key;  // sizes an output: a huge value must be refused before any allocation
};

const OpFile kFiles[] = {
    {"lightning_indexer", "lightning_indexer.basic_causal.s1.safetensors", "top_k"},
    {"msa_block_indexer", "msa_block_indexer.prefill_ragged_random.s1.safetensors", "topk"},
    {"mla_prefill_fp8", "mla_prefill_fp8.cache_len_zero.s1.safetensors", "num_heads"},
    {"sparse_mla_prefill", "sparse_mla_prefill.sink_with_lse.s1.safetensors", "num_q_heads"},
    {"fused_qkv_paged", "fused_qkv_paged.dense_bf16_prefill.s1.safetensors", "q_dim"},
};

Bundle load(const OpFile& f) {
  Bundle b;
  const Status s = read_safetensors((golden_dir() / f.file).string(), &b);
  EXPECT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(b.op, f.op);
  EXPECT_FALSE(b.output_names().empty()) << f.file << " holds no outputs";
  return b;
}

struct Mutation {
  const char* name;
  // Changes b's params or tolerance; returns the key the message must name.
  std::string (*apply)(const OpFile& f, Bundle& b);
};

const Mutation kMutations[] = {
    {"missing", [](const OpFile&, Bundle& b) { b.params.erase("layer_idx"); return std::string("params.layer_idx"); }},
    {"null", [](const OpFile& f, Bundle& b) { b.params[f.size_key] = nullptr; return "params." + std::string(f.size_key); }},
    {"string", [](const OpFile& f, Bundle& b) { b.params[f.size_key] = "4"; return "params." + std::string(f.size_key); }},
    {"boolean", [](const OpFile&, Bundle& b) { b.params["layer_idx"] = true; return std::string("params.layer_idx"); }},
    {"real", [](const OpFile& f, Bundle& b) { b.params[f.size_key] = 2.5; return "params." + std::string(f.size_key); }},
    {"array", [](const OpFile& f, Bundle& b) { b.params[f.size_key] = json::array({1}); return "params." + std::string(f.size_key); }},
    {"zero", [](const OpFile& f, Bundle& b) { b.params[f.size_key] = 0; return "params." + std::string(f.size_key); }},
    {"negative", [](const OpFile& f, Bundle& b) { b.params[f.size_key] = -5; return "params." + std::string(f.size_key); }},
    {"huge", [](const OpFile& f, Bundle& b) { b.params[f.size_key] = std::int64_t{1} << 40; return "params." + std::string(f.size_key); }},
    {"above_int64", [](const OpFile& f, Bundle& b) { b.params[f.size_key] = std::uint64_t{1} << 63; return "params." + std::string(f.size_key); }},
    {"unknown_key", [](const OpFile&, Bundle& b) { b.params["layer"] = 0; return std::string("params.layer"); }},
    {"not_an_object", [](const OpFile&, Bundle& b) { b.params = json::array({1, 2}); return std::string("params="); }},
    {"contradicts_page_size", [](const OpFile&, Bundle& b) {
       b.params["page_size"] = b.params.value("page_size", 1) + 1;
       return std::string("params.page_size");
     }},
    {"wrong_text", [](const OpFile& f, Bundle& b) {
       // Each operator's text key, or (for those without one) a float key given text.
       const std::string op = f.op;
       const char* key = op == "lightning_indexer" ? "mask" : op == "fused_qkv_paged" ? "weight_format" : "scale";
       b.params[key] = "sideways";
       return "params." + std::string(key);
     }},
    {"float_overflow", [](const OpFile& f, Bundle& b) {
       const std::string op = f.op;
       if (op == "lightning_indexer" || op == "fused_qkv_paged") {  // no float key: a huge layer_idx
         b.params["layer_idx"] = 1e300;
         return std::string("params.layer_idx");
       }
       b.params["scale"] = 1e300;  // beyond f32: must not be converted (undefined behaviour)
       return std::string("params.scale");
     }},
};

class GoldenFileParams : public ::testing::TestWithParam<std::tuple<OpFile, Mutation>> {};

std::string message_of_refusal(const std::function<void()>& call) {
  try {
    call();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST_P(GoldenFileParams, RefusedByNameWithNothingWritten) {
  const auto& [f, m] = GetParam();
  Bundle b = load(f);
  const Bundle original = b;
  const std::string key = m.apply(f, b);
  const OpDriver* d = find_driver(f.op);
  ASSERT_NE(d, nullptr);

  const std::string run_msg = message_of_refusal([&] { run_golden(*d, b, RunOptions{Backend::reference}); });
  ASSERT_FALSE(run_msg.empty()) << "accepted: " << m.name;
  EXPECT_EQ(run_msg.rfind(std::string(f.op) + ": ", 0), 0u) << run_msg;
  EXPECT_NE(run_msg.find(key), std::string::npos) << run_msg;
  EXPECT_EQ(run_msg.find('\n'), std::string::npos) << run_msg;
  for (const std::string& name : original.output_names()) {
    ASSERT_TRUE(b.has(name)) << name << " dropped";
    EXPECT_TRUE(b.at(name).same_bytes(original.at(name))) << name << " written";
  }

  // check: the golden file broken, and the candidate's own file broken the same way.
  const std::string check_msg = message_of_refusal([&] { check_golden(*d, b, &original, RunOptions{Backend::reference}); });
  EXPECT_EQ(check_msg, run_msg);
  const std::string rerun_msg = message_of_refusal([&] { check_golden(*d, b, nullptr, RunOptions{Backend::reference}); });
  EXPECT_EQ(rerun_msg, run_msg);
}

INSTANTIATE_TEST_SUITE_P(
    AllOps, GoldenFileParams, ::testing::Combine(::testing::ValuesIn(kFiles), ::testing::ValuesIn(kMutations)),
    [](const auto& info) { return std::string(std::get<0>(info.param).op) + "_" + std::get<1>(info.param).name; });

// The unmutated files pass both paths (the refusals above are the mutations' doing).
TEST(GoldenFileParamsBaseline, UnmutatedFilesCheckClean) {
  for (const OpFile& f : kFiles) {
    const Bundle b = load(f);
    const OpDriver* d = find_driver(f.op);
    for (const Comparison& c : check_golden(*d, b, &b, RunOptions{Backend::reference})) EXPECT_TRUE(c.pass) << c.detail;
    for (const Comparison& c : check_golden(*d, b, nullptr, RunOptions{Backend::reference}))
      EXPECT_TRUE(c.pass) << f.file << ": " << c.detail;
  }
}

// Tolerance entries the comparison reads are checked like params.
TEST(GoldenFileTolerance, BadNumbersAndKindsAreRefusedByName) {
  struct Case {
    const char* file;
    const char* output;
    const char* key;
    json value;
  };
  const Case cases[] = {
      {"fused_qkv_paged.dense_bf16_prefill.s1.safetensors", "out.output", "c", "x"},
      {"fused_qkv_paged.dense_bf16_prefill.s1.safetensors", "out.output", "c", -1},
      {"fused_qkv_paged.dense_bf16_prefill.s1.safetensors", "out.kv_cache.blocks", "u_out", 1e300},
      {"lightning_indexer.exact_causal.s1.safetensors", "out.output_indices", "exact", "yes"},
      {"msa_block_indexer.prefill_ragged_random.s1.safetensors", "out.out_idxs", "selection", 3},
  };
  for (const Case& c : cases) {
    Bundle b;
    ASSERT_TRUE(read_safetensors((golden_dir() / c.file).string(), &b).ok());
    b.tolerance[c.output] = json{{c.key, c.value}};
    const std::string msg = message_of_refusal([&] { check_golden(*find_driver(b.op), b, &b, RunOptions{Backend::reference}); });
    EXPECT_EQ(msg.rfind(b.op + ": tolerance." + c.output + "." + c.key, 0), 0u) << c.file << ": " << msg;
  }
  Bundle b;
  ASSERT_TRUE(read_safetensors((golden_dir() / kFiles[4].file).string(), &b).ok());
  b.tolerance["out.bogus"] = json{{"atol", 1}};
  const std::string msg = message_of_refusal([&] { check_golden(*find_driver(b.op), b, &b, RunOptions{Backend::reference}); });
  EXPECT_NE(msg.find("tolerance.out.bogus"), std::string::npos) << msg;
}

// Tensors: missing, of another rank, unknown, and outputs that are not what the operator writes.
TEST(GoldenFileTensors, MissingRankUnknownAndOutputShapesAreRefusedByName) {
  for (const OpFile& f : kFiles) {
    const OpDriver* d = find_driver(f.op);
    const Bundle original = load(f);
    const std::string first_input = original.has("q") ? "q" : "hidden_state";  // required by each operator
    {
      Bundle b = original;
      b.tensors.erase(first_input);
      const std::string msg = message_of_refusal([&] { run_golden(*d, b, RunOptions{Backend::reference}); });
      EXPECT_NE(msg.find(first_input), std::string::npos) << f.op << " " << first_input << ": " << msg;
    }
    {
      Bundle b = original;
      b.tensors[first_input] = Tensor(b.at(first_input).dtype(), {b.at(first_input).numel()});
      if (original.at(first_input).shape().size() == 1) b.tensors[first_input] = Tensor(DType::u8, {1, 1});
      const std::string msg = message_of_refusal([&] { run_golden(*d, b, RunOptions{Backend::reference}); });
      EXPECT_NE(msg.find("tensor " + first_input + " has rank"), std::string::npos) << msg;
    }
    {
      Bundle b = original;
      b.add("extra", DType::f32, {2});
      const std::string msg = message_of_refusal([&] { run_golden(*d, b, RunOptions{Backend::reference}); });
      EXPECT_NE(msg.find("\"extra\""), std::string::npos) << msg;
    }
    {
      // The golden file's first output cut short; then the candidate's.
      const std::string out = original.output_names().front();
      Bundle cut = original;
      std::vector<std::int64_t> shape = cut.at(out).shape();
      shape[0] += 1;
      cut.tensors[out] = Tensor(cut.at(out).dtype(), shape);
      std::string msg = message_of_refusal([&] { check_golden(*d, cut, &original, RunOptions{Backend::reference}); });
      EXPECT_NE(msg.find("the golden file's " + out), std::string::npos) << msg;
      msg = message_of_refusal([&] { check_golden(*d, original, &cut, RunOptions{Backend::reference}); });
      EXPECT_NE(msg.find("the candidate file's " + out), std::string::npos) << msg;
    }
  }
}

// Keys that only GPTQ weights use are optional for the other formats: a dense or FP8 file without
// them runs and checks clean; has_zp=true with a dense weight is a contradiction.
TEST(GoldenFileParamsFusedQkv, DenseAndFp8FilesNeedNoGptqKeys) {
  for (const char* file : {"fused_qkv_paged.dense_bf16_prefill.s1.safetensors",
                           "fused_qkv_paged.fp8_bf16_partial_blocks.s1.safetensors"}) {
    Bundle b;
    ASSERT_TRUE(read_safetensors((golden_dir() / file).string(), &b).ok());
    b.params.erase("group_size");
    b.params.erase("has_zp");
    const OpDriver* d = find_driver(b.op);
    for (const Comparison& c : check_golden(*d, b, nullptr, RunOptions{Backend::reference})) EXPECT_TRUE(c.pass) << file;
    b.params["has_zp"] = true;
    const std::string msg = message_of_refusal([&] { run_golden(*d, b, RunOptions{Backend::reference}); });
    EXPECT_NE(msg.find("fused_qkv_paged: params.has_zp=true"), std::string::npos) << msg;
  }
  Bundle g;
  ASSERT_TRUE(read_safetensors((golden_dir() / "fused_qkv_paged.gptq_bf16_g128_f16.s1.safetensors").string(), &g).ok());
  g.params.erase("group_size");
  const std::string msg = message_of_refusal([&] { run_golden(*find_driver(g.op), g, RunOptions{Backend::reference}); });
  EXPECT_NE(msg.find("params.group_size is missing"), std::string::npos) << msg;
}

// The grouped-head keys of the MSA indexer index the cache's heads: num_k_heads must divide the
// index heads and match k_cache.blocks.shape[4] (1 when absent); reduce_heads is a boolean.
TEST(GoldenFileParamsMsa, HeadKeysMustAgreeWithTheCache) {
  const OpDriver* d = find_driver("msa_block_indexer");
  ASSERT_NE(d, nullptr);
  const auto refusal = [&](const char* file, const char* key, const json& value) {
    Bundle b;
    EXPECT_TRUE(read_safetensors((golden_dir() / file).string(), &b).ok()) << file;
    if (value.is_null()) b.params.erase(key);
    else b.params[key] = value;
    const Bundle original = b;
    const std::string msg = message_of_refusal([&] { run_golden(*d, b, RunOptions{Backend::reference}); });
    for (const std::string& name : original.output_names())
      EXPECT_TRUE(b.at(name).same_bytes(original.at(name))) << name << " written";
    return msg;
  };
  const char* grouped = "msa_block_indexer.grouped_k_heads_exact.s1.safetensors";  // Hi 4, Hk 2
  EXPECT_NE(refusal(grouped, "num_k_heads", 3).find("params.num_k_heads=3 (must divide num_index_heads=4)"),
            std::string::npos);
  EXPECT_NE(refusal(grouped, "num_k_heads", 4).find("params.num_k_heads=4 (k_cache.blocks.shape[4]=2"),
            std::string::npos);
  EXPECT_NE(refusal(grouped, "num_k_heads", nullptr).find("params.num_k_heads=(absent) (k_cache.blocks.shape[4]=2"),
            std::string::npos);
  EXPECT_NE(refusal("msa_block_indexer.reduce_heads_exact.s1.safetensors", "reduce_heads", 1).find("params.reduce_heads"),
            std::string::npos);
}

}  // namespace
}  // namespace mlakit::goldens
