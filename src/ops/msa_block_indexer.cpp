// Validation and back-end routing of the MSA block indexer (docs/msa_block_indexer.md).
#include "mlakit/ops/msa_block_indexer.hpp"

#include <cmath>
#include <sstream>
#include <string>

#include "core/common/device_kernels.hpp"
#include "core/common/validate.hpp"
#include "ops/common/plan_run.hpp"
#include "ops/validators.hpp"
#include "cpu/msa_block_indexer.hpp"
#include "reference/msa_block_indexer.hpp"

namespace mlakit::core {

namespace {
constexpr const char* kOp = "msa_block_indexer";

std::string float_text(float v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}
}  // namespace

// Everything docs/msa_block_indexer.md §7 asks, first failure wins. On success *space is where q, the cache
// blocks and out_idxs live.
Status validate_msa_block_indexer(const MsaBlockIndexerDesc& d, const MsaBlockIndexerArgs& a, MemorySpace* space,
                                  Checks checks) {
  Validator v(kOp, checks);
  (void)(v.positive("num_index_heads", d.num_index_heads) && v.positive("idx_head_dim", d.idx_head_dim) &&
      v.positive("block_size", d.block_size) && v.positive("topk", d.topk) &&
      v.non_negative("init_blocks", d.init_blocks) && v.non_negative("local_blocks", d.local_blocks) &&
      v.positive("num_k_heads", d.num_k_heads));
  if (v.ok() && d.num_index_heads % d.num_k_heads != 0) {
    std::ostringstream text;
    text << '=' << d.num_k_heads << " (must divide num_index_heads=" << d.num_index_heads << ')';
    v.fail("num_k_heads", text.str());
  }
  if (v.ok() && !std::isfinite(d.scale)) {
    std::ostringstream text;
    text << '=' << float_text(d.scale) << " (must be finite)";
    v.fail("scale", text.str());
  }
  if (!v.ok()) return v.status();

  if (!v.tensor("q", a.q, {DType::bf16}, {kAnyDim, d.num_index_heads, d.idx_head_dim})) return v.status();
  const std::int64_t rows = a.q.shape[0];
  if (!v.row_offsets("input_row_offsets", a.input_row_offsets, rows)) return v.status();
  const std::int64_t batch = a.input_row_offsets.shape[0] - 1;
  if (!v.tensor("prefix_lens", a.prefix_lens, {DType::u32}, {batch})) return v.status();
  if (v.reads_metadata() && a.prefix_lens.memory != MemorySpace::host) {
    v.fail("prefix_lens", " is in device memory (lengths must be readable on the host here)");
    return v.status();
  }

  CacheExpect expect{{DType::bf16, DType::f8e4m3}};
  expect.kv_dim = 1;
  expect.num_kv_heads = d.num_k_heads;
  expect.head_size = d.idx_head_dim;
  expect.scales = false;
  expect.layer_idx = a.layer_idx;
  expect.need_cache_lengths = false;  // not read: prefix_lens is the length that counts
  if (!v.paged_cache("k_cache", a.k_cache, expect, batch)) return v.status();
  if (!v.optional_tensor("k_cache.cache_lengths", a.k_cache.cache_lengths, {DType::u32}, {batch})) return v.status();
  if (v.reads_metadata() && a.k_cache.cache_lengths.present() && a.k_cache.cache_lengths.memory != MemorySpace::host) {
    v.fail("k_cache.cache_lengths", " is in device memory (lengths must be readable on the host here)");
    return v.status();
  }
  if (d.block_size != a.k_cache.page_size()) {
    std::ostringstream text;
    text << '=' << d.block_size << " (must equal the k_cache page_size=" << a.k_cache.page_size() << ')';
    v.fail("block_size", text.str());
    return v.status();
  }

  const std::int64_t selections = d.reduce_heads ? 1 : d.num_index_heads;
  if (!v.tensor("out_idxs", a.out_idxs, {DType::i32}, {selections, rows, d.topk})) return v.status();

  MemorySpace where = MemorySpace::host;
  if (!v.same_memory({{"q", &a.q}, {"k_cache.blocks", &a.k_cache.blocks}, {"out_idxs", &a.out_idxs}}, &where))
    return v.status();
  const Validator::NamedView reads[] = {{"q", &a.q},
                                        {"input_row_offsets", &a.input_row_offsets},
                                        {"prefix_lens", &a.prefix_lens},
                                        {"k_cache.blocks", &a.k_cache.blocks},
                                        {"k_cache.lookup_table", &a.k_cache.lookup_table},
                                        {"k_cache.cache_lengths", &a.k_cache.cache_lengths}};
  const Validator::NamedView writes[] = {{"out_idxs", &a.out_idxs}};
  if (!v.written_apart(writes, reads)) return v.status();

  // Every key position a row reads must have a page: sequence b reads 0 .. prefix+seq_len-1
  // (its last row sees them all). Empty sequences read nothing.
  for (std::int64_t b = 0; v.reads_metadata() && b < batch; ++b) {
    const std::int64_t seq_len =
        std::int64_t(u32_at(a.input_row_offsets, b + 1)) - std::int64_t(u32_at(a.input_row_offsets, b));
    if (seq_len == 0) continue;
    const std::int64_t end = std::int64_t(u32_at(a.prefix_lens, b)) + seq_len;
    if (!v.pages_exist("k_cache", a.k_cache, b, 0, end)) return v.status();
  }
  if (space) *space = where;
  return Status::success();
}

namespace {

struct MsaTraits {
  using Desc = MsaBlockIndexerDesc;
  using Args = MsaBlockIndexerArgs;
  static constexpr const char* kOp = "msa_block_indexer";
  static FieldList fields(Args& a) {
    return {{"q", &a.q, Role::data},
            {"input_row_offsets", &a.input_row_offsets, Role::metadata},
            {"prefix_lens", &a.prefix_lens, Role::metadata},
            {"k_cache.blocks", &a.k_cache.blocks, Role::data},
            {"k_cache.lookup_table", &a.k_cache.lookup_table, Role::metadata},
            {"k_cache.cache_lengths", &a.k_cache.cache_lengths, Role::metadata},
            {"out_idxs", &a.out_idxs, Role::written}};
  }
  static Status validate(const Desc& d, const Args& a, MemorySpace* space, Checks c) {
    return validate_msa_block_indexer(d, a, space, c);
  }
  static Status cuda(const Desc& d, const Args& a, const Args& h, const DeviceLaunch& l) {
    return launch_device(kOp, &DeviceKernels::msa_block_indexer, d, a, h, l);
  }
  static Status cpu(const Desc& d, const Args& a) { return cpu::msa_block_indexer(d, a); }
  static void reference(const Desc& d, const Args& a) { reference::msa_block_indexer(d, a); }
  static Status same_step(const Args& planned, const Args& a) {
    const Status s = same_size(kOp, "q.shape[0]", a.q.shape[0], planned.q.shape[0]);
    return s.ok() ? same_cache(kOp, "k_cache", a.k_cache, planned.k_cache) : s;
  }
  static cpu::CallBufferSizes cpu_buffers([[maybe_unused]] const Desc& d, [[maybe_unused]] const Args& a) {
    return cpu::msa_block_indexer_call_buffers(d, a);
  }
};

}  // namespace

}  // namespace mlakit::core

namespace mlakit {

Status msa_block_indexer(const MsaBlockIndexerDesc& d, const MsaBlockIndexerArgs& a, const RunOptions& o) {
  return core::one_shot_call<core::MsaTraits>(d, a, o);
}

Status plan(const MsaBlockIndexerDesc& d, const MsaBlockIndexerArgs& step, const PlanOptions& o, MsaBlockIndexerPlan* out) {
  return core::plan_call<core::MsaTraits>(d, step, o, false, out);
}

Status run(const MsaBlockIndexerPlan& p, const MsaBlockIndexerArgs& a, const RunContext& c) {
  return core::run_call<core::MsaTraits>(p, a, c);
}

}  // namespace mlakit
