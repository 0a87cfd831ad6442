// Device-side and launch-side helpers shared by the cuda back-end's kernels (nvcc only).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/common/device_launch.hpp"
#include "mlakit/dtype.hpp"
#include "mlakit/paged_kv_cache.hpp"
#include "mlakit/status.hpp"

namespace mlakit::cuda {

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// StatusCode::internal: "<op>: <what> failed: <CUDA error name>: <CUDA error string>".
Status cuda_error(const char* op, const char* what, cudaError_t err);

// The error of the last launch (or of an earlier asynchronous failure), as a Status.
Status check_launch(const char* op, const char* kernel);

// Dynamic shared memory a kernel may ask for on the current device: the opt-in limit per block less
// 1 KiB for the kernel's static shared memory; 0 when it cannot be queried.
std::size_t max_shared_memory(const char* op, Status* status);

// Stream-ordered temporary device memory: allocated with cudaMallocAsync on the call's stream and
// freed with cudaFreeAsync on it, so nothing waits for the device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  Status allocate(const char* op, const char* what, std::size_t bytes, cudaStream_t stream);
  void reset();
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// A call's temporary device memory as one block carved into 256-byte aligned regions: the
// launch's kept workspace when it is large enough (a plan's runs allocate nothing), else a
// stream-ordered allocation of the call's own. Regions are added first, then acquired at once.
class Temporaries {
 public:
  static constexpr std::size_t kMaxRegions = 8;
  // A region of `bytes`; returns its index. Past kMaxRegions, or a size whose sum overflows, the
  // call is refused at acquire() (nothing is written past the table; the region reads as 0).
  std::size_t add(std::size_t bytes) {
    const std::size_t rounded = (bytes / 256 + (bytes % 256 != 0)) * 256;
    if (count_ == kMaxRegions || bytes > SIZE_MAX - 255 || rounded > SIZE_MAX - total_) {
      overflow_ = true;
      return 0;
    }
    offsets_[count_] = total_;
    total_ += rounded;
    return count_++;
  }
  std::size_t total() const { return total_; }
  Status acquire(const char* op, const core::DeviceLaunch& launch, cudaStream_t stream) {
    if (overflow_)
      return Status::error(StatusCode::internal, op, "temporaries",
                           "more than " + std::to_string(kMaxRegions) + " regions or a size past the address space");
    if (launch.workspace != nullptr && launch.workspace_bytes >= total_) {
      base_ = static_cast<unsigned char*>(launch.workspace);
      return Status::success();
    }
    const Status s = own_.allocate(op, "the call's temporaries", total_, stream);
    base_ = own_.as<unsigned char>();
    return s;
  }
  template <class T>
  T* at(std::size_t region) const { return reinterpret_cast<T*>(base_ + offsets_[region]); }

