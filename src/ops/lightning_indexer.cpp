// Op 1 (docs/lightning_indexer.md): validation of the lightning indexer and of its companion remap, and the public
// entry points that route a validated call to a back-end.
#include "mlakit/ops/lightning_indexer.hpp"

#include <cstdint>
#include <limits>
#include <string>

#include "core/common/device_kernels.hpp"
#include "core/common/validate.hpp"
#include "core/shared/remap_indices.hpp"
#include "cpu/lightning_indexer.hpp"
#include "ops/common/plan_run.hpp"
#include "ops/validators.hpp"
#include "reference/lightning_indexer.hpp"

namespace mlakit::core {
namespace {

constexpr const char* kOp = "lightning_indexer";
constexpr const char* kRemapOp = "remap_indices_to_rows";
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();

// a·b·c as element counts: false when the product (or its size in bytes, 8 per element at most)
// would not fit in int64.
bool product_fits(std::initializer_list<std::int64_t> factors) {
  std::int64_t p = 8;
  for (std::int64_t f : factors)
    if (__builtin_mul_overflow(p, f, &p)) return false;
  return true;
}

bool fits_check(Validator& v, const char* field, const TensorView& t, std::initializer_list<std::int64_t> factors) {
  if (!v.ok()) return false;
  if (product_fits(factors)) return true;
  return v.fail(std::string(field) + ".shape", std::string("=") + shape_string(t) + " (its size in bytes overflows int64)");
}

std::string pos_string(std::int64_t t, std::int64_t c) {
  return std::string("[") + std::to_string(t) + ", " + std::to_string(c) + "]";
}

}  // namespace

// Everything docs/lightning_indexer.md §7 asks of a lightning-indexer call, in the order the message will name it.
// On success *space is where the tensors live.
Status validate_lightning_indexer(const LightningIndexerDesc& d, const LightningIndexerArgs& a, MemorySpace* space,
                                  Checks checks) {
  Validator v(kOp, checks);
  // Descriptor. Upper limits keep every count and position in 32 bits, as the output is i32.
  v.positive("num_heads", d.num_heads) && v.at_most("num_heads", d.num_heads, "i32_max", kI32Max);
  v.ok() && v.positive("head_dim", d.head_dim) && v.at_most("head_dim", d.head_dim, "i32_max", kI32Max);
  v.ok() && v.positive("top_k", d.top_k) && v.at_most("top_k", d.top_k, "i32_max", kI32Max);
  if (v.ok() && d.mask != IndexerMask::causal && d.mask != IndexerMask::none)
    v.fail("mask", std::string("=") + std::to_string(static_cast<int>(d.mask)) + " (expected causal or none)");
  if (!v.ok()) return v.status();

  const std::int64_t H = d.num_heads, D = d.head_dim;
  if (!v.tensor("q", a.q, {DType::f8e4m3}, {kAnyDim, H, D})) return v.status();
  const std::int64_t T = a.q.shape[0];
  fits_check(v, "q", a.q, {T, H, D});
  v.tensor("q_s", a.q_s, {DType::f32}, {T, H});
  v.row_offsets("input_row_offsets", a.input_row_offsets, T);
  if (!v.ok()) return v.status();
  const std::int64_t B = a.input_row_offsets.shape[0] - 1;

  CacheExpect expect{{DType::f8e4m3}};
  expect.kv_dim = 1;
  expect.num_kv_heads = 1;
  expect.head_size = D;
  expect.scales = true;
  expect.min_granularity = D;
  expect.layer_idx = a.layer_idx;
  expect.need_cache_lengths = true;
  v.paged_cache("k_cache", a.k_cache, expect, B);
  v.tensor("output_indices", a.output_indices, {DType::i32}, {T, d.top_k});
  fits_check(v, "output_indices", a.output_indices, {T, d.top_k});
  if (!v.ok()) return v.status();

  // Every key position a row reads, per sequence with rows: 0 … cache_length + seq_len − 1.
  for (std::int64_t b = 0; v.reads_metadata() && b < B; ++b) {
    const std::int64_t seq = static_cast<std::int64_t>(u32_at(a.input_row_offsets, b + 1)) -
                             static_cast<std::int64_t>(u32_at(a.input_row_offsets, b));
    if (seq == 0) continue;
    const std::int64_t cache_len = u32_at(a.k_cache.cache_lengths, b);
    const std::int64_t n = cache_len + seq;
    if (n > kI32Max)
      return (v.fail("k_cache.cache_lengths[" + std::to_string(b) + "]",
                     std::string("=") + std::to_string(cache_len) + " with seq_len " + std::to_string(seq) + " gives " +
                         std::to_string(n) + " key positions (must be <= " + std::to_string(kI32Max) +
                         ": positions are written as i32)"),
              v.status());
    if (!v.pages_exist("k_cache", a.k_cache, b, 0, n)) return v.status();
  }

  // The output may not share memory with anything the call reads; all in one memory space.
  const Validator::NamedView reads[] = {{"q", &a.q},
                                        {"q_s", &a.q_s},
                                        {"input_row_offsets", &a.input_row_offsets},
                                        {"k_cache.blocks", &a.k_cache.blocks},
                                        {"k_cache.scales", &a.k_cache.scales},
                                        {"k_cache.lookup_table", &a.k_cache.lookup_table},
                                        {"k_cache.cache_lengths", &a.k_cache.cache_lengths}};
  const Validator::NamedView writes[] = {{"output_indices", &a.output_indices}};
  v.written_apart(writes, reads);
  v.same_memory(reads, writes, space);
  return v.status();
}

Status validate_remap_indices(const RemapIndicesArgs& a, MemorySpace* space, Checks checks) {
  Validator v(kRemapOp, checks);
  v.positive("page_size", a.page_size) && v.at_most("page_size", a.page_size, "i32_max", kI32Max);
  v.ok() && v.positive("num_blocks", a.num_blocks) && v.at_most("num_blocks", a.num_blocks, "i32_max", kI32Max);
  // Rows are blk·page_size + off < num_blocks·page_size and are written as i32.
  if (v.ok() && a.num_blocks * a.page_size - 1 > kI32Max)
    v.fail("num_blocks", std::string("=") + std::to_string(a.num_blocks) + " with page_size=" + std::to_string(a.page_size) +
                             " gives " + std::to_string(a.num_blocks * a.page_size) +
                             " rows (row numbers must fit in i32)");
  if (!v.tensor("indices", a.indices, {DType::i32}, {kAnyDim, kAnyDim})) return v.status();
  const std::int64_t T = a.indices.shape[0], K = a.indices.shape[1];
  fits_check(v, "indices", a.indices, {T, K});
  v.row_offsets("input_row_offsets", a.input_row_offsets, T);
  if (!v.ok()) return v.status();
  const std::int64_t B = a.input_row_offsets.shape[0] - 1;
  v.tensor("lookup_table", a.lookup_table, {DType::u32}, {B, kAnyDim});
  if (v.ok() && v.reads_metadata() && a.lookup_table.memory != MemorySpace::host)
    v.fail("lookup_table", " is in device memory (page tables must be readable on the host here)");
  v.tensor("rows", a.rows, {DType::i32}, {T, K});
  const Validator::NamedView reads[] = {
      {"indices", &a.indices}, {"input_row_offsets", &a.input_row_offsets}, {"lookup_table", &a.lookup_table}};
  const Validator::NamedView writes[] = {{"rows", &a.rows}};
  v.written_apart(writes, reads);
  MemorySpace where = MemorySpace::host;
  v.same_memory(reads, writes, &where);
  if (space) *space = where;
  if (!v.ok()) return v.status();

  // Every index: -1, or a position whose page exists. The indices are data, not batch metadata:
  // read in every host call (a run included); in device memory the kernel checks them and raises
  // the device error flag (see check_device_errors).
  if (!v.reads_content()) return v.status();
  const std::int64_t max_pages = a.lookup_table.shape[1];
  const auto* lut = static_cast<const std::uint32_t*>(a.lookup_table.data);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t t = u32_at(a.input_row_offsets, b); t < u32_at(a.input_row_offsets, b + 1); ++t) {
      for (std::int64_t c = 0; c < K; ++c) {
        const std::int64_t x = i32_at(a.indices, t * K + c);
        if (x == -1) continue;
        const std::string field = "indices" + pos_string(t, c);
        if (x < 0) return (v.fail(field, std::string("=") + std::to_string(x) + " (must be -1 or a position >= 0)"), v.status());
        const std::int64_t page = x / a.page_size;
        if (page >= max_pages)
          return (v.fail(field, std::string("=") + std::to_string(x) + " is past the lookup table of sequence " + std::to_string(b) +
                                    " (expected < max_pages*page_size=" + std::to_string(max_pages * a.page_size) + ")"),
                  v.status());
        const std::uint32_t blk = lut[b * max_pages + page];
        if (static_cast<std::int64_t>(blk) >= a.num_blocks)
          return (v.fail("lookup_table" + pos_string(b, page),
                         std::string("=") + std::to_string(blk) + " (must be < num_blocks=" + std::to_string(a.num_blocks) +
                             ": " + field + std::string("=") + std::to_string(x) + " of sequence " + std::to_string(b) +
                             " needs a page)"),
                  v.status());
      }
    }
  }
  return v.status();
}

}  // namespace mlakit::core

