// Validation and the public entry point of fused_qkv_paged (docs/fused_qkv_paged.md).
#include "mlakit/ops/fused_qkv_paged.hpp"

#include <algorithm>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/common/device_kernels.hpp"
#include "core/common/validate.hpp"
#include "ops/common/plan_run.hpp"
#include "ops/validators.hpp"
#include "cpu/fused_qkv_paged.hpp"
#include "reference/fused_qkv_paged.hpp"

namespace mlakit {
namespace core {

namespace {

constexpr const char* kOp = "fused_qkv_paged";
constexpr const char* kPackOp = "fused_qkv_paged.pack_weights";

const char* format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::dense: return "dense";
    case WeightFormat::fp8_block: return "fp8_block";
    case WeightFormat::gptq: return "gptq";
  }
  return "?";
}

std::string str(std::int64_t v) { return std::to_string(v); }

// "=<v>" (built by appending: GCC 12 misreports `"=" + std::string` under -Wrestrict).
std::string eq(std::int64_t v) {
  std::string s("=");
  s += std::to_string(v);
  return s;
}

// A tensor that the chosen weight format does not take must be absent.
bool absent(Validator& v, const char* field, const TensorView& t, WeightFormat f) {
  if (!v.ok()) return false;
  if (t.data == nullptr) return true;
  return v.fail(field, std::string(" is present (the ") + format_name(f) + " weight format takes no " + field +
                           "; pass an empty view)");
}

// The weight's output dimension must match q_dim plus the cache columns.
bool n_matches(Validator& v, const char* field, std::int64_t got, std::int64_t n, const std::string& how) {
  if (!v.ok()) return false;
  if (got == n) return true;
  return v.fail(field, eq(got) + " (expected N = " + how + " = " + str(n) + ")");
}

// The weight tensors of the desc's format (and the desc's GPTQ fields) for activations of dtype dt
// and K input channels, N output columns (n_how says where N comes from).
void validate_weights(Validator& v, const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, DType dt, std::int64_t K,
                      std::int64_t N, const std::string& n_how) {
  const WeightFormat fmt = d.weight_format;
  if (fmt != WeightFormat::gptq && d.has_zp)
    v.fail("has_zp", std::string("=true (only the gptq weight format has zero points; format is ") +
                         format_name(fmt) + ")");
  if (d.zero_format != ZeroFormat::v2 && d.zero_format != ZeroFormat::v1)
    v.fail("zero_format", "=" + str(static_cast<std::int64_t>(d.zero_format)) + " (expected v2 or v1)");
  else if (d.zero_format == ZeroFormat::v1 && !d.has_zp)
    v.fail("zero_format", "=v1 with has_zp=false (v1 describes stored zero points; without them the zero is 8)");

  // The weight, per format.
  switch (fmt) {
    case WeightFormat::dense:
      absent(v, "weight_scale", a.weight_scale, fmt);
      absent(v, "qweight", a.qweight, fmt);
      absent(v, "scales", a.scales, fmt);
      absent(v, "qzeros", a.qzeros, fmt);
      absent(v, "g_idx", a.g_idx, fmt);
      if (v.ok() && a.weight.data != nullptr && a.weight.dtype != dt)
        v.fail("weight.dtype", std::string("=").append(dtype_name(a.weight.dtype)) + " (expected " +
                                   std::string(dtype_name(dt)) + ", the dtype of hidden_state)");
      v.tensor("weight", a.weight, {dt}, {kAnyDim, K});
      n_matches(v, "weight.shape[0]", v.ok() ? a.weight.shape[0] : 0, N, n_how);
      break;
    case WeightFormat::fp8_block:
      absent(v, "qweight", a.qweight, fmt);
      absent(v, "scales", a.scales, fmt);
      absent(v, "qzeros", a.qzeros, fmt);
      absent(v, "g_idx", a.g_idx, fmt);
      v.tensor("weight", a.weight, {DType::f8e4m3}, {kAnyDim, K});
      n_matches(v, "weight.shape[0]", v.ok() ? a.weight.shape[0] : 0, N, n_how);
      v.tensor("weight_scale", a.weight_scale, {DType::f32}, {(N + 127) / 128, (K + 127) / 128});
      break;
    case WeightFormat::gptq: {
      absent(v, "weight", a.weight, fmt);
      absent(v, "weight_scale", a.weight_scale, fmt);
      const std::int64_t gs = d.group_size;
      if (v.ok() && gs != 32 && gs != 64 && gs != 128)
        v.fail("group_size", eq(gs) + " (expected 32, 64 or 128)");
      if (v.ok() && K % 8 != 0)
        v.fail("hidden_state.shape[1]", eq(K) + " (gptq packs 8 input channels per int32: K % 8 must be 0)");
      if (v.ok() && K % gs != 0)
        v.fail("hidden_state.shape[1]", eq(K) + " (K must be a multiple of group_size=" + str(gs) + ")");
      if (!v.ok()) break;
      const std::int64_t G = K / gs;
      v.tensor("qweight", a.qweight, {DType::i32}, {K / 8, kAnyDim});
      n_matches(v, "qweight.shape[1]", v.ok() ? a.qweight.shape[1] : 0, N, n_how);
      v.tensor("scales", a.scales, {DType::f16, DType::bf16}, {G, N});
      if (d.has_zp) {
        if (v.ok() && N % 8 != 0)
          v.fail("has_zp", std::string("=true with N=") + str(N) + " (qzeros packs 8 output columns per int32: N % 8 must be 0)");
        v.tensor("qzeros", a.qzeros, {DType::i32}, {G, N / 8});
      } else if (v.ok() && a.qzeros.data != nullptr) {
        v.fail("qzeros", " is present but has_zp=false (zero points are 8 then; pass an empty view)");
      }
      // g_idx is weight data, read in every host call (a run included); in device memory the
      // kernel checks it and raises the device error flag (see check_device_errors).
      if (v.optional_tensor("g_idx", a.g_idx, {DType::i32}, {K}) && a.g_idx.data != nullptr && v.reads_content()) {
        for (std::int64_t k = 0; v.ok() && k < K; ++k) {
          const std::int32_t g = i32_at(a.g_idx, k);
          if (g < 0 || g >= G)
            v.fail("g_idx[" + str(k) + "]", eq(g) + " (must be in [0, K/group_size=" + str(G) + "))");
        }
      }
      break;
    }
  }
}

// The weight tensors a call names, in the order a pack records them.
struct WeightViews {
  Validator::NamedView views[6];
  explicit WeightViews(const FusedQkvPagedArgs& a)
      : views{{"weight", &a.weight}, {"weight_scale", &a.weight_scale}, {"qweight", &a.qweight},
              {"scales", &a.scales}, {"qzeros", &a.qzeros}, {"g_idx", &a.g_idx}} {}
};

// A weight_format the library has.
bool known_format(Validator& v, WeightFormat f) {
  if (f == WeightFormat::dense || f == WeightFormat::fp8_block || f == WeightFormat::gptq) return true;
  return v.fail("weight_format", eq(static_cast<std::int64_t>(f)) + " (expected dense, fp8_block or gptq)");
}

// N of weights as stored (0 where the tensor is not a matrix): weight's rows, or qweight's columns.
std::int64_t stored_columns(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a) {
  const bool gptq = d.weight_format == WeightFormat::gptq;
  const TensorView& w = gptq ? a.qweight : a.weight;
  return w.rank == 2 ? w.shape[gptq ? 1 : 0] : 0;
}

// A call's packed weights, when named: made by pack_weights from this call's weight tensors, for
// its desc, activation dtype and shape.
void validate_packed(Validator& v, const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, DType dt, std::int64_t K,
                     std::int64_t N) {
  if (!v.ok() || a.packed_weights == nullptr) return;
  const detail::FusedQkvPackedState* s = a.packed_weights->state();
  if (s == nullptr) {
    v.fail("packed_weights", " is empty (expected a pack made by pack_weights, or none)");
    return;
  }
  const auto differs = [&](const char* field, const std::string& packed, const std::string& call) {
    v.fail(std::string("packed_weights.") + field,
           "=" + packed + " (the pack was made for " + packed + "; this call has " + call + ")");
  };
  if (s->desc.weight_format != d.weight_format)
    differs("weight_format", format_name(s->desc.weight_format), format_name(d.weight_format));
  else if (d.weight_format == WeightFormat::gptq && s->desc.group_size != d.group_size)
    differs("group_size", str(s->desc.group_size), str(d.group_size));
  else if (d.weight_format == WeightFormat::gptq && s->desc.has_zp != d.has_zp)
    differs("has_zp", s->desc.has_zp ? "true" : "false", d.has_zp ? "true" : "false");
  else if (d.weight_format == WeightFormat::gptq && s->desc.zero_format != d.zero_format)
    differs("zero_format", s->desc.zero_format == ZeroFormat::v1 ? "v1" : "v2", d.zero_format == ZeroFormat::v1 ? "v1" : "v2");
  else if (s->activations != dt)
    differs("activations", std::string(dtype_name(s->activations)),
            std::string("hidden_state.dtype=").append(dtype_name(dt)));
  else if (s->K != K)
    differs("K", str(s->K), "K=" + str(K));
  else if (s->N != N)
    differs("N", str(s->N), "N=" + str(N));
  else if (a.scales.data != nullptr && s->scales_dtype != a.scales.dtype)
    differs("scales_dtype", std::string(dtype_name(s->scales_dtype)),
            std::string("scales.dtype=").append(dtype_name(a.scales.dtype)));
  if (!v.ok()) return;
  const WeightViews w(a);
  for (int i = 0; i < 6; ++i)
    if (w.views[i].second->data != s->tensors[i]) {
      v.fail("packed_weights", std::string(" was made from other weights (") + w.views[i].first +
                                   ".data differs: a pack serves the very tensors it was made from)");
      return;
    }
}

}  // namespace

