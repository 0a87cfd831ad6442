// What a device launch takes besides the call: its stream and the device error flag.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlakit::core {

// Bits of the device error flag: what a kernel found in data only the device holds. The kernel
// clamps the value (or writes the element as invalid) and ORs its bit into the flag;
// check_device_errors() reads, reports and clears it.
enum DeviceError : std::uint32_t {
  kDeviceErrorTopkLengths = 1u,   // sparse_mla_prefill: topk_lengths[t] > indices_stride
  kDeviceErrorGIdx = 2u,          // fused_qkv_paged: g_idx[k] outside [0, K/group_size)
  kDeviceErrorRemapIndex = 4u,    // remap_indices_to_rows: an index < -1, past the table, or on no page
};

struct DeviceLaunch {
  void* stream = nullptr;                 // cudaStream_t; null = the default stream
  std::uint32_t* error_flag = nullptr;    // device word for DeviceError bits; null = not checked
  // Device memory for the call's temporaries, kept by a plan across its runs (or given by the
  // caller): used when at least as large as the call needs, else the call allocates its own.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  // Non-null: the call only computes how much temporary device memory it needs, writes it here and
  // returns; it launches nothing and touches no device memory (plan() sizes its workspace so).
  std::size_t* workspace_query = nullptr;
};

}  // namespace mlakit::core
