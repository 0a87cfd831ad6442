#include "core/common/device_mirror.hpp"

#include <atomic>
#include <limits>
#include <span>

#include "core/common/dispatch.hpp"
#include "core/common/validate.hpp"

namespace mlakit::core {
namespace {

std::atomic<const DeviceMemoryOps*> g_ops{nullptr};

// The view's bytes when it can be copied as one block: present, a valid rank, non-negative shape,
// row-major contiguous, and a size that fits. -1 otherwise (the validator will say why).
std::int64_t copyable_bytes(const TensorView& v) {
  if (v.data == nullptr || v.rank < 0 || v.rank > kMaxRank) return -1;
  std::int64_t n = static_cast<std::int64_t>(dtype_size(v.dtype));
  if (n == 0) return -1;
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] < 0) return -1;
    if (v.shape[i] != 0 && n > std::numeric_limits<std::int64_t>::max() / v.shape[i]) return -1;
    n *= v.shape[i];
  }
  if (!v.is_contiguous()) return -1;
  return n;
}

}  // namespace

const DeviceMemoryOps* device_memory_ops() { return g_ops.load(); }

const DeviceMemoryOps* set_device_memory_ops(const DeviceMemoryOps* ops) { return g_ops.exchange(ops); }

Status DeviceMirror::prepare(const MirrorEntry* entries, std::size_t count) {
  slots_.clear();
  buffers_.clear();
  active_ = false;
  mixed_ = false;
  bool any_device = false, any_host = false;
  for (const MirrorEntry& e : std::span<const MirrorEntry>(entries, count)) {
    slots_.push_back(Slot{e.field, e.view, e.use, *e.view, false});
    if (e.view->data == nullptr || e.use == MirrorUse::host_copy) continue;
    (e.view->memory == MemorySpace::device ? any_device : any_host) = true;
  }
  mixed_ = any_device && any_host;
  if (route_first_ && any_device && !any_host) {
    // Only the device back-end takes device memory: refuse what cannot run before copying.
    Route r;
    const Status s = route(op_, options_, MemorySpace::device, &r);
    if (!s.ok()) return s;
  }
  const DeviceMemoryOps* ops = device_memory_ops();
  // Host calls, mixed calls (the validator or finish() reports them) and builds without a device
  // back-end: nothing to do.
  if (!any_device || any_host || ops == nullptr || ops->copy_to_host == nullptr || ops->synchronize == nullptr)
    return Status::success();

  // Queue every copy, then wait once for the call's stream (not at all when nothing is copied: a
  // plan handed host copies of the metadata).
  int copies = 0;
  for (Slot& s : slots_) {
    if (s.use != MirrorUse::host_read || s.view->data == nullptr) continue;
    const std::int64_t bytes = copyable_bytes(*s.view);
    if (bytes < 0) continue;
    buffers_.push_back(std::make_unique<std::uint8_t[]>(static_cast<std::size_t>(bytes > 0 ? bytes : 1)));
    std::string error;
    if (bytes > 0 && !ops->copy_to_host(buffers_.back().get(), s.view->data, static_cast<std::size_t>(bytes), stream_,
                                        &error))
      return Status::error(StatusCode::internal, op_, s.field,
                           std::string(op_) + ": " + s.field + " could not be copied from device memory for validation (" +
                               error + ")");
    s.mirrored = true;
    ++copies;
    s.view->data = buffers_.back().get();
    s.view->memory = MemorySpace::host;
  }
  std::string error;
  if (copies > 0 && !ops->synchronize(stream_, &error))
    return Status::error(StatusCode::internal, op_, "cuda_stream",
                         std::string(op_) + ": waiting for the copies of the index tensors failed (" + error + ")");
  // The validator checks that every tensor is in one memory space and reads only the mirrors'
  // contents: the other views are labelled host for it (their device pointers are never read).
  for (Slot& s : slots_)
    if (!s.mirrored && s.view->data != nullptr && s.use != MirrorUse::host_copy) s.view->memory = MemorySpace::host;
  active_ = true;
  return Status::success();
}

Status DeviceMirror::require_device() const {
  if (!mixed_) return Status::success();
  // The kernels read the index tensors in device memory too. (The validator may accept host index
  // tensors beside device data: it reads them on the host either way.)
  Validator v(op_);
  const Slot* first = nullptr;
  for (const Slot& s : slots_) {
    if (s.original.data == nullptr || s.use == MirrorUse::host_copy) continue;
    if (first == nullptr) {
      first = &s;
    } else if (s.original.memory != first->original.memory) {
      v.same_memory({{first->field, &first->original}, {s.field, &s.original}}, nullptr);
      return v.status();
    }
  }
  return Status::success();
}

Status DeviceMirror::finish(MemorySpace* space) {
  Validator v(op_);
  if (!active_) return Status::success();
  for (Slot& s : slots_)
    if (!s.mirrored && s.view->data != nullptr && s.use != MirrorUse::host_copy) s.view->memory = s.original.memory;
  // The validator compared written buffers with the mirrors' host addresses; compare them with the
  // index tensors' device memory instead.
  for (const Slot& w : slots_) {
    if (w.use != MirrorUse::written) continue;
    for (const Slot& r : slots_) {
      if (!r.mirrored) continue;
      if (!v.no_overlap(w.field, w.original, r.field, r.original)) return v.status();
    }
  }
  if (space) *space = MemorySpace::device;
  return Status::success();
}

}  // namespace mlakit::core
