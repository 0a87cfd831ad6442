// The device back-end's launchers, as the operators' entry points call them.
//
// The entry points are compiled without CUDA: the cuda back-end registers its launchers here at
// static initialization (src/cuda/runtime.cu), next to its memory functions. Builds without it
// leave the table empty and route() reports the cuda back-end unavailable before any launcher is
// needed. The CPU emulation of the tests registers the same launchers compiled as C++.
#pragma once

#include <string>
#include <utility>

#include "core/common/device_launch.hpp"
#include "mlakit/ops/fused_qkv_paged.hpp"
#include "mlakit/ops/lightning_indexer.hpp"
#include "mlakit/ops/mla_prefill_fp8.hpp"
#include "mlakit/ops/msa_block_indexer.hpp"
#include "mlakit/ops/sparse_mla_prefill.hpp"
#include "mlakit/status.hpp"

namespace mlakit::core {

// Each launcher takes a validated call whose tensors are all in device memory (`a`), the same call
// with the batch metadata pointed at host copies (`host`, for launch sizes: a plan's copies), and
// the launch's stream and device error flag. See src/cuda/<op>.hpp.
struct DeviceKernels {
  const char* name = "";
  // True when a device is usable; otherwise *why says what the driver reported.
  bool (*available)(std::string* why) = nullptr;
  Status (*lightning_indexer)(const LightningIndexerDesc&, const LightningIndexerArgs& a,
                              const LightningIndexerArgs& host, const DeviceLaunch& launch) = nullptr;
  Status (*remap_indices_to_rows)(const RemapIndicesArgs& a, const DeviceLaunch& launch) = nullptr;
  Status (*msa_block_indexer)(const MsaBlockIndexerDesc&, const MsaBlockIndexerArgs& a,
                              const MsaBlockIndexerArgs& host, const DeviceLaunch& launch) = nullptr;
  Status (*mla_prefill_fp8)(const MlaPrefillFp8Desc&, const MlaPrefillFp8Args& a, const MlaPrefillFp8Args& host,
                            const DeviceLaunch& launch) = nullptr;
  Status (*sparse_mla_prefill)(const SparseMlaPrefillDesc&, const SparseMlaPrefillArgs& a,
                               const SparseMlaPrefillArgs& host, const DeviceLaunch& launch) = nullptr;
  Status (*fused_qkv_paged)(const FusedQkvPagedDesc&, const FusedQkvPagedArgs& a, const FusedQkvPagedArgs& host,
                            const DeviceLaunch& launch) = nullptr;
};

// The registered launchers, or null when no device back-end is linked in.
const DeviceKernels* device_kernels();
// Installs `kernels` (null removes them) and returns the previous ones.
const DeviceKernels* set_device_kernels(const DeviceKernels* kernels);

// The launcher `member` of the registered table, or StatusCode::unavailable naming `op` when there
// is none (the call was routed to cuda, so this only happens when a table lacks an entry).
template <class Fn>
Status device_launcher(const char* op, Fn DeviceKernels::*member, Fn* out) {
  const DeviceKernels* k = device_kernels();
  if (k != nullptr && k->*member != nullptr) {
    *out = k->*member;
    return Status::success();
  }
  return Status::error(StatusCode::unavailable, op, "backend",
                       std::string(op) + ": backend=cuda has no kernel for this operator in this build");
}

// Calls the registered device launcher `member` with `args`, or reports that there is none.
template <class Fn, class... Args>
Status launch_device(const char* op, Fn DeviceKernels::*member, Args&&... args) {
  Fn launch = nullptr;
  const Status s = device_launcher(op, member, &launch);
  return s.ok() ? launch(std::forward<Args>(args)...) : s;
}

}  // namespace mlakit::core
