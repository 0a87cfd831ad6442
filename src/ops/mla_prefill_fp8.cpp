// mla_prefill_fp8: validation (shared by every back-end) and the public entry point.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/common/device_kernels.hpp"
#include "core/common/validate.hpp"
#include "ops/common/plan_run.hpp"
#include "ops/validators.hpp"
#include "cpu/mla_prefill_fp8.hpp"
#include "mlakit/ops/mla_prefill_fp8.hpp"
#include "reference/mla_prefill_fp8.hpp"

namespace mlakit::core {
namespace {

constexpr const char* kOp = "mla_prefill_fp8";
constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;  // keeps every shape product far from overflow

std::string str(std::int64_t x) { return std::to_string(x); }

bool check_dims(Validator& v, const MlaPrefillFp8Desc& d) {
  const std::pair<const char*, std::int64_t> dims[] = {{"num_heads", d.num_heads}, {"nope", d.nope}, {"rope", d.rope},
                                                        {"v", d.v},         {"latent", d.latent}, {"bn", d.bn},
                                                        {"bk", d.bk}};
  for (const auto& [name, value] : dims)
    if (!v.positive(name, value) || !v.at_most(name, value, "2^24", kMaxDim)) return false;
  if (d.rope % 2 != 0) return v.fail("rope", "=" + str(d.rope) + " (must be even: RoPE rotates interleaved pairs)");
  if (d.numerics != MlaNumerics::max && d.numerics != MlaNumerics::deepseek && d.numerics != MlaNumerics::deepseek_ue8m0)
    return v.fail("numerics", "=" + str(static_cast<int>(d.numerics)) + " (expected max, deepseek or deepseek_ue8m0)");
  if (!std::isfinite(d.scale)) return v.fail("scale", "=" + std::to_string(d.scale) + " (must be finite)");
  if (!std::isfinite(d.epsilon) || !(d.epsilon > 0))
    return v.fail("epsilon", "=" + std::to_string(d.epsilon) +
                                 " (must be finite and > 0: a zero epsilon turns an all-zero latent row into 0·inf = NaN)");
  return true;
}

// Every position the call reads or writes has a page; the new tokens have RoPE frequencies.
bool check_positions(Validator& v, const MlaPrefillFp8Args& a, std::int64_t B) {
  const auto& cache = a.kv_cache;
  const std::int64_t max_pos = a.freqs_cis.shape[0];
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t seq_len = std::int64_t{u32_at(a.input_row_offsets, b + 1)} - u32_at(a.input_row_offsets, b);
    const std::int64_t cache_len = u32_at(cache.cache_lengths, b);
    if (seq_len > 0 && cache_len + seq_len > max_pos)
      return v.fail("freqs_cis.shape[0]", "=" + str(max_pos) + " (sequence " + str(b) + " has new tokens at positions " +
                                              str(cache_len) + ".." + str(cache_len + seq_len - 1) +
                                              ": freqs_cis needs a row for each)");
    if (!v.pages_exist("kv_cache", cache, b, cache_len, cache_len + seq_len)) return false;
    const std::int64_t window =
        std::int64_t{u32_at(a.buffer_row_offsets, b + 1)} - u32_at(a.buffer_row_offsets, b);
    const std::int64_t offset = u32_at(a.cache_offsets, b);
    if (!v.pages_exist("kv_cache", cache, b, offset, offset + window)) return false;
  }
  return true;
}

// The new tokens' rows are written in place: two of them must not share a physical cache row
// (a page shared between sequences, or listed twice in one lookup-table row).
bool check_distinct_writes(Validator& v, const MlaPrefillFp8Args& a, std::int64_t B) {
  const auto& cache = a.kv_cache;
  const std::int64_t ps = cache.page_size(), cols = cache.lookup_table.shape[1];
  struct Write {
    std::int64_t row, b, pos;
  };
  std::vector<Write> writes;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t cache_len = u32_at(cache.cache_lengths, b);
    const std::int64_t seq_len = std::int64_t{u32_at(a.input_row_offsets, b + 1)} - u32_at(a.input_row_offsets, b);
    for (std::int64_t p = cache_len; p < cache_len + seq_len; ++p)
      writes.push_back({std::int64_t{u32_at(cache.lookup_table, b * cols + p / ps)} * ps + p % ps, b, p});
  }
  std::stable_sort(writes.begin(), writes.end(), [](const Write& x, const Write& y) { return x.row < y.row; });
  for (std::size_t i = 1; i < writes.size(); ++i) {
    if (writes[i].row != writes[i - 1].row) continue;
    const Write& w = writes[i];
    const Write& first = writes[i - 1];
    return v.fail("kv_cache.lookup_table[" + str(w.b) + ", " + str(w.pos / ps) + "]",
                  "=" + str(w.row / ps) + " (position " + str(w.pos) + " of sequence " + str(w.b) +
                      " would write the same cache row (block " + str(w.row / ps) + ", offset " + str(w.row % ps) +
                      ") as position " + str(first.pos) + " of sequence " + str(first.b) +
                      "; new tokens need distinct rows)");
  }
  return true;
}

}  // namespace

