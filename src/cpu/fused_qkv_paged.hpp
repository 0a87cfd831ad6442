// cpu back-end of fused_qkv_paged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/common/parallel.hpp"
#include "mlakit/dtype.hpp"
#include "mlakit/ops/fused_qkv_paged.hpp"

namespace mlakit::simd {
struct GemmKernels;
}

namespace mlakit::detail {

// What pack_weights made: the weights it was made from (checked by every call that names it), the
// kernels and route it serves, and the layout.
struct FusedQkvPackedState {
  enum class Kind { none, tiles, panels };
  FusedQkvPagedDesc desc;
  DType activations = DType::bf16;
  std::int64_t N = 0, K = 0;
  // The data pointers of weight, weight_scale, qweight, scales, qzeros, g_idx (null when absent).
  const void* tensors[6] = {};
  DType scales_dtype = DType::f16;  // GPTQ scales
  Kind kind = Kind::none;
  const simd::GemmKernels* kernels = nullptr;  // the table whose kernels laid it out and read it
  // tiles: strip s of 16 columns at s * stride elements (bf16); panels: panel q of panel_cols
  // columns at q * stride floats, chunk k0 at + k0 * panel_cols.
  std::size_t stride = 0;
  std::shared_ptr<void> data;
  // GPTQ: the codes, K/8 rows of codes_ldw words (qweight's layout, each row padded past N so that
  // rows do not lie a multiple of 4 KiB apart), read by every call that names the pack, whatever
  // its route or level; with an act-order map of whole groups, K's channels in group order
  // (k_order) and the codes regrouped in that order. Empty / null where there are none (other
  // formats, maps of uneven groups).
  std::vector<std::uint32_t> k_order;
  std::shared_ptr<const std::uint32_t> codes;
  std::size_t codes_ldw = 0;
  // With the codes, where the packing level's kernels have them (kernels->int4_row_tables): the
  // decode row's tables of every block of columns and group, blocks row_tables_ld bytes apart,
  // read by calls at that level.
  std::shared_ptr<const std::uint8_t> row_tables;
  std::size_t row_tables_ld = 0;
  // With the codes, where the packing level's kernels have them (kernels->int4_row_codes): the
  // codes again, laid out for that level's decode row and expansion, read by calls at that level:
  // per chunk of K that the calls take (kGptqChunk k, the last one shorter), the chunk's
  // int4_row_codes of every block of columns side by side, each block's steps one stream.
  std::shared_ptr<const std::uint8_t> row_codes;
  std::size_t bytes = 0;  // data, codes, row_tables and row_codes
  std::string layout;
};

struct FusedQkvPackedAccess {
  static void set(FusedQkvPackedWeights* w, std::shared_ptr<const FusedQkvPackedState> s) { w->state_ = std::move(s); }
};

}  // namespace mlakit::detail

namespace mlakit::cpu {

// Assumes a validated call; runs every one.
Status fused_qkv_paged(const FusedQkvPagedDesc& desc, const FusedQkvPagedArgs& args);
// The call buffers it takes (the library GEMM's f32 operands, the panel and tile GEMMs' shared
// layouts, act-order GPTQ's activations in group order).
CallBufferSizes fused_qkv_paged_call_buffers(const FusedQkvPagedDesc& desc, const FusedQkvPagedArgs& args);
// The panel route's bound on a call's packed activations, in bytes (larger calls run in blocks of
// rows within it); tests lower it to reach several blocks with small shapes.
std::size_t panel_packed_activations_bound();
void set_panel_packed_activations_bound(std::size_t bytes);
// Lays out validated weights (pack_weights) for the kernels in force, with out's K and N (set by
// the caller, as its desc, activations and tensors); fills the rest. prefill_layout: false keeps
// only GPTQ's codes (FusedQkvPackOptions).
Status pack_fused_qkv_weights(const FusedQkvPagedDesc& desc, const FusedQkvPagedArgs& weights, bool prefill_layout,
                              mlakit::detail::FusedQkvPackedState* out);

}  // namespace mlakit::cpu
