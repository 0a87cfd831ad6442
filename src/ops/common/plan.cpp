// What every plan shares: choosing the back-end, naming the implementation, the caller's arena,
// the workspace and batch checks of a run, and the device error flag.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

#include "core/common/dispatch.hpp"
#include "ops/common/plan_run.hpp"

namespace mlakit {

Backend PlanInfo::backend() const { return state_ ? state_->backend : Backend::automatic; }

const std::string& PlanInfo::implementation() const {
  static const std::string kNone = "(no plan)";
  return state_ ? state_->implementation : kNone;
}

const std::string& PlanInfo::decisions() const {
  static const std::string kNone;
  return state_ ? state_->decisions : kNone;
}

std::size_t PlanInfo::workspace_bytes() const { return state_ ? state_->buffers.total() : 0; }

}  // namespace mlakit

namespace mlakit::core {
namespace {

std::mutex g_flag_mu;
std::uint32_t* g_flag = nullptr;  // allocated once, kept for the process (one word)

std::string view_text(const TensorView& v) {
  std::ostringstream s;
  s << dtype_name(v.dtype) << ' ' << shape_string(v) << " at " << v.data << " in "
    << (v.memory == MemorySpace::device ? "device" : "host") << " memory";
  return s.str();
}

bool same_layout(const TensorView& a, const TensorView& b) {
  if (a.dtype != b.dtype || a.rank != b.rank) return false;
  for (int i = 0; i < a.rank && i < kMaxRank; ++i)
    if (a.shape[i] != b.shape[i] || (a.shape[i] != 1 && a.strides[i] != b.strides[i])) return false;
  return true;
}

bool verbose() {
  static const bool on = [] {
    const char* e = std::getenv("MLAKIT_VERBOSE");
    return e != nullptr && *e != '\0' && std::string(e) != "0";
  }();
  return on;
}

// Prints each distinct (operator, implementation, decisions) once per process.
void print_plan(const detail::PlanState& st) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::string line = std::string(st.op) + ": " + st.implementation + " [" + st.decisions + "]";
  std::lock_guard<std::mutex> lock(mu);
  if (!seen.insert(line).second) return;
  std::fprintf(stderr, "mlakit: plan %s\n", line.c_str());
}

}  // namespace

bool& checks_only_flag() {
  thread_local bool on = false;
  return on;
}

Status choose_backend(const char* op, const std::vector<Backend>& candidates, MemorySpace space, Backend* out,
                      std::string* decisions) {
  std::vector<Backend> list = candidates;
  if (list.empty() || (list.size() == 1 && list[0] == Backend::automatic)) list = {Backend::cuda, Backend::cpu};
  Status first;
  decisions->clear();
  for (Backend c : list) {
    if (!decisions->empty()) decisions->append("; ");
    RunOptions o;
    o.backend = c;
    Route r;
    const Status s = route(op, o, space, &r);
    if (s.ok()) {
      decisions->append(std::string(backend_name(r.backend)) + ": chosen");
      *out = r.backend;
      return Status::success();
    }
    // "<op>: backend=cpu but ..." -> "cpu: declined (backend=cpu but ...)"
    std::string why = s.message;
    const std::string prefix = std::string(op) + ": ";
    if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
    decisions->append(std::string(backend_name(c)) + ": declined (" + why + ")");
    if (first.ok()) first = s;
  }
  return first;
}