Status validate_fused_qkv_paged(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, MemorySpace* space,
                                Checks checks) {
  Validator v(kOp, checks);
  if (!known_format(v, d.weight_format)) return v.status();
  v.positive("q_dim", d.q_dim);

  // Activations and the ragged batch.
  v.tensor("hidden_state", a.hidden_state, {DType::bf16, DType::f32}, {kAnyDim, kAnyDim});
  if (!v.ok()) return v.status();
  const DType dt = a.hidden_state.dtype;
  const std::int64_t T = a.hidden_state.shape[0];
  const std::int64_t K = a.hidden_state.shape[1];
  if (K < 1) v.fail("hidden_state.shape[1]", eq(K) + " (K must be >= 1)");
  v.row_offsets("input_row_offsets", a.input_row_offsets, T);
  if (!v.ok()) return v.status();
  const std::int64_t B = a.input_row_offsets.shape[0] - 1;

  // The cache: same dtype as the activations, not quantized.
  CacheExpect ce{{dt}};
  ce.layer_idx = a.layer_idx;
  ce.written = true;  // the new tokens' K and V rows
  v.paged_cache("kv_cache", a.kv_cache, ce, B);
  if (!v.ok()) return v.status();
  const PagedKVCacheView& kc = a.kv_cache;
  const bool mla = kc.kv_dim() == 1;
  if (mla && kc.num_kv_heads() != 1)
    v.fail("kv_cache.blocks.shape[4]", eq(kc.num_kv_heads()) +
                                           " (an MLA cache, kv_dim=1, has exactly one latent head)");
  if (!v.ok()) return v.status();
  const std::int64_t kv_cols = kc.kv_dim() * kc.num_kv_heads() * kc.head_size();
  const std::int64_t N = d.q_dim + kv_cols;
  const std::string n_how =
      mla ? "q_dim + head_size = " + str(d.q_dim) + " + " + str(kc.head_size())
          : "q_dim + 2·num_kv_heads·head_size = " + str(d.q_dim) + " + 2·" + str(kc.num_kv_heads()) + "·" +
                str(kc.head_size());

  validate_weights(v, d, a, dt, K, N, n_how);
  validate_packed(v, d, a, dt, K, N);
  if (!v.ok()) return v.status();

  v.tensor("output", a.output, {dt}, {T, d.q_dim});
  // Everything the call reads; what it writes (the new cache rows, in place, and the output):
  // apart, and in one memory space.
  const Validator::NamedView reads[] = {{"hidden_state", &a.hidden_state},
                                        {"input_row_offsets", &a.input_row_offsets},
                                        {"weight", &a.weight},
                                        {"weight_scale", &a.weight_scale},
                                        {"qweight", &a.qweight},
                                        {"scales", &a.scales},
                                        {"qzeros", &a.qzeros},
                                        {"g_idx", &a.g_idx},
                                        {"kv_cache.lookup_table", &kc.lookup_table},
                                        {"kv_cache.cache_lengths", &kc.cache_lengths}};
  const Validator::NamedView writes[] = {{"kv_cache.blocks", &kc.blocks}, {"output", &a.output}};
  if (!v.same_memory(reads, writes, space) || !v.written_apart(writes, reads)) return v.status();

  // Pages for every new token, and no two new tokens on one cache row.
  if (!v.reads_metadata()) return v.status();
  struct Row {
    std::int64_t key, b, pos;
  };
  std::vector<Row> rows;
  rows.reserve(static_cast<std::size_t>(T));
  const std::int64_t ps = kc.page_size();
  const std::int64_t max_pages = kc.lookup_table.shape[1];
  const auto* lut = static_cast<const std::uint32_t*>(kc.lookup_table.data);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t len = std::int64_t(u32_at(a.input_row_offsets, b + 1)) - u32_at(a.input_row_offsets, b);
    const std::int64_t first = u32_at(kc.cache_lengths, b);
    if (!v.pages_exist("kv_cache", kc, b, first, first + len)) return v.status();
    for (std::int64_t pos = first; pos < first + len; ++pos)
      rows.push_back({std::int64_t(lut[b * max_pages + pos / ps]) * ps + pos % ps, b, pos});
  }
  std::sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) {
    return x.key != y.key ? x.key < y.key : (x.b != y.b ? x.b < y.b : x.pos < y.pos);
  });
  for (std::size_t i = 1; i < rows.size(); ++i) {
    if (rows[i].key != rows[i - 1].key) continue;
    const Row& p = rows[i - 1];
    const Row& q = rows[i];
    v.fail("kv_cache.lookup_table[" + str(q.b) + ", " + str(q.pos / ps) + "]",
           eq(lut[q.b * max_pages + q.pos / ps]) + " (position " + str(q.pos) + " of sequence " + str(q.b) +
               " and position " + str(p.pos) + " of sequence " + str(p.b) +
               " would write the same cache row: new tokens need distinct rows)");
    break;
  }
  return v.status();
}

