// What a device launch takes besides the call: its stream and the device error flag.
#pragma once

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
};

}  // namespace mlakit::core
