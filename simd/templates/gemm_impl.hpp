// The gemm kernel table of one level (simd/gemm.hpp GemmKernels), compiled per level by
// simd/<level>/gemm.cpp: the dot tiles and their driver, the int4 columns, the attention rows and
// the panel GEMM.
#pragma once

#include "simd/gemm.hpp"
#include "simd/templates/attention_rows_impl.hpp"
#include "simd/templates/dot_tiles_impl.hpp"
#include "simd/templates/int4_columns_impl.hpp"
#include "simd/templates/panel_gemm_impl.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

constexpr GemmKernels make_gemm_kernels() {
  return GemmKernels{kLevelName,
                     static_cast<unsigned>(kMr),
                     static_cast<unsigned>(kNr),
                     kHasBf16Dot,
                     &gemm<float, float>,
                     &gemm<std::uint16_t, std::uint16_t>,
                     &gemm<std::uint8_t, std::uint8_t>,
                     &gemm<float, std::uint8_t>,
                     &gemm<std::uint16_t, std::uint8_t>,
                     &gemm_int4<std::uint16_t>,
                     &gemm_int4<float>,
                     &int4_tables,
#if defined(__AVX512BW__) || defined(__AVX2__)
                     &gemm_int4_row<std::uint16_t>,
                     &gemm_int4_row<float>,
#else
                     nullptr,
                     nullptr,
#endif
                     &gemm_nn<float, float>,
                     &gemm_nn<float, std::uint16_t>,
                     &round_bf16,
                     &split_bf16x3,
                     &gemm_nn_scaled<float>,
                     &transpose_bf16,
                     &transpose_f32,
                     &widen_bf16,
                     &scale_max,
                     &exp_sum,
                     &mask_select,
                     &scale_round_bf16,
#if defined(MLAKIT_SIMD_HAS_BF16_DOT)
                     &gemm_nn<std::uint16_t, std::uint16_t>,
                     &zip_rows_bf16,
                     &to_bf16_scaled,
                     &gemm_nn_scaled<std::uint16_t>,
                     &pack_pairs_bf16,
                     &gemm_bf16_f8_block_scaled,
#else
                     nullptr,
                     nullptr,
                     nullptr,
                     nullptr,
                     nullptr,
                     nullptr,
#endif
                     static_cast<unsigned>(kPanelRows),
                     static_cast<unsigned>(kPanelCols),
                     &pack_panel<float>,
                     &pack_panel<std::uint16_t>,
                     &pack_panel_f8_scaled,
                     &gemm_panel,
                     &gemm_panel_scaled,
                     &pack_rows<float>,
                     &pack_rows<std::uint16_t>,
                     &gemm_panel_packed,
                     &int4_rows_f32,
                     &pack_panel_int4,
                     &int4_regroup,
#if defined(__AVX2__) && !defined(__AVX512BW__)
                     static_cast<unsigned>(int4_step::kRowCols),
                     static_cast<unsigned>(sizeof(int4_step::ByteTables)),
                     &int4_row_tables,
                     static_cast<unsigned>(int4_step::kStepBytes),
                     &int4_row_codes,
#else
                     0,
                     0,
                     nullptr,
                     0,
                     nullptr,
#endif
                     0,
                     0,
                     0,
                     nullptr,
                     nullptr,
                     nullptr};
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