Status validate_mla_prefill_fp8(const MlaPrefillFp8Desc& d, const MlaPrefillFp8Args& a, MemorySpace* space,
                                Checks checks) {
  Validator v(kOp, checks);
  if (!check_dims(v, d)) return v.status();
  // Everything the call reads; what it writes (the new cache rows and q's rope part, in place,
  // and the output): in one memory space (checked first) and apart (checked last).
  const Validator::NamedView reads[] = {{"input_row_offsets", &a.input_row_offsets},
                                        {"freqs_cis", &a.freqs_cis},
                                        {"kv_norm_gamma", &a.kv_norm_gamma},
                                        {"kv_cache.lookup_table", &a.kv_cache.lookup_table},
                                        {"kv_cache.cache_lengths", &a.kv_cache.cache_lengths},
                                        {"buffer_row_offsets", &a.buffer_row_offsets},
                                        {"cache_offsets", &a.cache_offsets},
                                        {"kv_b_proj", &a.kv_b_proj},
                                        {"kv_b_proj_scale", &a.kv_b_proj_scale},
                                        {"topk_indices", &a.topk_indices}};
  const Validator::NamedView writes[] = {{"kv_cache.blocks", &a.kv_cache.blocks}, {"q", &a.q}, {"output", &a.output}};
  if (!v.same_memory(writes, reads, space)) return v.status();

  const std::int64_t H = d.num_heads, kv_rows = d.num_heads * (d.nope + d.v);
  if (!v.tensor("q", a.q, {DType::bf16}, {kAnyDim, H, d.nope + d.rope})) return v.status();
  const std::int64_t T = a.q.shape[0];
  if (!v.row_offsets("input_row_offsets", a.input_row_offsets, T)) return v.status();
  const std::int64_t B = a.input_row_offsets.shape[0] - 1;
  if (!v.tensor("freqs_cis", a.freqs_cis, {DType::bf16, DType::f32}, {kAnyDim, d.rope})) return v.status();
  // DeepSeek's checkpoints keep the norm weight in bf16 or f32; the spec's own profile has bf16.
  if (d.numerics == MlaNumerics::max) {
    if (!v.tensor("kv_norm_gamma", a.kv_norm_gamma, {DType::bf16}, {d.latent})) return v.status();
  } else if (!v.tensor("kv_norm_gamma", a.kv_norm_gamma, {DType::bf16, DType::f32}, {d.latent})) {
    return v.status();
  }
  CacheExpect expect{{DType::bf16}};
  expect.kv_dim = 1;
  expect.num_kv_heads = 1;
  expect.head_size = d.latent + d.rope;
  expect.scales = false;
  expect.layer_idx = a.layer_idx;
  expect.written = true;  // the new tokens' rows
  if (!v.paged_cache("kv_cache", a.kv_cache, expect, B)) return v.status();

  if (!v.tensor("buffer_row_offsets", a.buffer_row_offsets, {DType::u32}, {B + 1})) return v.status();
  if (!v.non_negative("buffer_length", a.buffer_length)) return v.status();
  if (v.reads_metadata() && a.buffer_row_offsets.memory == MemorySpace::host &&
      std::int64_t{u32_at(a.buffer_row_offsets, B)} != a.buffer_length) {
    v.fail("buffer_length", "=" + str(a.buffer_length) + " (must equal buffer_row_offsets[" + str(B) +
                                "]=" + str(u32_at(a.buffer_row_offsets, B)) + ")");
    return v.status();
  }
  if (!v.row_offsets("buffer_row_offsets", a.buffer_row_offsets, a.buffer_length)) return v.status();
  if (!v.tensor("cache_offsets", a.cache_offsets, {DType::u32}, {kAnyDim})) return v.status();
  if (a.cache_offsets.shape[0] != B && a.cache_offsets.shape[0] != B + 1) {
    v.fail("cache_offsets.shape", "=" + shape_string(a.cache_offsets) + " (expected [" + str(B) + "] or [" +
                                      str(B + 1) + "])");
    return v.status();
  }
  if (v.reads_metadata() && a.cache_offsets.memory != MemorySpace::host) {
    v.fail("cache_offsets", " is in device memory (offsets must be readable on the host here)");
    return v.status();
  }
  if (!v.tensor("kv_b_proj", a.kv_b_proj, {DType::f8e4m3}, {kv_rows, d.latent})) return v.status();
  if (!v.tensor("kv_b_proj_scale", a.kv_b_proj_scale, {DType::f32},
                {(kv_rows + d.bn - 1) / d.bn, (d.latent + d.bk - 1) / d.bk}))
    return v.status();
  if (!v.optional_tensor("topk_indices", a.topk_indices, {DType::i32}, {T, kAnyDim})) return v.status();
  if (!v.tensor("output", a.output, {DType::bf16}, {T, H, d.v})) return v.status();

  if (v.reads_metadata() && !check_positions(v, a, B)) return v.status();
  if (v.reads_metadata() && !check_distinct_writes(v, a, B)) return v.status();
  v.written_apart(writes, reads);
  return v.status();
}

