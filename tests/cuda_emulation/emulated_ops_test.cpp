// The cuda back-end's kernels, run on the CPU emulation, against the reference on every golden-matrix
// case: the whole device path of a call (harness staging into "device" memory, DeviceMirror, the
// operator's host validator, the cuda kernels, the copy back) with the checks of the golden matrix
// (the driver's comparison, guards, untouched inputs, a bit-identical second run, no leaked
// device memory).
//
// `device_<op>` below is the cuda branch of each operator's entry point as it is to be wired in
// src/core/<op>.cpp: the DeviceMirror entries list every tensor of the call with its use.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "core/common/device_mirror.hpp"
#include "cuda/fused_qkv_paged.hpp"
#include "cuda/lightning_indexer.hpp"
#include "cuda/mla_prefill_fp8.hpp"
#include "cuda/msa_block_indexer.hpp"
#include "cuda/sparse_mla_prefill.hpp"
#include "cuda_runtime.h"
#include "harness/common/device_staging.hpp"
#include "harness/common/driver.hpp"

namespace mlakit::core {
// Defined in src/core/<op>.cpp (no header declares them).
Status validate_lightning_indexer(const LightningIndexerDesc&, const LightningIndexerArgs&, MemorySpace*);
Status validate_remap_indices(const RemapIndicesArgs&, MemorySpace*);
Status validate_msa_block_indexer(const MsaBlockIndexerDesc&, const MsaBlockIndexerArgs&, MemorySpace*);
Status validate_mla_prefill_fp8(const MlaPrefillFp8Desc&, const MlaPrefillFp8Args&, MemorySpace*);
Status validate_sparse_mla_prefill(const SparseMlaPrefillDesc&, const SparseMlaPrefillArgs&, MemorySpace*);
Status validate_fused_qkv_paged(const FusedQkvPagedDesc&, const FusedQkvPagedArgs&, MemorySpace*);
}  // namespace mlakit::core