namespace {

struct FusedTraits {
  using Desc = FusedQkvPagedDesc;
  using Args = FusedQkvPagedArgs;
  static constexpr const char* kOp = "fused_qkv_paged";
  static FieldList fields(Args& a) {
    return {{"hidden_state", &a.hidden_state, Role::data},
            {"input_row_offsets", &a.input_row_offsets, Role::metadata},
            {"weight", &a.weight, Role::data},
            {"weight_scale", &a.weight_scale, Role::data},
            {"qweight", &a.qweight, Role::data},
            {"scales", &a.scales, Role::data},
            {"qzeros", &a.qzeros, Role::data},
            {"g_idx", &a.g_idx, Role::content},
            {"kv_cache.blocks", &a.kv_cache.blocks, Role::written},
            {"kv_cache.lookup_table", &a.kv_cache.lookup_table, Role::metadata},
            {"kv_cache.cache_lengths", &a.kv_cache.cache_lengths, Role::metadata},
            {"output", &a.output, Role::written}};
  }
  static Status validate(const Desc& d, const Args& a, MemorySpace* space, Checks c) {
    return validate_fused_qkv_paged(d, a, space, c);
  }
  static Status cuda(const Desc& d, const Args& a, const Args& h, const DeviceLaunch& l) {
    return launch_device(kOp, &DeviceKernels::fused_qkv_paged, d, a, h, l);
  }
  static Status cpu(const Desc& d, const Args& a) { return cpu::fused_qkv_paged(d, a); }
  static void reference(const Desc& d, const Args& a) { reference::fused_qkv_paged(d, a); }
  static Status same_step(const Args& planned, const Args& a) {
    const Status s = same_size(kOp, "hidden_state.shape[0]", a.hidden_state.shape[0], planned.hidden_state.shape[0]);
    return s.ok() ? same_cache(kOp, "kv_cache", a.kv_cache, planned.kv_cache) : s;
  }
  static cpu::CallBufferSizes cpu_buffers(const Desc& d, const Args& a) { return cpu::fused_qkv_paged_call_buffers(d, a); }
};

}  // namespace

}  // namespace core