Status finish_plan(detail::PlanState* st, const PlanOptions& o, bool one_shot) {
  switch (st->backend) {
    case Backend::cpu: {
      if (o.arena != nullptr) {
        st->arena = o.arena;
      } else if (o.num_threads > 0) {
        st->own_arena = std::make_shared<tbb::task_arena>(o.num_threads);
        st->arena = st->own_arena.get();
      }
      // A one-shot call's plan is never shown: its name is built only to be printed.
      if (one_shot && !verbose()) break;
      const int threads = st->arena != nullptr ? st->arena->max_concurrency() : cpu_threads();
      st->implementation = std::string("cpu ") + isa_name(active_isa()) + ", " + std::to_string(threads) +
                           (threads == 1 ? " thread" : " threads") +
                           (o.arena != nullptr ? " (caller's arena)" : o.num_threads > 0 ? " (plan's arena)" : "");
      break;
    }
    case Backend::cuda: {
      st->implementation = "cuda";
      // A one-shot call checked the content on its host mirrors: its kernels need no flag, and it
      // waits on the stream only for those copies. A plan reports what earlier device runs raised.
      if (one_shot) break;
      Status s = device_error_flag(&st->error_flag);
      if (!s.ok()) return s;
      s = check_device_errors(o.cuda_stream);
      if (!s.ok()) return s;
      break;
    }
    default: st->implementation = "reference (scalar oracle)"; break;
  }
  if (verbose()) print_plan(*st);
  return Status::success();
}

Status device_error_flag(std::uint32_t** out) {
  std::lock_guard<std::mutex> lock(g_flag_mu);
  if (g_flag == nullptr) {
    const DeviceMemoryOps* ops = device_memory_ops();
    if (ops == nullptr || ops->allocate == nullptr || ops->copy_to_device == nullptr || ops->synchronize == nullptr) {
      *out = nullptr;
      return Status::success();
    }
    void* p = nullptr;
    std::string error;
    const std::uint32_t zero = 0;
    if (!ops->allocate(&p, sizeof(std::uint32_t), &error) ||
        !ops->copy_to_device(p, &zero, sizeof(zero), nullptr, &error) || !ops->synchronize(nullptr, &error))
      return Status::error(StatusCode::internal, "plan", "device_error_flag",
                           "plan: the device error flag could not be set up (" + error + ")");
    g_flag = static_cast<std::uint32_t*>(p);
  }
  *out = g_flag;
  return Status::success();
}

void release_device_error_flag() {
  std::lock_guard<std::mutex> lock(g_flag_mu);
  const DeviceMemoryOps* ops = device_memory_ops();
  if (g_flag != nullptr && ops != nullptr && ops->release != nullptr) {
    std::string error;
    ops->release(g_flag, &error);
  }
  g_flag = nullptr;
}

Status same_batch(const detail::PlanState& st, const Field& f, const detail::MetadataSlot& seen, const RunContext& ctx) {
  const TensorView& v = *f.view;
  const bool by_id = st.step_id != 0;
  if (by_id && ctx.step_id != st.step_id)
    return Status::error(StatusCode::invalid_argument, st.op, "context.step_id",
                         std::string(st.op) + ": context.step_id=" + std::to_string(ctx.step_id) +
                             " (the plan was made for step_id=" + std::to_string(st.step_id) + ": plan the new step)");
  const bool same = same_layout(v, seen.seen) && (v.data == nullptr) == (seen.seen.data == nullptr) &&
                    (by_id || (v.data == seen.seen.data && v.memory == seen.seen.memory));
  if (same) return Status::success();
  return Status::error(StatusCode::invalid_argument, st.op, f.name,
                       std::string(st.op) + ": " + f.name + " is " + view_text(v) +
                           " (the plan was made for " + view_text(seen.seen) +
                           (by_id ? "" : "; a run takes the very metadata its plan checked: plan the new batch, or plan with a step_id") +
                           ")");
}

Status same_size(const char* op, const char* field, std::int64_t got, std::int64_t planned) {
  if (got == planned) return Status::success();
  return Status::error(StatusCode::invalid_argument, op, field,
                       std::string(op) + ": " + field + "=" + std::to_string(got) + " (the plan was made for " +
                           std::to_string(planned) + ": plan the new batch)");
}

Status same_cache(const char* op, const char* field, const PagedKVCacheView& got, const PagedKVCacheView& planned) {
  const std::string f(field);
  Status s = same_size(op, (f + ".blocks.shape[0]").c_str(), got.blocks.shape[0], planned.blocks.shape[0]);
  if (s.ok()) s = same_size(op, (f + ".blocks.shape[3]").c_str(), got.blocks.shape[3], planned.blocks.shape[3]);
  return s;
}