 private:
  std::size_t offsets_[kMaxRegions] = {};
  std::size_t count_ = 0, total_ = 0;
  bool overflow_ = false;
  unsigned char* base_ = nullptr;
  DeviceBuffer own_;
};

// Kernel launches and dynamic shared memory go through these macros so that the kernels also
// compile as C++ against the CPU emulation used by the tests (tests/cuda_emulation), where they run
// without a GPU.
#if defined(MLAKIT_CUDA_EMULATION)
#define MLAKIT_LAUNCH(kernel, grid, block, smem, stream, ...) \
  ::mlakit_cuda_emu::launch(kernel, dim3(grid), dim3(block), smem, stream, __VA_ARGS__)
#define MLAKIT_DYNAMIC_SHARED(name) unsigned char* name = ::mlakit_cuda_emu::dynamic_shared()
#else
#define MLAKIT_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#define MLAKIT_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif

#define MLAKIT_CUDA_TRY(op, what, expr)                                      \
  do {                                                                       \
    const cudaError_t mlakit_err_ = (expr);                                  \
    if (mlakit_err_ != cudaSuccess) return ::mlakit::cuda::cuda_error(op, what, mlakit_err_); \
  } while (0)

#define MLAKIT_STATUS_TRY(expr)                    \
  do {                                             \
    ::mlakit::Status mlakit_s_ = (expr);           \
    if (!mlakit_s_.ok()) return mlakit_s_;         \
  } while (0)

// StatusCode::unsupported naming `field` when one block needs more dynamic shared memory than the
// device offers: "<op>: <what> needs <bytes> bytes of shared memory per block (the GPU has <limit>)".
Status shared_memory_fits(const char* op, const char* field, const std::string& what, std::size_t bytes,
                          std::size_t limit);

// StatusCode::unsupported naming `field`: "<op>: <what> exceeds one launch".
Status exceeds_one_launch(const char* op, const char* field, const std::string& what);

// Queues kernel<<<grid, block, smem, stream>>>(args...) and reports a failed launch naming the
// kernel. A launch with dynamic shared memory first opts the kernel in to that size (past 48 KiB
// the launch fails otherwise).
template <class... P, class... A>
Status launch_kernel(const char* op, const char* name, void (*kernel)(P...), dim3 grid, dim3 block, std::size_t smem,
                     cudaStream_t stream, A&&... args) {
  if (smem > 0)
    MLAKIT_CUDA_TRY(op, (std::string("setting the shared memory of ") + name).c_str(),
                    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  MLAKIT_LAUNCH(kernel, grid, block, smem, stream, static_cast<A&&>(args)...);
  return check_launch(op, name);
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
inline std::int64_t round_up(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

// Whether every row of a cache's blocks (dims 0-4 index rows) starts 16-byte aligned, so that
// 16-byte loads and cp.async copies may read it: the base and the stride in bytes of every
// dimension that has more than one index.
inline bool cache_rows_16_byte_aligned(const TensorView& blocks) {
  if (reinterpret_cast<std::uintptr_t>(blocks.data) % 16 != 0) return false;
  const auto size = static_cast<std::int64_t>(dtype_size(blocks.dtype));
  for (int i = 0; i < 5; ++i)
    if (blocks.shape[i] > 1 && (blocks.strides[i] * size) % 16 != 0) return false;
  return true;
}

// ---- device-side views --------------------------------------------------------

// A paged cache as the kernels see it (docs/README.md §4); plain values, passed by value to kernels.
struct DevPagedCache {
  const void* blocks = nullptr;
  void* blocks_rw = nullptr;
  const float* scales = nullptr;                // f32 scales (null for e8m0 or none)
  const std::uint8_t* scales_e8m0 = nullptr;    // e8m0 scale bytes (FlashMLA MODEL1), else null
  const std::uint16_t* tail = nullptr;          // bf16 tail of split rows, else null
  const std::uint32_t* lut = nullptr;
  const std::uint32_t* cache_lengths = nullptr;
  std::int64_t num_blocks = 0, kv_dim = 0, num_layers = 0, page_size = 0, heads = 0, head_size = 0;
  std::int64_t scales_per_row = 0, lut_cols = 0, quantized_size = 0, tail_size = 0, granularity = 0;
  std::int64_t stride[5] = {}, scale_stride[5] = {}, tail_stride[5] = {};  // element strides (dims 0-4)

  static DevPagedCache from(const PagedKVCacheView& c) {
    DevPagedCache d;
    d.blocks = c.blocks.data;
    d.blocks_rw = c.blocks.data;
    const bool e8m0 = c.scales.dtype == DType::e8m0;
    d.scales = e8m0 ? nullptr : static_cast<const float*>(c.scales.data);
    d.scales_e8m0 = e8m0 ? static_cast<const std::uint8_t*>(c.scales.data) : nullptr;
    d.tail = static_cast<const std::uint16_t*>(c.tail.data);
    d.quantized_size = c.quantized_size();
    d.tail_size = c.tail_size();
    d.granularity = c.quant_granularity;
    d.lut = static_cast<const std::uint32_t*>(c.lookup_table.data);
    d.cache_lengths = static_cast<const std::uint32_t*>(c.cache_lengths.data);
    d.num_blocks = c.num_blocks();
    d.kv_dim = c.kv_dim();
    d.num_layers = c.num_layers();
    d.page_size = c.page_size();
    d.heads = c.num_kv_heads();
    d.head_size = c.head_size();
    d.scales_per_row = c.scales.data != nullptr ? c.scales.shape[5] : 0;
    d.lut_cols = c.lookup_table.data != nullptr ? c.lookup_table.shape[1] : 0;
    for (int i = 0; i < 5; ++i) {
      d.stride[i] = c.blocks.strides[i];
      d.scale_stride[i] = c.scales.data != nullptr ? c.scales.strides[i] : 0;
      d.tail_stride[i] = c.tail.data != nullptr ? c.tail.strides[i] : 0;
    }
    return d;
  }

  // Element offset of (blk, kv, layer, off, head, 0) in `blocks`.
  __host__ __device__ std::int64_t row_offset(std::int64_t blk, std::int64_t kv, std::int64_t layer,
                                              std::int64_t off, std::int64_t head) const {
    return blk * stride[0] + kv * stride[1] + layer * stride[2] + off * stride[3] + head * stride[4];
  }
  __host__ __device__ std::int64_t scale_offset(std::int64_t blk, std::int64_t kv, std::int64_t layer,
                                                std::int64_t off, std::int64_t head) const {
    return blk * scale_stride[0] + kv * scale_stride[1] + layer * scale_stride[2] + off * scale_stride[3] +
           head * scale_stride[4];
  }
  __host__ __device__ std::int64_t tail_offset(std::int64_t blk, std::int64_t kv, std::int64_t layer,
                                               std::int64_t off, std::int64_t head) const {
    return blk * tail_stride[0] + kv * tail_stride[1] + layer * tail_stride[2] + off * tail_stride[3] +
           head * tail_stride[4];
  }
  // The scale at element offset i of the scales: f32, or an e8m0 byte.
  __device__ float scale_at(std::int64_t i) const {
    return scales_e8m0 != nullptr ? e8m0_to_f32(scales_e8m0[i]) : scales[i];
  }
  // Physical block of token position `pos` of sequence b (validated to exist).
  __device__ std::int64_t block_of(std::int64_t b, std::int64_t pos) const {
    return static_cast<std::int64_t>(lut[b * lut_cols + pos / page_size]);
  }
};

// The sequence that owns row t of a ragged batch: the last b with offsets[b] <= t (empty
// sequences own nothing). offsets has B+1 entries and t < offsets[B].
__device__ __forceinline__ int find_sequence(const std::uint32_t* offsets, int B, std::int64_t t) {
  int lo = 0, hi = B - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (static_cast<std::int64_t>(offsets[mid]) <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Builds the exact fp8 -> bf16 decode table (every e4m3 value is a bf16 value) in shared memory.
// Call with every thread of the block, then __syncthreads().
__device__ __forceinline__ void build_fp8_table(std::uint16_t* table) {
  for (int c = threadIdx.x; c < 256; c += blockDim.x)
    table[c] = static_cast<std::uint16_t>(f32_to_bits(f8e4m3_to_f32(static_cast<std::uint8_t>(c))) >> 16);
}

// 8 fp8 codes (two little-endian words, lowest byte first) decoded through the table of
// build_fp8_table into 8 bf16 values, lowest first: one 16-byte store.
__device__ __forceinline__ uint4 decode_fp8x8(unsigned a, unsigned b, const std::uint16_t* table) {
  auto pair = [&](unsigned w, int shift) {
    return static_cast<unsigned>(table[(w >> shift) & 0xFFu]) | static_cast<unsigned>(table[(w >> (shift + 8)) & 0xFFu]) << 16;
  };
  return make_uint4(pair(a, 0), pair(a, 16), pair(b, 0), pair(b, 16));
}

// The maximum with NaN kept (fmaxf drops it): a NaN score makes an attention row's running max,
// and so max_logits, NaN, as in the reference; its output and lse are NaN then either way.
__device__ __forceinline__ float nan_max(float a, float b) { return a != a ? a : b != b ? b : fmaxf(a, b); }

__device__ __forceinline__ float bf16_bits_to_f32(std::uint16_t b) { return __uint_as_float(std::uint32_t(b) << 16); }

}  // namespace mlakit::cuda