Status fused_qkv_paged(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, const RunOptions& o) {
  return core::one_shot_call<core::FusedTraits>(d, a, o);
}

std::size_t FusedQkvPackedWeights::bytes() const { return state_ ? state_->bytes : 0; }

const std::string& FusedQkvPackedWeights::layout() const {
  static const std::string kNone;
  return state_ ? state_->layout : kNone;
}

namespace core {
namespace {

// pack_weights' input: the desc's weight tensors in host memory, hidden_state's dtype and K.
Status validate_pack_input(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, FusedQkvPackedWeights* out) {
  Validator v(kPackOp, Checks{});
  if (out == nullptr) return Status::error(StatusCode::invalid_argument, kPackOp, "out", std::string(kPackOp) + ": out is null");
  if (!known_format(v, d.weight_format)) return v.status();
  if (a.hidden_state.dtype != DType::bf16 && a.hidden_state.dtype != DType::f32)
    v.fail("hidden_state.dtype", std::string("=").append(dtype_name(a.hidden_state.dtype)) + " (expected bf16 or f32)");
  else if (a.hidden_state.rank != 2)
    v.fail("hidden_state.rank", eq(a.hidden_state.rank) + " (expected 2: [T, K]; only its dtype and K are read)");
  else if (a.hidden_state.shape[1] < 1)
    v.fail("hidden_state.shape[1]", eq(a.hidden_state.shape[1]) + " (K must be >= 1)");
  if (!v.ok()) return v.status();
  const std::int64_t K = a.hidden_state.shape[1];
  const bool gptq = d.weight_format == WeightFormat::gptq;
  const std::int64_t N = stored_columns(d, a);
  validate_weights(v, d, a, a.hidden_state.dtype, K, N, std::string(gptq ? "qweight.shape[1]" : "weight.shape[0]"));
  if (v.ok() && N < 1) v.fail(gptq ? "qweight.shape[1]" : "weight.shape[0]", eq(N) + " (expected N >= 1)");
  const WeightViews w(a);
  MemorySpace space = MemorySpace::host;
  if (v.same_memory(w.views, {}, &space) && space != MemorySpace::host)
    v.fail(gptq ? "qweight" : "weight", " is in device memory (packed weights are for the cpu back-end: host tensors)");
  return v.status();
}

}  // namespace
}  // namespace core

