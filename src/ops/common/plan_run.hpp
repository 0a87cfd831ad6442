// plan() and run() of every operator, written once (mlakit/plan.hpp says what they promise).
//
// An operator describes itself by a traits struct:
//   using Desc = ...; using Args = ...;
//   static constexpr const char* kOp;
//   static FieldList fields(Args& a);            // every tensor of a call, with its role
//   static Status validate(const Desc&, const Args&, MemorySpace*, Checks);
//   static Status cuda(const Desc&, const Args& a, const Args& host, const DeviceLaunch&);
//   static Status cpu(const Desc&, const Args&);
//   static void reference(const Desc&, const Args&);
//   static cpu::CallBufferSizes cpu_buffers(const Desc&, const Args&);  // a validated host call
//   static Status same_step(const Args& planned, const Args& a);  // the sizes the plan's checks
//                                                                   // of the metadata relied on
// and its entry points call plan_call / run_call / one_shot_call below.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/common/device_kernels.hpp"
#include "core/common/device_launch.hpp"
#include "core/common/device_mirror.hpp"
#include "core/common/validate.hpp"
#include "cpu/common/parallel.hpp"
#include "mlakit/plan.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit::detail {

struct MetadataSlot {
  const char* field = "";
  TensorView seen;                        // the view plan() was handed
  std::unique_ptr<std::uint8_t[]> copy;   // device plans: the host copy launches size themselves by
  TensorView host;                        // a view of the copy
};

struct PlanState {
  const char* op = "";
  Backend backend = Backend::reference;
  MemorySpace space = MemorySpace::host;
  std::string implementation, decisions;
  std::uint64_t step_id = 0;
  std::vector<MetadataSlot> metadata;
  cpu::CallBufferSizes buffers;            // cpu plans: the call buffers, laid out in the workspace
  tbb::task_arena* arena = nullptr;        // cpu plans: the arena runs execute in (null: the library's)
  std::shared_ptr<tbb::task_arena> own_arena;
  std::uint32_t* error_flag = nullptr;     // device plans: the device error flag
  // Device plans: the runs' temporaries, allocated once at plan time and freed with the plan. Only
  // runs on the plan's stream use it: their kernels follow one another in stream order, so a run's
  // temporaries are never in use by another (a run on another stream allocates its own).
  std::shared_ptr<void> device_workspace;
  std::size_t device_workspace_bytes = 0;
  void* device_stream = nullptr;
};

struct PlanAccess {
  static const PlanState* state(const PlanInfo& p) { return p.state_.get(); }
  static void set_state(PlanInfo& p, std::shared_ptr<const PlanState> s) { p.state_ = std::move(s); }
  template <class D, class A>
  static D& desc(Plan<D, A>& p) { return p.desc_; }
  template <class D, class A>
  static const D& desc(const Plan<D, A>& p) { return p.desc_; }
  template <class D, class A>
  static A& host(Plan<D, A>& p) { return p.host_; }
  template <class D, class A>
  static const A& host(const Plan<D, A>& p) { return p.host_; }
};

}  // namespace mlakit::detail

