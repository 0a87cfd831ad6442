// Validation and back-end routing of the MSA block indexer (spec 02).
#include "mlakit/ops/msa_block_indexer.hpp"

#include <cmath>
#include <sstream>
#include <string>

#include "core/common/device_mirror.hpp"
#include "core/common/entry.hpp"
#include "core/common/validate.hpp"
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

// Everything spec README §4 asks, first failure wins. On success *space is where q, the cache
// blocks and out_idxs live.
Status validate_msa_block_indexer(const MsaBlockIndexerDesc& d, const MsaBlockIndexerArgs& a, MemorySpace* space) {
  Validator v(kOp);
  (void)(v.positive("num_index_heads", d.num_index_heads) && v.positive("idx_head_dim", d.idx_head_dim) &&
      v.positive("block_size", d.block_size) && v.positive("topk", d.topk) &&
      v.non_negative("init_blocks", d.init_blocks) && v.non_negative("local_blocks", d.local_blocks));
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
  if (a.prefix_lens.memory != MemorySpace::host) {
    v.fail("prefix_lens", " is in device memory (lengths must be readable on the host here)");
    return v.status();
  }

  CacheExpect expect{{DType::bf16, DType::f8e4m3}};
  expect.kv_dim = 1;
  expect.num_kv_heads = 1;
  expect.head_size = d.idx_head_dim;
  expect.scales = false;
  expect.layer_idx = a.layer_idx;
  expect.need_cache_lengths = false;  // not read: prefix_lens is the length that counts
  if (!v.paged_cache("k_cache", a.k_cache, expect, batch)) return v.status();
  if (!v.optional_tensor("k_cache.cache_lengths", a.k_cache.cache_lengths, {DType::u32}, {batch})) return v.status();
  if (a.k_cache.cache_lengths.present() && a.k_cache.cache_lengths.memory != MemorySpace::host) {
    v.fail("k_cache.cache_lengths", " is in device memory (lengths must be readable on the host here)");
    return v.status();
  }
  if (d.block_size != a.k_cache.page_size()) {
    std::ostringstream text;
    text << '=' << d.block_size << " (must equal the k_cache page_size=" << a.k_cache.page_size() << ')';
    v.fail("block_size", text.str());
    return v.status();
  }

  if (!v.tensor("out_idxs", a.out_idxs, {DType::i32}, {d.num_index_heads, rows, d.topk})) return v.status();

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
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t seq_len =
        std::int64_t(u32_at(a.input_row_offsets, b + 1)) - std::int64_t(u32_at(a.input_row_offsets, b));
    if (seq_len == 0) continue;
    const std::int64_t end = std::int64_t(u32_at(a.prefix_lens, b)) + seq_len;
    if (!v.pages_exist("k_cache", a.k_cache, b, 0, end)) return v.status();
  }
  if (space) *space = where;
  return Status::success();
}

}  // namespace mlakit::core

namespace mlakit {

Status msa_block_indexer(const MsaBlockIndexerDesc& d, const MsaBlockIndexerArgs& a, const RunOptions& o) {
  // Validation reads the offsets, prefix lengths, page table and lengths: for a device call, from
  // host mirrors of them (see core/common/device_mirror.hpp).
  MsaBlockIndexerArgs h = a;
  core::DeviceMirror mirror(core::kOp, o);
  Status s = mirror.prepare({{"q", &h.q, core::MirrorUse::device},
                             {"input_row_offsets", &h.input_row_offsets, core::MirrorUse::host_read},
                             {"prefix_lens", &h.prefix_lens, core::MirrorUse::host_read},
                             {"k_cache.blocks", &h.k_cache.blocks, core::MirrorUse::device},
                             {"k_cache.lookup_table", &h.k_cache.lookup_table, core::MirrorUse::host_read},
                             {"k_cache.cache_lengths", &h.k_cache.cache_lengths, core::MirrorUse::host_read},
                             {"out_idxs", &h.out_idxs, core::MirrorUse::written}});
  if (!s.ok()) return s;
  return core::run_validated(
      core::kOp, o, mirror, [&](MemorySpace* space) { return core::validate_msa_block_indexer(d, h, space); },
      [&] { return core::launch_device(core::kOp, &core::DeviceKernels::msa_block_indexer, d, a, h, o.cuda_stream); },
      [&] { return cpu::msa_block_indexer(d, a); }, [&] { reference::msa_block_indexer(d, a); });
}

}  // namespace mlakit