namespace mlakit {
namespace {

using core::MirrorUse;
using harness::Bundle;
using harness::json;
using harness::Tensor;

// Stands in for route() + the cuda branch's check (the entry points route; this test calls the
// kernels directly).
Status expect_device(MemorySpace space, const core::DeviceMirror& mirror, const char* op) {
  if (space != MemorySpace::device)
    return Status::error(StatusCode::invalid_argument, op, "", std::string(op) + ": the call is not in device memory");
  return mirror.require_device();
}

// ---- the device branch of each entry point -------------------------------------------------------
Status device_lightning_indexer(const LightningIndexerDesc& d, const LightningIndexerArgs& a, const RunOptions& o) {
  LightningIndexerArgs h = a;
  core::DeviceMirror mirror("lightning_indexer", o.cuda_stream);
  Status s = mirror.prepare({{"q", &h.q, MirrorUse::device},
                             {"q_s", &h.q_s, MirrorUse::device},
                             {"input_row_offsets", &h.input_row_offsets, MirrorUse::host_read},
                             {"k_cache.blocks", &h.k_cache.blocks, MirrorUse::device},
                             {"k_cache.scales", &h.k_cache.scales, MirrorUse::device},
                             {"k_cache.lookup_table", &h.k_cache.lookup_table, MirrorUse::host_read},
                             {"k_cache.cache_lengths", &h.k_cache.cache_lengths, MirrorUse::host_read},
                             {"output_indices", &h.output_indices, MirrorUse::written}});
  if (!s.ok()) return s;
  MemorySpace space = MemorySpace::host;
  s = core::validate_lightning_indexer(d, h, &space);
  if (!s.ok()) return s;
  s = mirror.finish(&space);
  if (!s.ok()) return s;
  s = expect_device(space, mirror, "lightning_indexer");
  if (!s.ok()) return s;
  return cuda::lightning_indexer(d, a, h, o.cuda_stream);
}

Status device_remap(const RemapIndicesArgs& a, const RunOptions& o) {
  RemapIndicesArgs h = a;
  core::DeviceMirror mirror("remap_indices_to_rows", o.cuda_stream);
  Status s = mirror.prepare({{"indices", &h.indices, MirrorUse::host_read},
                             {"input_row_offsets", &h.input_row_offsets, MirrorUse::host_read},
                             {"lookup_table", &h.lookup_table, MirrorUse::host_read},
                             {"rows", &h.rows, MirrorUse::written}});
  if (!s.ok()) return s;
  MemorySpace space = MemorySpace::host;
  s = core::validate_remap_indices(h, &space);
  if (!s.ok()) return s;
  s = mirror.finish(&space);
  if (!s.ok()) return s;
  s = expect_device(space, mirror, "remap_indices_to_rows");
  if (!s.ok()) return s;
  return cuda::remap_indices_to_rows(a, o.cuda_stream);
}

Status device_msa_block_indexer(const MsaBlockIndexerDesc& d, const MsaBlockIndexerArgs& a, const RunOptions& o) {
  MsaBlockIndexerArgs h = a;
  core::DeviceMirror mirror("msa_block_indexer", o.cuda_stream);
  Status s = mirror.prepare({{"q", &h.q, MirrorUse::device},
                             {"input_row_offsets", &h.input_row_offsets, MirrorUse::host_read},
                             {"prefix_lens", &h.prefix_lens, MirrorUse::host_read},
                             {"k_cache.blocks", &h.k_cache.blocks, MirrorUse::device},
                             {"k_cache.lookup_table", &h.k_cache.lookup_table, MirrorUse::host_read},
                             {"k_cache.cache_lengths", &h.k_cache.cache_lengths, MirrorUse::host_read},
                             {"out_idxs", &h.out_idxs, MirrorUse::written}});
  if (!s.ok()) return s;
  MemorySpace space = MemorySpace::host;
  s = core::validate_msa_block_indexer(d, h, &space);
  if (!s.ok()) return s;
  s = mirror.finish(&space);
  if (!s.ok()) return s;
  s = expect_device(space, mirror, "msa_block_indexer");
  if (!s.ok()) return s;
  return cuda::msa_block_indexer(d, a, h, o.cuda_stream);
}

Status device_mla_prefill_fp8(const MlaPrefillFp8Desc& d, const MlaPrefillFp8Args& a, const RunOptions& o) {
  MlaPrefillFp8Args h = a;
  core::DeviceMirror mirror("mla_prefill_fp8", o.cuda_stream);
  Status s = mirror.prepare({{"q", &h.q, MirrorUse::written},
                             {"input_row_offsets", &h.input_row_offsets, MirrorUse::host_read},
                             {"freqs_cis", &h.freqs_cis, MirrorUse::device},
                             {"kv_norm_gamma", &h.kv_norm_gamma, MirrorUse::device},
                             {"kv_cache.blocks", &h.kv_cache.blocks, MirrorUse::written},
                             {"kv_cache.lookup_table", &h.kv_cache.lookup_table, MirrorUse::host_read},
                             {"kv_cache.cache_lengths", &h.kv_cache.cache_lengths, MirrorUse::host_read},
                             {"buffer_row_offsets", &h.buffer_row_offsets, MirrorUse::host_read},
                             {"cache_offsets", &h.cache_offsets, MirrorUse::host_read},
                             {"kv_b_proj", &h.kv_b_proj, MirrorUse::device},
                             {"kv_b_proj_scale", &h.kv_b_proj_scale, MirrorUse::device},
                             {"output", &h.output, MirrorUse::written}});
  if (!s.ok()) return s;
  MemorySpace space = MemorySpace::host;
  s = core::validate_mla_prefill_fp8(d, h, &space);
  if (!s.ok()) return s;
  s = mirror.finish(&space);
  if (!s.ok()) return s;
  s = expect_device(space, mirror, "mla_prefill_fp8");
  if (!s.ok()) return s;
  return cuda::mla_prefill_fp8(d, a, h, o.cuda_stream);
}

Status device_sparse_mla_prefill(const SparseMlaPrefillDesc& d, const SparseMlaPrefillArgs& a, const RunOptions& o) {
  SparseMlaPrefillArgs h = a;
  core::DeviceMirror mirror("sparse_mla_prefill", o.cuda_stream);
  Status s = mirror.prepare({{"q", &h.q, MirrorUse::device},
                             {"kv_cache.blocks", &h.kv_cache.blocks, MirrorUse::device},
                             {"kv_cache.scales", &h.kv_cache.scales, MirrorUse::device},
                             {"kv_cache.lookup_table", &h.kv_cache.lookup_table, MirrorUse::device},
                             {"kv_cache.cache_lengths", &h.kv_cache.cache_lengths, MirrorUse::device},
                             {"indices", &h.indices, MirrorUse::device},
                             {"topk_lengths", &h.topk_lengths, MirrorUse::host_read},
                             {"attn_sink", &h.attn_sink, MirrorUse::device},
                             {"output", &h.output, MirrorUse::written},
                             {"lse", &h.lse, MirrorUse::written}});
  if (!s.ok()) return s;
  MemorySpace space = MemorySpace::host;
  s = core::validate_sparse_mla_prefill(d, h, &space);
  if (!s.ok()) return s;
  s = mirror.finish(&space);
  if (!s.ok()) return s;
  s = expect_device(space, mirror, "sparse_mla_prefill");
  if (!s.ok()) return s;
  return cuda::sparse_mla_prefill(d, a, h, o.cuda_stream);
}

Status device_fused_qkv_paged(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, const RunOptions& o) {
  FusedQkvPagedArgs h = a;
  core::DeviceMirror mirror("fused_qkv_paged", o.cuda_stream);
  Status s = mirror.prepare({{"hidden_state", &h.hidden_state, MirrorUse::device},
                             {"input_row_offsets", &h.input_row_offsets, MirrorUse::host_read},
                             {"weight", &h.weight, MirrorUse::device},
                             {"weight_scale", &h.weight_scale, MirrorUse::device},
                             {"qweight", &h.qweight, MirrorUse::device},
                             {"scales", &h.scales, MirrorUse::device},
                             {"qzeros", &h.qzeros, MirrorUse::device},
                             {"g_idx", &h.g_idx, MirrorUse::host_read},
                             {"kv_cache.blocks", &h.kv_cache.blocks, MirrorUse::written},
                             {"kv_cache.lookup_table", &h.kv_cache.lookup_table, MirrorUse::host_read},
                             {"kv_cache.cache_lengths", &h.kv_cache.cache_lengths, MirrorUse::host_read},
                             {"output", &h.output, MirrorUse::written}});
  if (!s.ok()) return s;
  MemorySpace space = MemorySpace::host;
  s = core::validate_fused_qkv_paged(d, h, &space);
  if (!s.ok()) return s;
  s = mirror.finish(&space);
  if (!s.ok()) return s;
  s = expect_device(space, mirror, "fused_qkv_paged");
  if (!s.ok()) return s;
  return cuda::fused_qkv_paged(d, a, h, o.cuda_stream);
}

// ---- the drivers' run(), with the device branch instead of the public entry ----------------------
// (Each mirrors src/harness/<op>.cpp: outputs created and poisoned, in-place inputs copied to out.*,
// views built from the bundle; inside a DeviceStaging scope those views are device mirrors.)
Status run_lightning_indexer(Bundle& b) {
  b.remove_outputs();
  const json& p = b.params;
  LightningIndexerDesc d;
  d.num_heads = p.at("num_heads").get<std::int64_t>();
  d.head_dim = p.at("head_dim").get<std::int64_t>();
  d.top_k = p.at("top_k").get<std::int64_t>();
  d.mask = p.at("mask").get<std::string>() == "causal" ? IndexerMask::causal : IndexerMask::none;
  Tensor& out = b.add("out.output_indices", DType::i32, {b.at("q").shape()[0], d.top_k});
  out.poison();
  LightningIndexerArgs a;
  a.q = b.at("q").view();
  a.q_s = b.at("q_s").view();
  a.input_row_offsets = b.at("input_row_offsets").view();
  a.k_cache = harness::cache_view(b, "k_cache", p.at("quant_granularity").get<std::int64_t>());
  a.layer_idx = p.at("layer_idx").get<std::uint32_t>();
  a.output_indices = out.view();
  return device_lightning_indexer(d, a, RunOptions{Backend::cuda});
}

Status run_msa_block_indexer(Bundle& b) {
  b.remove_outputs();
  const json& p = b.params;
  MsaBlockIndexerDesc d;
  d.num_index_heads = p.at("num_index_heads").get<std::int64_t>();
  d.idx_head_dim = p.at("idx_head_dim").get<std::int64_t>();
  d.block_size = p.at("block_size").get<std::int64_t>();
  d.topk = p.at("topk").get<std::int64_t>();
  d.init_blocks = p.at("init_blocks").get<std::int64_t>();
  d.local_blocks = p.at("local_blocks").get<std::int64_t>();
  d.scale = p.at("scale").get<float>();
  Tensor& out = b.add("out.out_idxs", DType::i32, {d.num_index_heads, b.at("q").shape()[0], d.topk});
  out.poison();
  MsaBlockIndexerArgs a;
  a.q = b.at("q").view();
  a.input_row_offsets = b.at("input_row_offsets").view();
  a.prefix_lens = b.at("prefix_lens").view();
  a.k_cache = harness::cache_view(b, "k_cache");
  a.layer_idx = p.at("layer_idx").get<std::uint32_t>();
  a.out_idxs = out.view();
  return device_msa_block_indexer(d, a, RunOptions{Backend::cuda});
}

Status run_mla_prefill_fp8(Bundle& b) {
  b.remove_outputs();
  const json& p = b.params;
  MlaPrefillFp8Desc d;
  d.num_heads = p.at("num_heads").get<std::int64_t>();
  d.nope = p.at("nope").get<std::int64_t>();
  d.rope = p.at("rope").get<std::int64_t>();
  d.v = p.at("v").get<std::int64_t>();
  d.latent = p.at("latent").get<std::int64_t>();
  d.bn = p.at("bn").get<std::int64_t>();
  d.bk = p.at("bk").get<std::int64_t>();
  d.scale = static_cast<float>(p.at("scale").get<double>());
  d.epsilon = static_cast<float>(p.at("epsilon").get<double>());
  const std::int64_t T = b.at("q").shape()[0];
  Tensor& out = b.add("out.output", DType::bf16, {T, d.num_heads, d.v});
  out.poison();
  b.copy_to_output("q");
  b.copy_to_output("kv_cache.blocks");
  MlaPrefillFp8Args a;
  a.q = b.at("out.q").view();
  a.input_row_offsets = b.at("input_row_offsets").view();
  a.freqs_cis = b.at("freqs_cis").view();
  a.kv_norm_gamma = b.at("kv_norm_gamma").view();
  a.kv_cache = harness::cache_view(b, "kv_cache", 0, "out.kv_cache.blocks");
  a.layer_idx = static_cast<std::uint32_t>(p.at("layer_idx").get<std::int64_t>());
  a.buffer_row_offsets = b.at("buffer_row_offsets").view();
  a.cache_offsets = b.at("cache_offsets").view();
  a.buffer_length = p.at("buffer_length").get<std::int64_t>();
  a.kv_b_proj = b.at("kv_b_proj").view();
  a.kv_b_proj_scale = b.at("kv_b_proj_scale").view();
  a.output = b.at("out.output").view();
  return device_mla_prefill_fp8(d, a, RunOptions{Backend::cuda});
}

Status run_sparse_mla_prefill(Bundle& b) {
  const auto outputs = b.metadata.find("outputs");
  const bool want_lse = outputs == b.metadata.end() || outputs->second.find("out.lse") != std::string::npos;
  b.remove_outputs();
  const json& p = b.params;
  SparseMlaPrefillDesc d;
  d.num_q_heads = p.at("num_q_heads").get<std::int64_t>();
  d.qk_depth = p.at("qk_depth").get<std::int64_t>();
  d.v_depth = p.at("v_depth").get<std::int64_t>();
  d.indices_stride = p.at("indices_stride").get<std::int64_t>();
  d.scale = p.at("scale").get<float>();
  const std::int64_t T = b.at("q").shape()[0];
  b.add("out.output", DType::bf16, {T, d.num_q_heads, d.v_depth}).poison();
  if (want_lse) b.add("out.lse", DType::f32, {T, d.num_q_heads}).poison();
  SparseMlaPrefillArgs a;
  a.q = b.at("q").view();
  a.kv_cache = harness::cache_view(b, "kv_cache", p.value("quant_granularity", std::int64_t{0}));
  a.layer_idx = p.at("layer_idx").get<std::uint32_t>();
  a.indices = b.at("indices").view();
  a.topk_lengths = harness::optional_view(b, "topk_lengths");
  a.attn_sink = harness::optional_view(b, "attn_sink");
  a.output = b.at("out.output").view();
  a.lse = harness::optional_view(b, "out.lse");
  return device_sparse_mla_prefill(d, a, RunOptions{Backend::cuda});
}

Status run_fused_qkv_paged(Bundle& b) {
  b.remove_outputs();
  const json& p = b.params;
  FusedQkvPagedDesc d;
  d.q_dim = p.at("q_dim").get<std::int64_t>();
  const std::string format = p.at("weight_format").get<std::string>();
  d.weight_format = format == "dense" ? WeightFormat::dense : format == "fp8_block" ? WeightFormat::fp8_block : WeightFormat::gptq;
  d.group_size = p.at("group_size").get<std::int64_t>();
  d.has_zp = p.at("has_zp").get<bool>();
  const Tensor& x = b.at("hidden_state");
  b.add("out.output", x.dtype(), {x.shape()[0], d.q_dim}).poison();
  b.copy_to_output("kv_cache.blocks");
  FusedQkvPagedArgs a;
  a.hidden_state = b.at("hidden_state").view();
  a.input_row_offsets = b.at("input_row_offsets").view();
  a.weight = harness::optional_view(b, "weight");
  a.weight_scale = harness::optional_view(b, "weight_scale");
  a.qweight = harness::optional_view(b, "qweight");
  a.scales = harness::optional_view(b, "scales");
  a.qzeros = harness::optional_view(b, "qzeros");
  a.g_idx = harness::optional_view(b, "g_idx");
  a.kv_cache = harness::cache_view(b, "kv_cache", 0, "out.kv_cache.blocks");
  a.layer_idx = p.at("layer_idx").get<std::uint32_t>();
  a.output = b.at("out.output").view();
  return device_fused_qkv_paged(d, a, RunOptions{Backend::cuda});
}

const std::map<std::string, std::function<Status(Bundle&)>>& runners() {
  static const std::map<std::string, std::function<Status(Bundle&)>> r = {
      {"lightning_indexer", run_lightning_indexer}, {"msa_block_indexer", run_msa_block_indexer},
      {"mla_prefill_fp8", run_mla_prefill_fp8},     {"sparse_mla_prefill", run_sparse_mla_prefill},
      {"fused_qkv_paged", run_fused_qkv_paged}};
  return r;
}

// One staged device call: the bundle's tensors go to (emulated) device memory for the call and the
// outputs come back.
Status run_staged(const std::string& op, Bundle& b) {
  harness::DeviceStaging staging(b);
  EXPECT_TRUE(staging.active()) << "no device memory functions registered";
  const Status s = runners().at(op)(b);
  const Status staged = staging.error();
  const Status f = staging.finish();
  if (!staged.ok()) return staged;
  if (!s.ok()) return s;
  return f;
}

struct Param {
  std::string op;
  harness::CaseSpec spec;
  std::uint64_t seed;
};

std::vector<Param> params() {
  std::vector<Param> v;
  for (const auto* d : harness::all_drivers()) {
    if (!runners().count(d->name())) continue;
    for (const auto& spec : d->cases())
      for (std::uint64_t seed : {1, 2}) v.push_back({d->name(), spec, seed});
    v.push_back({d->name(), d->default_case(), 1});  // DeepSeek-sized: slow to emulate, one seed
  }
  return v;
}

void PrintTo(const Param& p, std::ostream* os) { *os << p.op << "/" << p.spec.name << "/seed" << p.seed; }

class EmulatedCuda : public ::testing::TestWithParam<Param> {};

TEST_P(EmulatedCuda, MatchesReference) {
  const Param& p = GetParam();
  const harness::OpDriver* driver = harness::find_driver(p.op);
  ASSERT_NE(driver, nullptr);
  const Bundle inputs = driver->generate(p.spec.knobs, p.seed);
  Bundle expected = inputs;
  const Status rs = driver->run(expected, RunOptions{Backend::reference});
  ASSERT_TRUE(rs.ok()) << rs.message;

  const long live_before = mlakit_cuda_emu::live_allocations();
  Bundle actual = inputs;
  const Status s = run_staged(p.op, actual);
  if (s.code == StatusCode::unsupported) GTEST_SKIP() << s.message;
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(mlakit_cuda_emu::live_allocations(), live_before) << "device memory leaked";
  for (const auto& [name, t] : inputs.tensors) {
    if (name.rfind("out.", 0) == 0) continue;
    EXPECT_TRUE(actual.at(name).same_bytes(t)) << "input '" << name << "' modified";
  }
  for (const auto& name : actual.output_names()) EXPECT_TRUE(actual.at(name).guard_intact()) << name << " overrun";
  for (const auto& c : driver->compare(expected, actual)) EXPECT_TRUE(c.pass) << harness::describe(c);

  Bundle again = inputs;
  ASSERT_TRUE(run_staged(p.op, again).ok());
  for (const auto& name : actual.output_names())
    EXPECT_TRUE(again.at(name).same_bytes(actual.at(name))) << "second run differs in '" << name << "'";
}

INSTANTIATE_TEST_SUITE_P(Ops, EmulatedCuda, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.op + "_" + info.param.spec.name + "_seed" + std::to_string(info.param.seed);
                         });

// The remap companion on every lightning-indexer case: reference rows vs emulated kernel rows.
TEST(EmulatedCudaRemap, MatchesReferenceOnIndexerOutputs) {
  const harness::OpDriver* driver = harness::find_driver("lightning_indexer");
  ASSERT_NE(driver, nullptr);
  for (const auto& spec : driver->cases()) {
    Bundle b = driver->generate(spec.knobs, 1);
    ASSERT_TRUE(driver->run(b, RunOptions{Backend::reference}).ok());
    const Tensor& idx = b.at("out.output_indices");
    const std::int64_t ps = b.params.at("page_size").get<std::int64_t>();
    const std::int64_t num_blocks = b.at("k_cache.blocks").shape()[0];
    b.add("out.rows_reference", DType::i32, idx.shape()).poison();
    RemapIndicesArgs ra;
    ra.indices = idx.view();
    ra.input_row_offsets = b.at("input_row_offsets").view();
    ra.lookup_table = b.at("k_cache.lookup_table").view();
    ra.page_size = ps;
    ra.num_blocks = num_blocks;
    ra.rows = b.at("out.rows_reference").view();
    ASSERT_TRUE(remap_indices_to_rows(ra, RunOptions{Backend::reference}).ok()) << spec.name;

    b.add("out.rows", DType::i32, idx.shape()).poison();
    {
      harness::DeviceStaging staging(b);
      RemapIndicesArgs da = ra;
      da.indices = b.at("out.output_indices").view();
      da.input_row_offsets = b.at("input_row_offsets").view();
      da.lookup_table = b.at("k_cache.lookup_table").view();
      da.rows = b.at("out.rows").view();
      const Status s = device_remap(da, RunOptions{Backend::cuda});
      ASSERT_TRUE(s.ok()) << spec.name << ": " << s.message;
      ASSERT_TRUE(staging.finish().ok());
    }
    EXPECT_EQ(std::memcmp(b.at("out.rows").bytes(), b.at("out.rows_reference").bytes(), idx.nbytes()), 0) << spec.name;
    EXPECT_TRUE(b.at("out.rows").guard_intact());
  }
}

// A validation failure on the device path names the field and value read from device memory, and
// nothing is written (the staged output comes back poisoned).
TEST(EmulatedCudaValidation, DeviceOffsetsAreValidatedBeforeAnyWrite) {
  const harness::OpDriver* driver = harness::find_driver("lightning_indexer");
  ASSERT_NE(driver, nullptr);
  Bundle b = driver->generate(driver->cases().front().knobs, 1);
  auto& iro = b.at("input_row_offsets");
  ASSERT_GE(iro.numel(), 2);
  iro.data<std::uint32_t>()[iro.numel() - 1] += 1;  // no longer the row count
  const long launches_before = mlakit_cuda_emu::launches();
  const Status s = run_staged("lightning_indexer", b);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code, StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("lightning_indexer: input_row_offsets["), std::string::npos) << s.message;
  EXPECT_EQ(mlakit_cuda_emu::launches(), launches_before);
  const Tensor& out = b.at("out.output_indices");
  for (std::int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.data<std::uint32_t>()[i], 0xA5A5A5A5u) << i;
}

}  // namespace
}  // namespace mlakit