namespace mlakit::core {

enum class Role {
  metadata,  // batch metadata: its content checked by plan() once per step
  content,   // data a kernel indexes with: checked on the host in host calls, by the kernel on device
  data,      // read only by the kernels
  written,   // an output or in-place buffer
};

struct Field {
  const char* name;
  TensorView* view;
  Role role;
};

// The fields of one call, in a fixed order (no allocation in run()).
struct FieldList {
  static constexpr int kMax = 16;
  Field at[kMax];
  int size = 0;
  FieldList(std::initializer_list<Field> f) {
    for (const Field& x : f)
      if (size < kMax) at[size++] = x;
  }
};

// The back-end of a call whose tensors live in `space`: the first of `candidates` that accepts
// (empty: cuda, then cpu); *decisions gets one line per candidate tried.
Status choose_backend(const char* op, const std::vector<Backend>& candidates, MemorySpace space, Backend* out,
                      std::string* decisions);
// The rest of a plan once its back-end is chosen: implementation name, arena, device error flag,
// the printout under MLAKIT_VERBOSE, and (device plans, not one-shot) the flag's previous errors.
Status finish_plan(detail::PlanState* st, const PlanOptions& options, bool one_shot);
// The device error flag, allocated (and zeroed) on first use; null when no device back-end is linked.
Status device_error_flag(std::uint32_t** out);
// Frees it (tests that count device allocations; no plan may run afterwards).
void release_device_error_flag();
// Device plans (not one-shot): asks the back-end how much temporary device memory a run needs and
// keeps that much with the plan, so that runs allocate nothing.
Status keep_device_workspace(detail::PlanState* st, std::size_t bytes);
// A run's check that its metadata views are the plan's (pointer identity, or the step id).
Status same_batch(const detail::PlanState& st, const Field& f, const detail::MetadataSlot& seen,
                  const RunContext& ctx);
// `field`=`got` where the plan saw `planned` (a size its checks of the metadata relied on).
Status same_size(const char* op, const char* field, std::int64_t got, std::int64_t planned);
// The cache's num_blocks and page_size, which the plan's page-table checks relied on.
Status same_cache(const char* op, const char* field, const PagedKVCacheView& got, const PagedKVCacheView& planned);
// A run's check of the caller's workspace against the plan.
Status check_workspace(const detail::PlanState& st, const RunContext& ctx);

// Benchmarks only: while a ChecksOnly scope lives on the calling thread, run() (and so a one-shot
// call) returns after its checks, computing nothing; what is left is the per-call overhead.
bool& checks_only_flag();
class ChecksOnly {
 public:
  ChecksOnly() { checks_only_flag() = true; }
  ~ChecksOnly() { checks_only_flag() = false; }
  ChecksOnly(const ChecksOnly&) = delete;
  ChecksOnly& operator=(const ChecksOnly&) = delete;
};

template <class T>
Status plan_call(const typename T::Desc& d, const typename T::Args& step, const PlanOptions& o, bool one_shot,
                 Plan<typename T::Desc, typename T::Args>* out) {
  using Args = typename T::Args;
  Args orig = step, h = step;
  const FieldList fo = T::fields(orig), fh = T::fields(h);

  // A device call is one whose data is in device memory; a plan's metadata may be the caller's host
  // copies (not a one-shot call's: its kernels read the very views it is handed).
  bool data_on_device = false;
  for (int i = 0; i < fh.size; ++i) {
    const Field& f = fh.at[i];
    if (f.role != Role::metadata && f.view->data != nullptr && f.view->memory == MemorySpace::device)
      data_on_device = true;
  }
  MirrorEntry entries[FieldList::kMax];
  for (int i = 0; i < fh.size; ++i) {
    const Field& f = fh.at[i];
    MirrorUse use = MirrorUse::device;
    switch (f.role) {
      case Role::metadata:
        use = !one_shot && data_on_device && f.view->memory == MemorySpace::host ? MirrorUse::host_copy
                                                                                 : MirrorUse::host_read;
        break;
      case Role::content: use = one_shot ? MirrorUse::host_read : MirrorUse::device; break;
      case Role::data: use = MirrorUse::device; break;
      case Role::written: use = MirrorUse::written; break;
    }
    entries[i] = MirrorEntry{f.name, f.view, use};
  }
  RunOptions ro;
  ro.backend = o.backends.size() == 1 ? o.backends[0] : Backend::automatic;
  ro.cuda_stream = o.cuda_stream;
  DeviceMirror mirror(T::kOp, ro);
  Status s = mirror.prepare(entries, static_cast<std::size_t>(fh.size));
  if (!s.ok()) return s;
  MemorySpace space = MemorySpace::host;
  Checks checks;
  checks.content = one_shot;
  s = T::validate(d, h, &space, checks);
  if (!s.ok()) return s;
  s = mirror.finish(&space);
  if (!s.ok()) return s;

  auto st = std::make_shared<detail::PlanState>();
  st->op = T::kOp;
  st->space = space;
  st->step_id = o.step_id;
  s = choose_backend(T::kOp, o.backends, space, &st->backend, &st->decisions);
  if (!s.ok()) return s;
  if (st->backend == Backend::cuda) {
    s = mirror.require_device();
    if (!s.ok()) return s;
  }
  Args host = step;
  FieldList fp = T::fields(host);
  for (int i = 0; i < fo.size; ++i) {
    if (fo.at[i].role != Role::metadata) continue;
    detail::MetadataSlot m;
    m.field = fo.at[i].name;
    m.seen = *fo.at[i].view;
    if (st->backend == Backend::cuda && fh.at[i].view->data != nullptr) {
      // Launches size themselves by the metadata: the plan keeps a host copy (h's view is host memory
      // now: the caller's copy or the mirror), so that a run reads nothing back from the device.
      const TensorView& v = *fh.at[i].view;
      const std::size_t bytes = static_cast<std::size_t>(v.size_bytes());
      m.copy = std::make_unique<std::uint8_t[]>(bytes > 0 ? bytes : 1);
      if (bytes > 0) std::memcpy(m.copy.get(), v.data, bytes);
      m.host = v;
      m.host.data = m.copy.get();
      m.host.memory = MemorySpace::host;
      *fp.at[i].view = m.host;
    }
    st->metadata.push_back(std::move(m));
  }
  if (st->backend == Backend::cpu && !one_shot) st->buffers = T::cpu_buffers(d, h);
  if (st->backend == Backend::cuda && !one_shot) {
    std::size_t bytes = 0;
    DeviceLaunch query;
    query.stream = o.cuda_stream;
    query.workspace_query = &bytes;
    s = T::cuda(d, step, host, query);
    if (!s.ok()) return s;
    s = keep_device_workspace(st.get(), bytes);
    if (!s.ok()) return s;
    st->device_stream = o.cuda_stream;
  }
  s = finish_plan(st.get(), o, one_shot);
  if (!s.ok()) return s;
  detail::PlanAccess::desc(*out) = d;
  detail::PlanAccess::host(*out) = host;
  detail::PlanAccess::set_state(*out, std::move(st));
  return Status::success();
}

// `validated`: the one-shot call's plan has just validated these very arguments in full.
template <class T>
Status run_call(const Plan<typename T::Desc, typename T::Args>& plan, const typename T::Args& a, const RunContext& ctx,
                bool validated = false) {
  using Args = typename T::Args;
  const detail::PlanState* st = detail::PlanAccess::state(plan);
  if (st == nullptr)
    return Status::error(StatusCode::invalid_argument, T::kOp, "plan",
                         std::string(T::kOp) + ": plan is empty (make it with plan() and check the status it returns)");
  const typename T::Desc& d = detail::PlanAccess::desc(plan);
  MemorySpace space = st->space;
  Status s;
  if (!validated) {
    Args x = a;
    const FieldList f = T::fields(x);
    for (int i = 0, m = 0; i < f.size; ++i) {
      if (f.at[i].role != Role::metadata) continue;
      s = same_batch(*st, f.at[i], st->metadata[static_cast<std::size_t>(m++)], ctx);
      if (!s.ok()) return s;
    }
    s = T::same_step(detail::PlanAccess::host(plan), a);
    if (!s.ok()) return s;
    Checks checks;
    checks.metadata = false;
    checks.content = st->space == MemorySpace::host;
    s = T::validate(d, a, &space, checks);
    if (!s.ok()) return s;
  }
  if (checks_only_flag()) return Status::success();
  if (space != st->space)
    return Status::error(StatusCode::invalid_argument, T::kOp, "memory",
                         std::string(T::kOp) + ": the tensors are in " +
                             (space == MemorySpace::device ? "device" : "host") + " memory but the plan was made for " +
                             (st->space == MemorySpace::device ? "device" : "host") + " memory");
  switch (st->backend) {
    case Backend::cuda: {
      Args h = a;
      const FieldList fh = T::fields(h);
      for (int i = 0, m = 0; i < fh.size; ++i) {
        if (fh.at[i].role != Role::metadata) continue;
        const detail::MetadataSlot& slot = st->metadata[static_cast<std::size_t>(m++)];
        if (slot.copy) *fh.at[i].view = slot.host;
      }
      DeviceLaunch launch;
      launch.stream = ctx.cuda_stream;
      launch.error_flag = st->error_flag;
      if (ctx.cuda_stream == st->device_stream) {
        launch.workspace = st->device_workspace.get();
        launch.workspace_bytes = st->device_workspace_bytes;
      }
      return T::cuda(d, a, h, launch);
    }
    case Backend::cpu: {
      s = check_workspace(*st, ctx);
      if (!s.ok()) return s;
      cpu::ExecutionScope scope(st->arena, ctx.workspace, &st->buffers);
      return T::cpu(d, a);
    }
    default:
      T::reference(d, a);
      return Status::success();
  }
}

// Today's one-shot entry point: plan + run in one call, the metadata and content read once.
template <class T>
Status one_shot_call(const typename T::Desc& d, const typename T::Args& a, const RunOptions& o) {
  PlanOptions po;
  if (o.backend != Backend::automatic) po.backends = {o.backend};
  po.cuda_stream = o.cuda_stream;
  Plan<typename T::Desc, typename T::Args> p;
  const Status s = plan_call<T>(d, a, po, true, &p);
  if (!s.ok()) return s;
  RunContext ctx;
  ctx.cuda_stream = o.cuda_stream;
  return run_call<T>(p, a, ctx, true);
}

}  // namespace mlakit::core