Status pack_weights(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, FusedQkvPackedWeights* out,
                    const FusedQkvPackOptions& options) {
  if (Status s = core::validate_pack_input(d, a, out); !s.ok()) return s;
  try {
    auto state = std::make_shared<detail::FusedQkvPackedState>();
    state->desc = d;
    state->activations = a.hidden_state.dtype;
    state->K = a.hidden_state.shape[1];
    state->N = core::stored_columns(d, a);
    const core::WeightViews w(a);
    for (int i = 0; i < 6; ++i) state->tensors[i] = w.views[i].second->data;
    state->scales_dtype = a.scales.dtype;
    if (Status s = cpu::pack_fused_qkv_weights(d, a, options.prefill_layout, state.get()); !s.ok()) return s;
    detail::FusedQkvPackedAccess::set(out, std::move(state));
  } catch (const std::bad_alloc&) {
    return Status::error(StatusCode::internal, core::kPackOp, "out",
                         std::string(core::kPackOp) + ": out: allocating the pack failed");
  }
  return Status::success();
}

Status plan(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& step, const PlanOptions& o, FusedQkvPagedPlan* out) {
  return core::plan_call<core::FusedTraits>(d, step, o, false, out);
}

Status run(const FusedQkvPagedPlan& p, const FusedQkvPagedArgs& a, const RunContext& c) {
  return core::run_call<core::FusedTraits>(p, a, c);
}

}  // namespace mlakit
