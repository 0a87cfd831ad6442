#include "core/common/device_kernels.hpp"

#include <atomic>

namespace mlakit::core {
namespace {

std::atomic<const DeviceKernels*> g_kernels{nullptr};

}  // namespace

const DeviceKernels* device_kernels() { return g_kernels.load(); }

const DeviceKernels* set_device_kernels(const DeviceKernels* kernels) { return g_kernels.exchange(kernels); }

}  // namespace mlakit::core
