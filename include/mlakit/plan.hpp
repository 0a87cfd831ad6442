// Plan once, run many: the front door for a serving engine's layer loop.
//
// An engine calls each operator once per layer of every step, with the same batch metadata (row
// offsets, page table, cache and prefix lengths) for all layers of a step. plan() checks the
// descriptor and the content of that metadata once, picks the back-end and its kernels, and sizes
// the workspace; run() then checks only what may change from layer to layer (shapes, dtypes,
// strides, memory space, aliasing, the per-layer data a kernel indexes with, and that the metadata
// is the batch the plan saw) and computes. A device run copies nothing to the host and never waits
// on a stream, so it can be captured in a CUDA graph; a device plan keeps its runs' temporary
// device memory (scores, quantized windows) from plan() to its destruction, so runs on the plan's
// stream (PlanOptions::cuda_stream) allocate nothing; a run on another stream allocates its own.
//
//   LightningIndexerPlan p;
//   Status s = plan(desc, step_args, PlanOptions{}, &p);      // once per step
//   for (layer ...) s = run(p, args_of(layer), ctx);           // once per layer
//
// The one-shot calls (lightning_indexer(desc, args, options), ...) are plan + run in one call,
// with the same results bit for bit.
//
// Contract: the metadata's content must not change between plan() and the plan's last run() (the
// plan does not copy host metadata; it reads the very buffers again in cpu runs). A run names the
// batch by handing the same metadata views (same data pointer, dtype, shape and strides), or, for a
// plan made with a nonzero PlanOptions::step_id, by RunContext::step_id (the way to plan a device
// step from host copies of its metadata, as the engine has them before uploading).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <tbb/task_arena.h>

#include "mlakit/backend.hpp"
#include "mlakit/status.hpp"

namespace mlakit {

struct PlanOptions {
  // Back-ends to try, in order; each accepts the call or declines with a reason, and the plan
  // keeps the reasons (decisions()). Empty: as RunOptions' `automatic` (cuda for device memory,
  // cpu for host memory). `reference` is taken only when named.
  std::vector<Backend> backends;
  // cpu: run inside the caller's arena (its threads, e.g. one per NUMA node or tensor-parallel
  // rank). Not owned; it must outlive the plan's runs.
  tbb::task_arena* arena = nullptr;
  // cpu, when no arena is given: the plan's runs use an arena of this many threads of its own;
  // 0 = the library's setting (set_cpu_threads / MLAKIT_NUM_THREADS).
  int num_threads = 0;
  // Nonzero: runs identify the batch by RunContext::step_id instead of by the metadata views.
  std::uint64_t step_id = 0;
  // Device plans handed device metadata: the stream its one copy to the host is queued on.
  void* cuda_stream = nullptr;
};

struct RunContext {
  void* cuda_stream = nullptr;  // cudaStream_t of a device run; null = the default stream
  // cpu: the caller's memory for the call's shared buffers, at least plan.workspace_bytes() and
  // 64-byte aligned; null = buffers the library keeps with the calling thread. Each worker thread
  // keeps its own small scratch (kernel tiles) either way.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  std::uint64_t step_id = 0;  // with a plan made with a nonzero step id
};

namespace detail {
struct PlanState;
struct PlanAccess;
}  // namespace detail

// What every plan tells: the back-end and kernels it picked, why others were declined, and the
// workspace its runs take.
class PlanInfo {
 public:
  bool valid() const { return state_ != nullptr; }
  Backend backend() const;
  // e.g. "cpu avx2 (2 threads)"; MLAKIT_VERBOSE=1 prints it, and the decisions, at plan time.
  const std::string& implementation() const;
  // One line per candidate: "cuda: declined (...)", "cpu: chosen".
  const std::string& decisions() const;
  std::size_t workspace_bytes() const;

 protected:
  friend struct detail::PlanAccess;
  std::shared_ptr<const detail::PlanState> state_;
};

// A plan of one operator. Copies share the plan's state and may run on several threads at once.
template <class Desc, class Args>
class Plan : public PlanInfo {
 public:
  const Desc& desc() const { return desc_; }

 private:
  friend struct detail::PlanAccess;
  Desc desc_{};
  Args host_{};  // device plans: a call's metadata views pointed at the plan's host copies
};

// The remap (op 1's companion) has no descriptor.
struct NoDesc {};

// A device run's kernels check what only the device holds (op 4's topk_lengths, GPTQ's g_idx, the
// remap's indices) as they go: a bad value is clamped, or its element written as invalid, and a
// process-wide device error flag is raised. This reads and clears the flag (a copy to the host
// and a wait on `cuda_stream`): an engine calls it once per step, or in tests. Also run by every
// device plan(). Success when no device back-end is linked.
Status check_device_errors(void* cuda_stream = nullptr);

}  // namespace mlakit
