// Validation of calls whose tensors live in device memory, with the host validators unchanged.
//
// The validators read a few small index tensors (row offsets, page tables, lengths, g_idx) on the
// host. For a device call, DeviceMirror copies exactly those tensors to host buffers (queued on the
// call's stream, then one synchronization of that stream: never a device-wide one) and points a
// copy of the arguments at the mirrors, so that the validator runs on it as on a host call. The
// kernels then get the caller's device views (and the mirrors, for host-side launch sizes).
//
// Use in an operator's entry point (see the cuda back-end's notes for each operator):
//
//   FooArgs h = a;                                  // what validation reads
//   core::DeviceMirror mirror("foo", o);            // o: the call's RunOptions
//   Status s = mirror.prepare({{"input_row_offsets", &h.input_row_offsets, core::MirrorUse::host_read},
//                              {"q", &h.q, core::MirrorUse::device},
//                              {"out", &h.out, core::MirrorUse::written}, ...every tensor of the call});
//   if (!s.ok()) return s;
//   MemorySpace space = MemorySpace::host;
//   s = core::validate_foo(d, h, &space);
//   if (!s.ok()) return s;
//   s = mirror.finish(&space);
//   if (!s.ok()) return s;
//   ... route; the host back-ends run on `a`; the cuda branch:
//   s = mirror.require_device();
//   if (!s.ok()) return s;
//   return cuda::foo(d, a, h, o.cuda_stream);      // through core::device_kernels()
//
// A call with every tensor in host memory is left alone (h == a, no copy, no synchronization), and
// so is every call when no device back-end is linked. This file is compiled without CUDA: the
// device back-end registers its memory functions at static initialization.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "mlakit/backend.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit::core {

// How bytes move to and from device memory. Each function returns false and sets *error when it
// fails. Copies are queued on `stream` (null = the default stream); synchronize waits for that
// stream only.
struct DeviceMemoryOps {
  const char* name = "";
  bool (*copy_to_host)(void* host_dst, const void* device_src, std::size_t bytes, void* stream,
                       std::string* error) = nullptr;
  bool (*copy_to_device)(void* device_dst, const void* host_src, std::size_t bytes, void* stream,
                         std::string* error) = nullptr;
  bool (*synchronize)(void* stream, std::string* error) = nullptr;
  bool (*allocate)(void** device_ptr, std::size_t bytes, std::string* error) = nullptr;
  bool (*release)(void* device_ptr, std::string* error) = nullptr;
};

// The registered functions, or null when no device back-end is linked in.
const DeviceMemoryOps* device_memory_ops();
// Installs `ops` (null removes them) and returns the previous ones. The cuda back-end calls it at
// static initialization; tests install fakes and restore the previous ops afterwards.
const DeviceMemoryOps* set_device_memory_ops(const DeviceMemoryOps* ops);

enum class MirrorUse {
  host_read,  // the validator reads the contents: copied to a host mirror for a device call
  device,     // only the kernels read it: stays on the device
  written,    // an output or in-place buffer: stays on the device; must not overlap a mirrored tensor
  host_copy,  // the caller's host copy of a device tensor (a plan's metadata): read as it is, and not
              // counted when deciding whether the call is a device call
};

struct MirrorEntry {
  const char* field;   // the validator's name for it, e.g. "k_cache.lookup_table"
  TensorView* view;    // a view inside the copy of the arguments that validation reads
  MirrorUse use;
};

class DeviceMirror {
 public:
  DeviceMirror(const char* op, void* stream) : op_(op), stream_(stream) {}
  // For an entry point: a call whose tensors are all in device memory is first routed with
  // `options` (a host back-end asked for device memory is refused, a device back-end that cannot
  // run here is StatusCode::unavailable with the reason), so that no copy is tried without a device.
  DeviceMirror(const char* op, const RunOptions& options)
      : op_(op), stream_(options.cuda_stream), options_(options), route_first_(true) {}
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;

  // List every tensor of the call. When every present one is in device memory (and a device
  // back-end is linked), the host_read ones are copied to host mirrors and re-pointed at them, and
  // the others are marked host memory for the validator's sake (it never reads their contents).
  // A view that cannot be copied as a whole (not contiguous, bad rank or shape) is left as it is,
  // so that the validator reports it. Fails (StatusCode::internal) when a copy fails, and, with
  // the RunOptions constructor, with route()'s status when a device call cannot run here.
  Status prepare(std::initializer_list<MirrorEntry> entries) { return prepare(entries.begin(), entries.size()); }
  Status prepare(const MirrorEntry* entries, std::size_t count);

  // After the validator accepted the copy: restores the device label of the views that were not
  // mirrored, checks what the validator could not see (written tensors against the mirrored
  // tensors' device memory) and, for a device call, sets *space to MemorySpace::device.
  Status finish(MemorySpace* space);

  // For the cuda branch, after routing: every listed tensor is in device memory. A validator may
  // accept host index tensors beside device data (it reads them on the host either way); the
  // kernels cannot.
  Status require_device() const;

  // True when prepare() made host mirrors (the call's tensors are in device memory).
  bool active() const { return active_; }

 private:
  struct Slot {
    const char* field;
    TensorView* view;
    MirrorUse use;
    TensorView original;
    bool mirrored = false;
  };
  const char* op_;
  void* stream_;
  RunOptions options_;
  bool route_first_ = false;
  bool active_ = false;
  bool mixed_ = false;
  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<std::uint8_t[]>> buffers_;
};

}  // namespace mlakit::core
