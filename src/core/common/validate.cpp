#include "core/common/validate.hpp"

#include <array>
#include <sstream>
#include <utility>

namespace mlakit::core {
namespace {

std::string dims_string(std::initializer_list<std::int64_t> dims) {
  std::ostringstream s;
  s << '[';
  bool first = true;
  for (std::int64_t d : dims) {
    if (!first) s << ", ";
    first = false;
    if (d == kAnyDim) s << '*'; else s << d;
  }
  s << ']';
  return s.str();
}

std::string dtypes_string(std::initializer_list<DType> dtypes) {
  std::string s;
  for (DType t : dtypes) {
    if (!s.empty()) s += " or ";
    s += dtype_name(t);
  }
  return s;
}

// "[a, b, c]" of a view's first `rank` entries of `dims` (its shape or its strides).
std::string list_string(const TensorView& v, const std::array<std::int64_t, kMaxRank>& dims) {
  std::ostringstream s;
  s << '[';
  for (int i = 0; i < v.rank && i < kMaxRank; ++i) s << (i ? ", " : "") << dims[static_cast<std::size_t>(i)];
  s << ']';
  return s.str();
}

std::string strides_string(const TensorView& v) { return list_string(v, v.strides); }

}  // namespace

std::string shape_string(const TensorView& v) { return list_string(v, v.shape); }

bool Validator::fail(const std::string& field, const std::string& text, StatusCode code) {
  if (status_.ok()) status_ = Status::error(code, op_, field, std::string(op_) + ": " + field + text);
  return false;
}

bool Validator::positive(const char* field, std::int64_t value) {
  if (value > 0) return true;
  return fail(field, "=" + std::to_string(value) + " (must be > 0)");
}

bool Validator::non_negative(const char* field, std::int64_t value) {
  if (value >= 0) return true;
  return fail(field, "=" + std::to_string(value) + " (must be >= 0)");
}

bool Validator::at_most(const char* field, std::int64_t value, const char* limit_name, std::int64_t limit) {
  if (value <= limit) return true;
  return fail(field, "=" + std::to_string(value) + " (must be <= " + limit_name + "=" + std::to_string(limit) + ")");
}

bool Validator::tensor(const char* field, const TensorView& v, std::initializer_list<DType> dtypes,
                       std::initializer_list<std::int64_t> dims, Layout layout, bool written) {
  if (!ok()) return false;
  if (v.data == nullptr) return fail(field, " is missing (null data pointer)");
  bool dtype_ok = false;
  for (DType t : dtypes) dtype_ok |= (t == v.dtype);
  if (!dtype_ok)
    return fail(std::string(field) + ".dtype", "=" + std::string(dtype_name(v.dtype)) + " (expected " +
                                                   dtypes_string(dtypes) + ")");
  // Element strides keep a view aligned once its start is (spec 06 §A: an f32 view inside a byte
  // buffer needs 4-byte-aligned records); a misaligned start is refused, never read slowly.
  if (reinterpret_cast<std::uintptr_t>(v.data) % dtype_size(v.dtype) != 0)
    return fail(std::string(field) + ".data", " is not aligned to its element size " +
                                                  std::to_string(dtype_size(v.dtype)) + " (address " +
                                                  std::to_string(reinterpret_cast<std::uintptr_t>(v.data) % 64) +
                                                  " mod 64)");
  if (v.rank < 0 || v.rank > kMaxRank || v.rank != static_cast<int>(dims.size()))
    return fail(std::string(field) + ".rank", "=" + std::to_string(v.rank) + " (expected " +
                                                  std::to_string(dims.size()) + ": " + dims_string(dims) + ")");
  int i = 0;
  for (std::int64_t d : dims) {
    if (v.shape[i] < 0 || (d != kAnyDim && v.shape[i] != d))
      return fail(std::string(field) + ".shape", "=" + shape_string(v) + " (expected " + dims_string(dims) + ")");
    ++i;
  }
  if (layout == Layout::contiguous) {
    if (!v.is_contiguous()) return fail(std::string(field) + ".strides", " are not row-major contiguous (required)");
    return true;
  }
  return row_strides(field, v, written);
}

// Strides of a paged cache: each row contiguous, the rest free but non-negative, the reach of the
// view within int64, and (written) no two elements on the same memory.
bool Validator::row_strides(const char* field, const TensorView& v, bool written) {
  const std::string f = std::string(field) + ".strides";
  if (v.rank < 1) return true;
  if (v.shape[v.rank - 1] > 1 && v.strides[v.rank - 1] != 1)
    return fail(f, "=" + strides_string(v) + " (each row must be contiguous: the last stride must be 1)");
  std::int64_t reach = 0;
  for (int i = 0; i < v.rank; ++i) {
    if (v.strides[i] < 0) return fail(f, "=" + strides_string(v) + " (strides must be >= 0)");
    std::int64_t step = 0;
    if (v.shape[i] > 0 && (__builtin_mul_overflow(v.shape[i] - 1, v.strides[i], &step) ||
                           __builtin_add_overflow(reach, step, &reach) ||
                           __builtin_mul_overflow(reach + 1, std::int64_t(dtype_size(v.dtype)), &step)))
      return fail(f, "=" + strides_string(v) + " (the view's reach overflows int64)");
  }
  if (!written || v.numel() <= 1) return true;
  // Sufficient for distinct elements: taken from the smallest stride up, each dimension steps
  // past everything the smaller ones reach.
  int order[kMaxRank];
  int n = 0;
  for (int i = 0; i < v.rank; ++i)
    if (v.shape[i] > 1) order[n++] = i;
  for (int k = 1; k < n; ++k)  // insertion sort by stride (six entries at most)
    for (int m = k; m > 0 && v.strides[order[m]] < v.strides[order[m - 1]]; --m) std::swap(order[m], order[m - 1]);
  std::int64_t covered = 1;
  for (int k = 0; k < n; ++k) {
    const int i = order[k];
    if (v.strides[i] < covered)
      return fail(f, "=" + strides_string(v) + " (the cache is written, and dimension " + std::to_string(i) +
                         " overlaps the ones inside it: two rows would share memory)");
    covered = v.strides[i] * (v.shape[i] - 1) + covered;
  }
  return true;
}

bool Validator::optional_tensor(const char* field, const TensorView& v, std::initializer_list<DType> dtypes,
                                std::initializer_list<std::int64_t> dims) {
  if (!ok()) return false;
  if (v.data == nullptr) return true;
  return tensor(field, v, dtypes, dims);
}

bool Validator::row_offsets(const char* field, const TensorView& offsets, std::int64_t total_rows) {
  if (!tensor(field, offsets, {DType::u32}, {kAnyDim})) return false;
  if (offsets.shape[0] < 1) return fail(std::string(field) + ".shape", "=" + shape_string(offsets) + " (expected [B+1] with B >= 0)");
  if (!checks_.metadata) return true;
  if (offsets.memory != MemorySpace::host) return fail(field, " is in device memory (offsets must be readable on the host here)");
  const std::int64_t n = offsets.shape[0];
  if (u32_at(offsets, 0) != 0)
    return fail(std::string(field) + "[0]", "=" + std::to_string(u32_at(offsets, 0)) + " (must be 0)");
  for (std::int64_t i = 1; i < n; ++i) {
    if (u32_at(offsets, i) < u32_at(offsets, i - 1))
      return fail(std::string(field) + "[" + std::to_string(i) + "]",
                  "=" + std::to_string(u32_at(offsets, i)) + " < " + field + "[" + std::to_string(i - 1) +
                      "]=" + std::to_string(u32_at(offsets, i - 1)) + " (must be non-decreasing)");
  }
  if (static_cast<std::int64_t>(u32_at(offsets, n - 1)) != total_rows)
    return fail(std::string(field) + "[" + std::to_string(n - 1) + "]",
                "=" + std::to_string(u32_at(offsets, n - 1)) + " (must equal the total row count " +
                    std::to_string(total_rows) + ")");
  return true;
}

bool Validator::paged_cache(const char* field, const PagedKVCacheView& cache, const CacheExpect& expect,
                            std::int64_t batch) {
  if (!ok()) return false;
  const std::string f(field);
  const std::string blocks = f + ".blocks";
  if (!tensor(blocks.c_str(), cache.blocks, expect.dtypes, {kAnyDim, kAnyDim, kAnyDim, kAnyDim, kAnyDim, kAnyDim},
              Layout::rows, expect.written))
    return false;
  static const char* const kDimNames[6] = {"num_blocks", "kv_dim", "num_layers", "page_size", "num_kv_heads", "head_size"};
  for (int i = 0; i < 6; ++i) {
    if (cache.blocks.shape[i] < 1)
      return fail(blocks + ".shape[" + std::to_string(i) + "]",
                  "=" + std::to_string(cache.blocks.shape[i]) + " (" + kDimNames[i] + " must be >= 1)");
  }
  if (expect.kv_dim != kAnyDim ? cache.kv_dim() != expect.kv_dim : (cache.kv_dim() != 1 && cache.kv_dim() != 2))
    return fail(blocks + ".shape[1]", "=" + std::to_string(cache.kv_dim()) + " (kv_dim must be " +
                                          (expect.kv_dim == kAnyDim ? std::string("1 or 2") : std::to_string(expect.kv_dim)) + ")");
  if (expect.num_kv_heads != kAnyDim && cache.num_kv_heads() != expect.num_kv_heads)
    return fail(blocks + ".shape[4]", "=" + std::to_string(cache.num_kv_heads()) + " (num_kv_heads must be " +
                                          std::to_string(expect.num_kv_heads) + ")");
  const std::string tail = f + ".tail";
  if (cache.tail.data != nullptr) {
    if (!expect.split_rows)
      return fail(tail, " is present (split rows with a bf16 tail are read by sparse_mla_prefill only; this "
                        "operator takes whole rows)", StatusCode::unsupported);
    if (cache.blocks.dtype != DType::f8e4m3)
      return fail(tail, " is present with " + blocks + ".dtype=" + std::string(dtype_name(cache.blocks.dtype)) +
                            " (a tail follows an f8e4m3 quantized part)");
    if (!tensor(tail.c_str(), cache.tail, {DType::bf16},
                {cache.num_blocks(), cache.kv_dim(), cache.num_layers(), cache.page_size(), cache.num_kv_heads(), kAnyDim},
                Layout::rows, expect.written))
      return false;
    if (cache.tail.shape[5] < 1)
      return fail(tail + ".shape[5]", "=" + std::to_string(cache.tail.shape[5]) + " (the tail width must be >= 1)");
  }
  if (expect.head_size != kAnyDim && cache.head_size() != expect.head_size) {
    if (cache.tail.data != nullptr)
      return fail(blocks + ".shape[5] + " + tail + ".shape[5]",
                  "=" + std::to_string(cache.quantized_size()) + " + " + std::to_string(cache.tail_size()) +
                      " (head_size must be " + std::to_string(expect.head_size) + ")");
    return fail(blocks + ".shape[5]", "=" + std::to_string(cache.head_size()) + " (head_size must be " +
                                          std::to_string(expect.head_size) + ")");
  }
  if (static_cast<std::int64_t>(expect.layer_idx) >= cache.num_layers())
    return fail("layer_idx", "=" + std::to_string(expect.layer_idx) + " (must be < num_layers=" +
                                 std::to_string(cache.num_layers()) + ")");
  const std::string scales = f + ".scales";
  if (expect.scales) {
    if (cache.quant_granularity < expect.min_granularity || cache.quant_granularity < 1)
      return fail(f + ".quant_granularity", "=" + std::to_string(cache.quant_granularity) + " (must be >= " +
                                                std::to_string(expect.min_granularity > 0 ? expect.min_granularity : 1) + ")");
    if (cache.tail.data != nullptr && cache.quantized_size() % cache.quant_granularity != 0)
      return fail(f + ".quant_granularity", "=" + std::to_string(cache.quant_granularity) +
                                                " (must divide the quantized part of a split row, " + blocks +
                                                ".shape[5]=" + std::to_string(cache.quantized_size()) + ")");
    const std::int64_t per_row = (cache.quantized_size() + cache.quant_granularity - 1) / cache.quant_granularity;
    const std::initializer_list<DType> f32_only = {DType::f32}, f32_or_e8m0 = {DType::f32, DType::e8m0};
    if (!tensor(scales.c_str(), cache.scales, expect.e8m0_scales ? f32_or_e8m0 : f32_only,
                {cache.num_blocks(), cache.kv_dim(), cache.num_layers(), cache.page_size(), cache.num_kv_heads(), per_row},
                Layout::rows, expect.written))
      return false;
  } else if (cache.scales.data != nullptr) {
    return fail(scales, " is present (this cache type takes no scales)");
  }
  const std::string lut = f + ".lookup_table";
  if (!tensor(lut.c_str(), cache.lookup_table, {DType::u32}, {batch, kAnyDim})) return false;
  if (checks_.metadata && cache.lookup_table.memory != MemorySpace::host)
    return fail(lut, " is in device memory (page tables must be readable on the host here)");
  if (expect.need_cache_lengths) {
    const std::string lens = f + ".cache_lengths";
    if (!tensor(lens.c_str(), cache.cache_lengths, {DType::u32}, {batch})) return false;
    if (checks_.metadata && cache.cache_lengths.memory != MemorySpace::host)
      return fail(lens, " is in device memory (lengths must be readable on the host here)");
  }
  return true;
}

bool Validator::pages_exist(const char* field, const PagedKVCacheView& cache, std::int64_t b, std::int64_t first,
                            std::int64_t last) {
  if (!ok()) return false;
  if (last <= first || !checks_.metadata) return true;
  const std::int64_t ps = cache.page_size();
  const std::int64_t max_pages = cache.lookup_table.shape[1];
  const auto* lut = static_cast<const std::uint32_t*>(cache.lookup_table.data);
  for (std::int64_t page = first / ps; page <= (last - 1) / ps; ++page) {
    const std::int64_t pos = page == first / ps ? first : page * ps;
    if (page >= max_pages)
      return fail(std::string(field) + ".lookup_table", ".shape[1]=" + std::to_string(max_pages) + " too small: sequence " +
                                                           std::to_string(b) + " position " + std::to_string(pos) +
                                                           " needs page column " + std::to_string(page));
    const std::uint32_t blk = lut[b * max_pages + page];
    if (static_cast<std::int64_t>(blk) >= cache.num_blocks())
      return fail(std::string(field) + ".lookup_table[" + std::to_string(b) + ", " + std::to_string(page) + "]",
                  "=" + std::to_string(blk) + " (must be < num_blocks=" + std::to_string(cache.num_blocks()) +
                      ": position " + std::to_string(pos) + " of sequence " + std::to_string(b) + " needs a page)");
  }
  return true;
}

bool Validator::no_overlap(const char* field_a, const TensorView& a, const char* field_b, const TensorView& b) {
  if (!ok()) return false;
  if (a.data == nullptr || b.data == nullptr || a.memory != b.memory) return true;
  const auto* a0 = static_cast<const unsigned char*>(a.data);
  const auto* b0 = static_cast<const unsigned char*>(b.data);
  const auto* a1 = a0 + a.span_bytes();
  const auto* b1 = b0 + b.span_bytes();
  if (a0 < b1 && b0 < a1 && a.span_bytes() > 0 && b.span_bytes() > 0)
    return fail(field_a, " overlaps " + std::string(field_b) + " in memory (they must be distinct buffers)");
  return true;
}

bool Validator::written_apart(std::span<const NamedView> written, std::span<const NamedView> read) {
  for (auto w = written.begin(); w != written.end(); ++w) {
    for (const auto& [field, view] : read)
      if (!no_overlap(w->first, *w->second, field, *view)) return false;
    for (auto e = written.begin(); e != w; ++e)
      if (!no_overlap(w->first, *w->second, e->first, *e->second)) return false;
  }
  return ok();
}

bool Validator::same_memory(std::initializer_list<NamedView> views, MemorySpace* space) {
  return same_memory(std::span<const NamedView>(views.begin(), views.size()), {}, space);
}

bool Validator::same_memory(std::span<const NamedView> first_list, std::span<const NamedView> then,
                            MemorySpace* space) {
  if (!ok()) return false;
  const char* first_field = nullptr;
  MemorySpace first = MemorySpace::host;
  for (const auto list : {first_list, then}) {
    for (const auto& [field, view] : list) {
      if (view->data == nullptr) continue;
      if (first_field == nullptr) {
        first_field = field;
        first = view->memory;
      } else if (view->memory != first) {
        return fail(field, std::string(" is in ") + (view->memory == MemorySpace::host ? "host" : "device") +
                               " memory but " + first_field + " is in " +
                               (first == MemorySpace::host ? "host" : "device") + " memory (one call uses one)");
      }
    }
  }
  if (space) *space = first;
  return true;
}

}  // namespace mlakit::core