namespace mlakit::core {
namespace {

struct LightningTraits {
  using Desc = LightningIndexerDesc;
  using Args = LightningIndexerArgs;
  static constexpr const char* kOp = "lightning_indexer";
  static FieldList fields(Args& a) {
    return {{"q", &a.q, Role::data},
            {"q_s", &a.q_s, Role::data},
            {"input_row_offsets", &a.input_row_offsets, Role::metadata},
            {"k_cache.blocks", &a.k_cache.blocks, Role::data},
            {"k_cache.scales", &a.k_cache.scales, Role::data},
            {"k_cache.lookup_table", &a.k_cache.lookup_table, Role::metadata},
            {"k_cache.cache_lengths", &a.k_cache.cache_lengths, Role::metadata},
            {"output_indices", &a.output_indices, Role::written}};
  }
  static Status validate(const Desc& d, const Args& a, MemorySpace* space, Checks c) {
    return validate_lightning_indexer(d, a, space, c);
  }
  static Status cuda(const Desc& d, const Args& a, const Args& h, const DeviceLaunch& l) {
    return launch_device(kOp, &DeviceKernels::lightning_indexer, d, a, h, l);
  }
  static Status cpu(const Desc& d, const Args& a) { return cpu::lightning_indexer(d, a); }
  static void reference(const Desc& d, const Args& a) { reference::lightning_indexer(d, a); }
  static Status same_step(const Args& planned, const Args& a) {
    const Status s = same_size(kOp, "q.shape[0]", a.q.shape[0], planned.q.shape[0]);
    return s.ok() ? same_cache(kOp, "k_cache", a.k_cache, planned.k_cache) : s;
  }
  static cpu::CallBufferSizes cpu_buffers(const Desc& d, const Args& a) {
    return cpu::lightning_indexer_detail::call_buffers(d, a);
  }
};

struct RemapTraits {
  using Desc = NoDesc;
  using Args = RemapIndicesArgs;
  static constexpr const char* kOp = "remap_indices_to_rows";
  static FieldList fields(Args& a) {
    return {{"indices", &a.indices, Role::content},
            {"input_row_offsets", &a.input_row_offsets, Role::metadata},
            {"lookup_table", &a.lookup_table, Role::metadata},
            {"rows", &a.rows, Role::written}};
  }
  static Status validate(const Desc&, const Args& a, MemorySpace* space, Checks c) {
    return validate_remap_indices(a, space, c);
  }
  static Status cuda(const Desc&, const Args& a, const Args&, const DeviceLaunch& l) {
    return launch_device(kOp, &DeviceKernels::remap_indices_to_rows, a, l);
  }
  static Status cpu(const Desc&, const Args& a) { return cpu::remap_indices_to_rows(a); }
  static void reference(const Desc&, const Args& a) { shared::remap_indices_to_rows(a); }
  static Status same_step(const Args& planned, const Args& a) {
    Status s = same_size(kOp, "indices.shape[0]", a.indices.shape[0], planned.indices.shape[0]);
    if (s.ok()) s = same_size(kOp, "num_blocks", a.num_blocks, planned.num_blocks);
    if (s.ok()) s = same_size(kOp, "page_size", a.page_size, planned.page_size);
    return s;
  }
  static cpu::CallBufferSizes cpu_buffers(const Desc&, const Args&) { return {}; }
};

}  // namespace
}  // namespace mlakit::core

namespace mlakit {

Status lightning_indexer(const LightningIndexerDesc& d, const LightningIndexerArgs& a, const RunOptions& o) {
  return core::one_shot_call<core::LightningTraits>(d, a, o);
}

Status plan(const LightningIndexerDesc& d, const LightningIndexerArgs& step, const PlanOptions& o,
            LightningIndexerPlan* out) {
  return core::plan_call<core::LightningTraits>(d, step, o, false, out);
}

Status run(const LightningIndexerPlan& p, const LightningIndexerArgs& a, const RunContext& c) {
  return core::run_call<core::LightningTraits>(p, a, c);
}

Status remap_indices_to_rows(const RemapIndicesArgs& a, const RunOptions& o) {
  return core::one_shot_call<core::RemapTraits>(NoDesc{}, a, o);
}

Status plan(const RemapIndicesArgs& step, const PlanOptions& o, RemapIndicesPlan* out) {
  return core::plan_call<core::RemapTraits>(NoDesc{}, step, o, false, out);
}

Status run(const RemapIndicesPlan& p, const RemapIndicesArgs& a, const RunContext& c) {
  return core::run_call<core::RemapTraits>(p, a, c);
}

}  // namespace mlakit