namespace {

struct MlaTraits {
  using Desc = MlaPrefillFp8Desc;
  using Args = MlaPrefillFp8Args;
  static constexpr const char* kOp = "mla_prefill_fp8";
  static FieldList fields(Args& a) {
    return {{"q", &a.q, Role::written},
            {"input_row_offsets", &a.input_row_offsets, Role::metadata},
            {"freqs_cis", &a.freqs_cis, Role::data},
            {"kv_norm_gamma", &a.kv_norm_gamma, Role::data},
            {"kv_cache.blocks", &a.kv_cache.blocks, Role::written},
            {"kv_cache.lookup_table", &a.kv_cache.lookup_table, Role::metadata},
            {"kv_cache.cache_lengths", &a.kv_cache.cache_lengths, Role::metadata},
            {"buffer_row_offsets", &a.buffer_row_offsets, Role::metadata},
            {"cache_offsets", &a.cache_offsets, Role::metadata},
            {"kv_b_proj", &a.kv_b_proj, Role::data},
            {"kv_b_proj_scale", &a.kv_b_proj_scale, Role::data},
            {"topk_indices", &a.topk_indices, Role::data},
            {"output", &a.output, Role::written}};
  }
  static Status validate(const Desc& d, const Args& a, MemorySpace* space, Checks c) {
    return validate_mla_prefill_fp8(d, a, space, c);
  }
  static Status cuda(const Desc& d, const Args& a, const Args& h, const DeviceLaunch& l) {
    return launch_device(kOp, &DeviceKernels::mla_prefill_fp8, d, a, h, l);
  }
  static Status cpu(const Desc& d, const Args& a) { return cpu::mla_prefill_fp8(d, a); }
  static void reference(const Desc& d, const Args& a) { reference::mla_prefill_fp8(d, a); }
  static Status same_step(const Args& planned, const Args& a) {
    Status s = same_size(kOp, "q.shape[0]", a.q.shape[0], planned.q.shape[0]);
    if (s.ok()) s = same_size(kOp, "buffer_length", a.buffer_length, planned.buffer_length);
    if (s.ok()) s = same_cache(kOp, "kv_cache", a.kv_cache, planned.kv_cache);
    // The plan checked that freqs_cis has a row for every new token's position.
    if (s.ok() && a.freqs_cis.rank >= 1 && a.freqs_cis.shape[0] < planned.freqs_cis.shape[0])
      s = same_size(kOp, "freqs_cis.shape[0]", a.freqs_cis.shape[0], planned.freqs_cis.shape[0]);
    return s;
  }
  static cpu::CallBufferSizes cpu_buffers([[maybe_unused]] const Desc& d, [[maybe_unused]] const Args& a) {
    return cpu::mla_prefill_fp8_call_buffers(d, a);
  }
};

}  // namespace

}  // namespace mlakit::core

namespace mlakit {

Status mla_prefill_fp8(const MlaPrefillFp8Desc& d, const MlaPrefillFp8Args& a, const RunOptions& o) {
  return core::one_shot_call<core::MlaTraits>(d, a, o);
}

Status plan(const MlaPrefillFp8Desc& d, const MlaPrefillFp8Args& step, const PlanOptions& o, MlaPrefillFp8Plan* out) {
  return core::plan_call<core::MlaTraits>(d, step, o, false, out);
}

Status run(const MlaPrefillFp8Plan& p, const MlaPrefillFp8Args& a, const RunContext& c) {
  return core::run_call<core::MlaTraits>(p, a, c);
}

}  // namespace mlakit