Status keep_device_workspace(detail::PlanState* st, std::size_t bytes) {
  if (bytes == 0) return Status::success();
  const DeviceMemoryOps* ops = device_memory_ops();
  if (ops == nullptr || ops->allocate == nullptr) return Status::success();  // runs allocate their own
  void* ptr = nullptr;
  std::string error;
  if (!ops->allocate(&ptr, bytes, &error))
    return Status::error(StatusCode::internal, st->op, "workspace",
                         std::string(st->op) + ": allocating the plan's device workspace (" + std::to_string(bytes) +
                             " bytes): " + error);
  st->device_workspace = std::shared_ptr<void>(ptr, [ops](void* p) {
    std::string ignored;
    ops->release(p, &ignored);
  });
  st->device_workspace_bytes = bytes;
  return Status::success();
}

Status check_workspace(const detail::PlanState& st, const RunContext& ctx) {
  if (ctx.workspace == nullptr) return Status::success();
  const std::size_t need = st.buffers.total();
  if (ctx.workspace_bytes < need)
    return Status::error(StatusCode::invalid_argument, st.op, "context.workspace_bytes",
                         std::string(st.op) + ": context.workspace_bytes=" + std::to_string(ctx.workspace_bytes) +
                             " (the plan needs " + std::to_string(need) + ": plan.workspace_bytes())");
  if (reinterpret_cast<std::uintptr_t>(ctx.workspace) % 64 != 0)
    return Status::error(StatusCode::invalid_argument, st.op, "context.workspace",
                         std::string(st.op) + ": context.workspace is not 64-byte aligned");
  return Status::success();
}

}  // namespace mlakit::core

namespace mlakit {

Status check_device_errors(void* cuda_stream) {
  std::uint32_t* flag = nullptr;
  {
    std::lock_guard<std::mutex> lock(core::g_flag_mu);
    flag = core::g_flag;
  }
  const core::DeviceMemoryOps* ops = core::device_memory_ops();
  if (flag == nullptr || ops == nullptr) return Status::success();
  std::uint32_t bits = 0;
  std::string error;
  if (!ops->copy_to_host(&bits, flag, sizeof(bits), cuda_stream, &error) || !ops->synchronize(cuda_stream, &error))
    return Status::error(StatusCode::internal, "check_device_errors", "device_error_flag",
                         "check_device_errors: reading the device error flag failed (" + error + ")");
  if (bits == 0) return Status::success();
  const std::uint32_t zero = 0;
  if (!ops->copy_to_device(flag, &zero, sizeof(zero), cuda_stream, &error) || !ops->synchronize(cuda_stream, &error))
    return Status::error(StatusCode::internal, "check_device_errors", "device_error_flag",
                         "check_device_errors: clearing the device error flag failed (" + error + ")");
  struct Bit {
    std::uint32_t bit;
    const char *op, *field, *what;
  };
  static const Bit kBits[] = {
      {core::kDeviceErrorTopkLengths, "sparse_mla_prefill", "topk_lengths",
       "a value above indices_stride (the kernel read indices_stride slots)"},
      {core::kDeviceErrorGIdx, "fused_qkv_paged", "g_idx",
       "a group outside [0, K/group_size) (the kernel clamped it)"},
      {core::kDeviceErrorRemapIndex, "remap_indices_to_rows", "indices",
       "an index below -1, past the lookup table or on a page that is not there (written as -1)"},
  };
  std::string text;
  const Bit* first = nullptr;
  for (const Bit& b : kBits) {
    if ((bits & b.bit) == 0) continue;
    if (first == nullptr) first = &b;
    if (!text.empty()) text += "; ";
    text += std::string(b.op) + ": " + b.field + " held " + b.what;
  }
  if (first == nullptr)
    return Status::error(StatusCode::internal, "check_device_errors", "device_error_flag",
                         "check_device_errors: unknown device error bits " + std::to_string(bits));
  return Status::error(StatusCode::invalid_argument, first->op, first->field,
                       "device runs since the last check: " + text);
}

}  // namespace mlakit
