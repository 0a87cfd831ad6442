// Host-callable helpers of the cuda back-end (no CUDA types: code compiled without nvcc may
// include this header). Every failure is a Status with StatusCode::internal naming the CUDA error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit::cuda {

// `src` (device memory, contiguous) -> *dst, resized to src.size_bytes(). Queued on `stream`
// (cudaStream_t; null = default stream), then that stream is synchronized.
Status copy_device_to_host(const TensorView& src, std::vector<std::uint8_t>* dst, void* stream);
// dst.size_bytes() bytes from host memory `src` into `dst` (device memory, contiguous), then the
// stream is synchronized (so `src` may be freed on return).
Status copy_host_to_device(const void* src, const TensorView& dst, void* stream);
// Waits for the work queued on `stream` only.
Status synchronize(void* stream);

}  // namespace mlakit::cuda
