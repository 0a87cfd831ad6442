// Shared validation (docs/README.md §6): every operator's checker is built from these.
// Each check returns true when it passes; the first failure is kept and returned by status().
// Messages read "<op>: <field>=<value> <what is wrong> (<expected>)".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>

#include "mlakit/paged_kv_cache.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"

namespace mlakit::core {

std::string shape_string(const TensorView& v);

// Expected shape entry: a fixed size, or kAnyDim.
inline constexpr std::int64_t kAnyDim = -1;

struct CacheExpect {
  std::initializer_list<DType> dtypes;
  std::int64_t kv_dim = kAnyDim;        // 1 (MLA) or 2, or kAnyDim for {1, 2}
  std::int64_t num_kv_heads = kAnyDim;
  std::int64_t head_size = kAnyDim;
  bool scales = false;                  // scales required (true) or forbidden (false)
  std::int64_t min_granularity = 0;     // with scales: quant_granularity must be >= this
  bool e8m0_scales = false;             // scales may be e8m0 bytes as well as f32
  bool split_rows = false;              // a bf16 tail after an f8e4m3 part may be present
  std::uint32_t layer_idx = 0;
  bool need_cache_lengths = true;       // cache_lengths must be a u32 [B] tensor
  bool written = false;                 // the call writes the blocks: no two rows may share memory
};

// How a tensor's elements must be laid out.
enum class Layout {
  contiguous,  // row-major
  rows,        // any non-negative strides with the last one 1 (paged caches); `written` adds: no two
               // elements share memory
};

// What a validation reads besides descriptors, shapes, dtypes, strides and addresses.
struct Checks {
  // The content of the batch metadata (row offsets, page tables, cache and prefix lengths, window
  // offsets): read on the host by plan() and by a one-shot call, once per step; run() skips it,
  // since a run must see the very metadata its plan checked (same views, or the same step id).
  bool metadata = true;
  // The content of data tensors that a kernel would index with (op 4's topk_lengths, GPTQ's g_idx,
  // the remap's indices): read in host calls and in one-shot device calls (on host mirrors). A run
  // on device memory leaves them to the kernels, which clamp and raise the device error flag; a
  // plan leaves them to its runs.
  bool content = true;
};

class Validator {
 public:
  explicit Validator(const char* op, Checks checks = {}) : op_(op), checks_(checks) {}

  // False in a run: row_offsets() and pages_exist() then check shapes only, and operators skip
  // their own loops over the metadata.
  bool reads_metadata() const { return checks_.metadata; }
  bool reads_content() const { return checks_.content; }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const char* op() const { return op_; }

  // Records a failure (the first one wins): message "<op>: <field><text>". Returns false.
  bool fail(const std::string& field, const std::string& text, StatusCode code = StatusCode::invalid_argument);

  bool positive(const char* field, std::int64_t value);
  bool non_negative(const char* field, std::int64_t value);
  bool at_most(const char* field, std::int64_t value, const char* limit_name, std::int64_t limit);

  // Present, contiguous, dtype in `dtypes`, rank and shape matching `dims` (kAnyDim = any size).
  bool tensor(const char* field, const TensorView& v, std::initializer_list<DType> dtypes,
              std::initializer_list<std::int64_t> dims, Layout layout = Layout::contiguous, bool written = false);
  // Absent (data == nullptr) is fine; present means tensor(...).
  bool optional_tensor(const char* field, const TensorView& v, std::initializer_list<DType> dtypes,
                       std::initializer_list<std::int64_t> dims);

  // u32 [B+1] offsets: [0] = 0, non-decreasing, [B] = total_rows. Host memory (it is read), unless
  // the metadata is not read.
  bool row_offsets(const char* field, const TensorView& offsets, std::int64_t total_rows);

  // blocks / scales / lookup_table / cache_lengths: shapes, dtypes, layer_idx, for `batch` sequences.
  bool paged_cache(const char* field, const PagedKVCacheView& cache, const CacheExpect& expect,
                   std::int64_t batch);

  // Every position in [first, last) of sequence b maps to a real page (LUT entry < num_blocks)
  // and lies inside the lookup table's row.
  bool pages_exist(const char* field, const PagedKVCacheView& cache, std::int64_t b, std::int64_t first,
                   std::int64_t last);

  // The two byte ranges must not overlap (either may be absent).
  bool no_overlap(const char* field_a, const TensorView& a, const char* field_b, const TensorView& b);

  using NamedView = std::pair<const char*, const TensorView*>;

  // Each view the call writes shares no byte with any view it reads, nor with the written views
  // listed before it (the error names the later one first).
  bool written_apart(std::span<const NamedView> written, std::span<const NamedView> read);

  // All present tensors live in one memory space; writes it to *space. The error names the first
  // view that differs from the first present one.
  bool same_memory(std::initializer_list<NamedView> views, MemorySpace* space);
  // The same over `first` then `then`, as one list.
  bool same_memory(std::span<const NamedView> first, std::span<const NamedView> then, MemorySpace* space);

 private:
  bool row_strides(const char* field, const TensorView& v, bool written);

  const char* op_;
  Checks checks_;
  Status status_;
};

// Element i of a host u32 / i32 tensor.
inline std::uint32_t u32_at(const TensorView& v, std::int64_t i) { return static_cast<const std::uint32_t*>(v.data)[i]; }
inline std::int32_t i32_at(const TensorView& v, std::int64_t i) { return static_cast<const std::int32_t*>(v.data)[i]; }

}  // namespace mlakit::core
