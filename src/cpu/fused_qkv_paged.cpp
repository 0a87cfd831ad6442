// cpu back-end of fused_qkv_paged (docs/fused_qkv_paged.md).
//
// Work. Y = X·Wᵀ over the T new rows of the whole batch (rows are independent: the ragged batch
// only decides where each row lands), cut into work tiles of (kRowTile rows) x (kColTile weight
// columns), each computed start to end by one thread. Within a tile the reduction runs over K in
// chunks (all of K for dense weights, 512 for fp8 and GPTQ): per chunk a
// simd GEMM tile call (rows of X against the chunk's weight rows, both row-major along K, so W is
// used as stored) accumulates into the tile's f32 sums, which are rounded once to the dtype at the
// end and scattered to `output` or to the cache rows of their positions.
//
// Weights.
// * dense: read in place (bf16 x bf16 on the bf16 pair dot where the level has it, else widened
//   to f32 by the kernel; f32 x f32 on FMA).
// * fp8_block: with bf16 activations on the bf16 dot levels, the block-scaled kernel reads x and
//   the codes in place (decoded exactly to bf16), sums each 128-block's products in its own lanes
//   and adds them times the block's scale (one FMA per block and lane): products exact, the dot
//   at the bf16 rate. Elsewhere (f32 activations, or no bf16 dot) the scale goes with the
//   activations: x·s[n/128, k/128] is formed in f32 for the tile's rows (one scale block of N
//   per column tile) and the f32 x fp8 tiles read the codes in place; x·s rounds once (2^-24
//   relative) where the reference forms code·s, and x·s may overflow f32 where |x·s| > 3.4e38
//   although |x·code·s| need not (scales of real checkpoints are below 1). Either way a call
//   spans four scale blocks, so the horizontal reductions are paid once per 512 (one call per
//   128-block with each block's sum scaled afterwards had run at half the f32 rate).
// * gptq: per chunk, each (column, group) of the tile gets a table of its 16 values, rounded as
//   the spec does (bf16((q − z)·s), the product exact in f32), and the int4 kernels read the codes
//   in place and look them up (as bf16, or widened exactly to f32 for f32 activations): the same
//   tiles and bits as dequantizing W first. With g_idx (act-order) whose groups each hold
//   group_size channels (as GPTQ's act-order makes them), every route takes K in group order
//   (k_order: stable by group): the call's activations gathered in that order once, and each
//   chunk's codes regrouped into word rows of that order where the route reads or forms them,
//   then the grouped paths: the sums run in that order, not K's. With any other g_idx the chunk's
//   weights are formed one element at a time into a thread scratch, then used by the same tiles.
//
// Accuracy. Sums are f32: each kernel call's error is within its documented bound (at most
// (2K/lanes + K/128 + log2 lanes + 1)·2^-24·Σ|x·w|), the per-chunk additions add one rounding each
// and fp8's x·s one per product: inside the golden tolerance 4·K·2^-24·Σ|x·w| for every level
// (lanes >= 4). NaN weights or activations propagate.
//
// Determinism. Tiles depend only on T and N, chunks only on K; each output element is computed by
// one thread in one fixed order: outputs are bitwise identical for 1, 2 or N threads, and a row
// gets the same bits in a decode call as in a prefill call.
//
// The tile GEMM. On the amx level, bf16 prefills of at least kTilesMinRows rows run on AMX tiles
// (simd/gemm.hpp, "Tile GEMM"): the weights of a group of column tiles packed once per call into
// the tile unit's pair layout (fp8 codes decoded exactly, their block scales applied on the tile
// sums; GPTQ formed as bf16 rows as below), then work tiles of 256 x 256 with k in calls of 1024.
// Each output is one fixed chain of tile steps: thread-count independent, and a decode row on the
// route gets its prefill bits. Within the same bound.
//
// The panel GEMM. Where the bf16 dot is not used (levels without it, and Intel CPUs, whose
// vdpbf16ps is slower than their f32 FMA: cpu/common/bf16_dot.hpp), and for f32 activations, a prefill
// of at least panel_min_rows rows (per weight format) runs on the panel GEMM (simd/gemm.hpp):
// work tiles of 256 rows x 256 columns, K in chunks of 256; the activations are widened into the
// register tiles' packed row groups before the tiles start, in blocks of rows whose packed rows stay
// within half of the last-level cache (once per tile and chunk where one column tile covers N), and each
// panel of weight columns (dense rows widened as they are packed, fp8 as code·scale rounded once
// to f32, GPTQ expanded from its value tables, in group order or element by element as above) is formed once
// per tile in a call of one row tile, or once per block into a buffer shared by the block's row
// tiles; then outer-product register tiles run
// one FMA chain per output over K in order. Its sums do not depend on the tile, the thread count
// or the other rows of the call: a decode row gets its prefill bits on it too. Within the same
// bound as above.
//
// Packed weights (pack_weights). A caller's pack holds, over all N and K, what the tile route's
// groups or the panel route's column tiles form in a call (the same code forms it): a call on the
// route and level it was made for reads its strips or panels instead, with no packing and no
// waiting between column tiles; the work tiles and their arithmetic are the ones above, so the
// bits are those of the call without it. Every other call reads the weight tensors.
//
// The library GEMM. The BLAS library's sgemm (cpu/common/library_gemm.hpp), from one row with
// MLAKIT_LIBRARY_GEMM=on, or from kLibraryMinRows with the panel GEMM off: the
// activations are widened to f32 once per call, the weights in groups of kLibraryGroup columns
// (dense widened, fp8 as code·scale rounded once to f32, GPTQ as the spec's bf16 values), then
// fixed tiles each one single-threaded sgemm, then the same rounding and scatter. Its sums are f32
// over K in one order (within the same bound) and do not depend on the thread count either.
#include "cpu/fused_qkv_paged.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "cpu/common/bf16_dot.hpp"
#include "cpu/common/kernels.hpp"
#include "cpu/common/library_gemm.hpp"
#include "cpu/common/panel_gemm.hpp"
#include "cpu/common/parallel.hpp"
#include "cpu/common/tile_gemm.hpp"
#include "mlakit/dtype.hpp"

namespace mlakit::cpu {
namespace {

// K per kernel call. Each call ends with a horizontal reduction of its register tile, so calls
// should be long; fp8 and GPTQ calls read an operand prepared per chunk (activations times scales,
// value tables) that should stay in L2. Dense weights need nothing prepared: one call over K.
constexpr std::size_t kFp8Block = 128;  // the spec's scale block, on both axes
constexpr std::size_t kFp8Chunk = 512;  // a multiple of kFp8Block
constexpr std::size_t kGptqChunk = 512;

std::size_t chunk_of(WeightFormat f, std::size_t K) {
  return std::min(f == WeightFormat::fp8_block ? kFp8Chunk : f == WeightFormat::gptq ? kGptqChunk : K, K);
}
// Rows of X per work tile: every work tile reads its 128 weight rows once per block of its rows
// (the GEMM driver keeps a block within half of L2), so taller tiles read W fewer times; 128 rows
// of a 4096-wide bf16 activation are two such blocks. Measured against 64 and 96: Llama-3-8B dense
// T=512 37 -> 34 ms (bench/RESULTS.md).
constexpr std::size_t kRowTile = 128;
constexpr std::size_t kColTile = kFp8Block;  // weight columns per work tile: one fp8 scale block of N

// Output columns of the projection: q_dim, then every cache row's K (and V) heads.
std::size_t output_columns(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a) {
  const PagedKVCacheView& kc = a.kv_cache;
  return static_cast<std::size_t>(d.q_dim + kc.kv_dim() * kc.num_kv_heads() * kc.head_size());
}

struct Plan {
  const FusedQkvPagedDesc* d;
  const FusedQkvPagedArgs* a;
  const simd::GemmKernels* g;
  bool f32;  // activations (and cache, output, dense weight) are f32
  std::size_t T, K, N;
  std::vector<std::int64_t> row_block, row_slot;  // cache block and page offset of each row
  const mlakit::detail::FusedQkvPackedState* pack = nullptr;  // the caller's packed weights, for this call's route
  // GPTQ with a g_idx of group_size channels per group: K's channels by group, in K's order
  // within a group (null otherwise; the pack's, or own_order). Every route then takes K in it.
  const std::uint32_t* k_order = nullptr;
  std::vector<std::uint32_t> own_order;
  // GPTQ codes from the caller's pack (qweight's layout, rows codes_ldw words apart; with a
  // k_order, in that order), or null: qweight read in place, or with a k_order regrouped where
  // they are read.
  const std::uint32_t* codes = nullptr;
  std::size_t codes_ldw = 0;
  // GPTQ decode rows' tables from the caller's pack, made by this level's kernels (gptq_groups),
  // or null.
  const std::uint8_t* row_tables = nullptr;
  std::size_t row_tables_ld = 0;
  // GPTQ codes laid out for this level's decode rows and expansions (int4_row_codes) from the
  // caller's pack (as FusedQkvPackedState::row_codes), or null.
  const std::uint8_t* row_codes = nullptr;
  // The activations the routes read (T x K): hidden_state, or with a k_order its rows gathered
  // in that order.
  const void* x = nullptr;
  const std::uint16_t* xb() const { return static_cast<const std::uint16_t*>(x); }
  const float* xf() const { return static_cast<const float*>(x); }
};

// The channels of K sorted by their group (stable), when g_idx gives every group group_size
// channels; else empty. (The validator has checked each entry lies in [0, K / group_size).)
std::vector<std::uint32_t> group_order(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, std::size_t K) {
  const auto gs = static_cast<std::size_t>(d.group_size);
  const auto* gi = static_cast<const std::int32_t*>(a.g_idx.data);
  std::vector<std::uint32_t> start(K / gs + 1, 0);
  for (std::size_t k = 0; k < K; ++k) ++start[static_cast<std::size_t>(gi[k]) + 1];
  for (std::size_t g = 0; g < K / gs; ++g) {
    if (start[g + 1] != gs) return {};
    start[g + 1] += start[g];
  }
  std::vector<std::uint32_t> order(K);
  for (std::size_t k = 0; k < K; ++k) order[start[static_cast<std::size_t>(gi[k])]++] = static_cast<std::uint32_t>(k);
  return order;
}

// Word rows of the group order's chunk [k0, k0 + kn) for columns [c0, c0 + n): nibble j of row r
// holds the code of channel k_order[k0 + 8 r + j], rows ldo words apart.
void grouped_words(const Plan& p, std::size_t c0, std::size_t n, std::size_t k0, std::size_t kn, std::uint32_t* out,
                   std::size_t ldo) {
  p.g->int4_regroup(static_cast<const std::uint32_t*>(p.a->qweight.data) + c0, p.N, p.k_order + k0, kn / 8, n, out, ldo);
}

// `len` sums of a row to their destination, rounded once to the dtype.
void store_run(const float* v, std::size_t len, bool f32, void* base, std::int64_t at) {
  if (f32) {
    std::memcpy(static_cast<float*>(base) + at, v, len * sizeof(float));
  } else {
    std::uint16_t* dst = static_cast<std::uint16_t*>(base) + at;
    for (std::size_t i = 0; i < len; ++i) dst[i] = f32_to_bf16(v[i]);
  }
}

// Row t's destinations: column c < q_dim -> output; else the cache row of its position, one run
// per head (a head's columns are contiguous in the cache).
void store_tile(const Plan& p, std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1, const float* acc) {
  const FusedQkvPagedArgs& a = *p.a;
  const PagedKVCacheView& kc = a.kv_cache;
  const std::size_t q_dim = static_cast<std::size_t>(p.d->q_dim), hd = static_cast<std::size_t>(kc.head_size());
  const std::size_t hkv = static_cast<std::size_t>(kc.num_kv_heads());
  const std::size_t cols = c1 - c0;
  for (std::size_t t = r0; t < r1; ++t) {
    const float* row = acc + (t - r0) * cols;
    std::size_t c = c0;
    if (c < q_dim) {
      const std::size_t len = std::min(c1, q_dim) - c;
      store_run(row, len, p.f32, a.output.data, static_cast<std::int64_t>(t * q_dim + c));
      c += len;
    }
    while (c < c1) {
      const std::size_t j = c - q_dim;  // MLA: kv = 0, h = 0, e = j
      const std::size_t kv = j / (hkv * hd), h = (j / hd) % hkv, e = j % hd;
      const std::size_t len = std::min(c1 - c, hd - e);
      const std::int64_t at = kc.row_offset(p.row_block[t], static_cast<std::int64_t>(kv), a.layer_idx, p.row_slot[t],
                                            static_cast<std::int64_t>(h)) +
                              static_cast<std::int64_t>(e);
      store_run(row + (c - c0), len, p.f32, kc.blocks.data, at);
      c += len;
    }
  }
}

std::uint32_t nibble(std::uint32_t word, std::size_t i) { return (word >> (4 * i)) & 0xFu; }

// bf16((q − z)·s) for a column's zero point z and scale bits of one group: the spec's rounding.
// (q − z) has 5 significant bits and s at most 11: the f32 product is exact.
struct GptqColumn {
  const FusedQkvPagedDesc& d;
  const FusedQkvPagedArgs& a;
  std::size_t N;

  float scale(std::size_t g, std::size_t c) const {
    const std::uint16_t bits = static_cast<const std::uint16_t*>(a.scales.data)[g * N + c];
    return a.scales.dtype == DType::f16 ? f16_to_f32(bits) : bf16_to_f32(bits);
  }
  std::int32_t zero(std::size_t g, std::size_t c) const {
    if (!d.has_zp) return 8;
    return static_cast<std::int32_t>(nibble(static_cast<const std::uint32_t*>(a.qzeros.data)[g * (N / 8) + c / 8], c % 8)) +
           zero_bias(d);
  }
  std::uint16_t value(std::uint32_t q, std::size_t g, std::size_t c) const {
    return f32_to_bf16(static_cast<float>(static_cast<std::int32_t>(q) - zero(g, c)) * scale(g, c));
  }
};

// GPTQ with g_idx (act-order): columns [c0, c1) of W for k in [k0, k0 + kn) as bf16 rows (one
// per column) of `kn` elements, each element formed on its own (its group is g_idx[k]).
void dequantize_gptq_act_order(const Plan& p, std::size_t c0, std::size_t c1, std::size_t k0, std::size_t kn,
                               std::uint16_t* w) {
  const FusedQkvPagedArgs& a = *p.a;
  const auto* qw = static_cast<const std::uint32_t*>(a.qweight.data);
  const auto* gi = static_cast<const std::int32_t*>(a.g_idx.data);
  const GptqColumn col{*p.d, a, p.N};
  for (std::size_t k = k0; k < k0 + kn; ++k) {
    const std::size_t g = static_cast<std::size_t>(gi[k]);
    const std::uint32_t* qrow = qw + (k / 8) * p.N;
    for (std::size_t c = c0; c < c1; ++c) w[(c - c0) * kn + (k - k0)] = col.value(nibble(qrow[c], k % 8), g, c);
  }
}

// GPTQ without g_idx: the value tables of columns [c0, c1) for the groups of k in [k0, k0 + kn)
// (group_size divides the chunk, so the chunk holds whole groups), laid out as the int4 kernels
// read them: tables[((c - c0) * groups + g) * 16 + q].
void gptq_tables(const Plan& p, std::size_t c0, std::size_t c1, std::size_t k0, std::size_t kn, float* tables) {
  const FusedQkvPagedArgs& a = *p.a;
  const std::size_t N = p.N, gs = static_cast<std::size_t>(p.d->group_size), groups = (kn + gs - 1) / gs;
  const auto* scales = static_cast<const std::uint16_t*>(a.scales.data);
  const auto* zeros = static_cast<const std::uint32_t*>(a.qzeros.data);
  for (std::size_t g = 0; g < groups; ++g) {
    const std::size_t gk = k0 / gs + g;
    p.g->int4_tables(scales + gk * N + c0, a.scales.dtype == DType::f16, p.d->has_zp ? zeros + gk * (N / 8) + c0 / 8 : nullptr,
                     zero_bias(*p.d), c1 - c0, tables + g * 16, groups * 16);
  }
}

// GPTQ without g_idx (or in its group order): the group parameters of columns from c0 (a multiple
// of 8) for the groups from k0's, as the int4 decode row reads them in place, and the row's tables
// where the call's pack holds them.
simd::Int4Groups gptq_groups(const Plan& p, std::size_t c0, std::size_t k0) {
  const FusedQkvPagedArgs& a = *p.a;
  const std::size_t N = p.N, gk = k0 / static_cast<std::size_t>(p.d->group_size);
  simd::Int4Groups q{static_cast<const std::uint16_t*>(a.scales.data) + gk * N + c0, N,
                     a.scales.dtype == DType::f16,
                     p.d->has_zp ? static_cast<const std::uint32_t*>(a.qzeros.data) + gk * (N / 8) + c0 / 8 : nullptr,
                     N / 8, zero_bias(*p.d)};
  if (p.row_tables != nullptr) {
    q.row_tables = p.row_tables + c0 / p.g->int4_row_table_cols * p.row_tables_ld + gk * p.g->int4_row_table_bytes;
    q.ldt = p.row_tables_ld;
  }
  return q;
}

// GPTQ codes of columns [c0, c0 + n) for the chunk [k0, k0 + kn) of the call's K order, their
// values looked up in `tables` (gptq_tables of the same columns and chunk; null for the decode
// row): read in place (the pack's copy, or qweight without a k_order), or with a k_order and no
// pack regrouped into a thread scratch (slot 6).
simd::Int4Columns gptq_codes(const Plan& p, std::size_t c0, std::size_t n, std::size_t k0, std::size_t kn,
                             const float* tables) {
  const auto gs = static_cast<std::size_t>(p.d->group_size);
  if (p.codes != nullptr) {
    simd::Int4Columns w{p.codes + (k0 / 8) * p.codes_ldw + c0, p.codes_ldw, tables, gs};
    // The laid-out codes, where a route reads a whole chunk of K and whole blocks: the pack lays
    // them out chunk by chunk (FusedQkvPackedState::row_codes).
    const std::size_t cols = p.g->int4_row_table_cols, chunk = chunk_of(WeightFormat::gptq, p.K);
    if (p.row_codes != nullptr && c0 % cols == 0 && k0 % chunk == 0 && kn == std::min(chunk, p.K - k0)) {
      const std::size_t steps = p.g->int4_row_code_bytes;
      w.row_codes = p.row_codes + p.N / cols * (k0 / 16) * steps + c0 / cols * ((kn + 15) / 16 * steps);
      w.ldr = (kn + 15) / 16 * steps;
    }
    return w;
  }
  if (p.k_order == nullptr)
    return simd::Int4Columns{static_cast<const std::uint32_t*>(p.a->qweight.data) + (k0 / 8) * p.N + c0, p.N, tables, gs};
  auto* words = static_cast<std::uint32_t*>(thread_scratch(n * (kn / 8) * sizeof(std::uint32_t), 6));
  grouped_words(p, c0, n, k0, kn, words, n);
  return simd::Int4Columns{words, n, tables, gs};
}

// GPTQ with a g_idx whose groups cannot be taken in group order: each element formed on its own.
bool per_element(const Plan& p) {
  return p.d->weight_format == WeightFormat::gptq && p.a->g_idx.data != nullptr && p.k_order == nullptr;
}

void run_tile(const Plan& p, std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) {
  const FusedQkvPagedArgs& a = *p.a;
  const simd::GemmKernels& g = *p.g;
  const std::size_t m = r1 - r0, n = c1 - c0, K = p.K;
  const WeightFormat fmt = p.d->weight_format;
  const std::size_t acc_floats = m * n;
  const std::size_t chunk = chunk_of(fmt, K);
  auto* acc = static_cast<float*>(thread_scratch(acc_floats * sizeof(float), 0));
  // GPTQ: the chunk's value tables (16 per column and group), or with g_idx its dequantized
  // weights (bf16).
  // With a g_idx in groups (k_order), K in group order: the call's activations gathered (p.x),
  // the codes regrouped per chunk (or the pack's, regrouped once), then the paths without g_idx.
  const bool act_order = per_element(p);
  const std::size_t gs = fmt == WeightFormat::gptq ? static_cast<std::size_t>(p.d->group_size) : 1;
  auto* tables = static_cast<float*>(
      thread_scratch(fmt == WeightFormat::gptq && !act_order ? n * (chunk / gs) * 16 * sizeof(float) : 0, 1));
  auto* wq = static_cast<std::uint16_t*>(thread_scratch(act_order ? n * chunk * sizeof(std::uint16_t) : 0, 3));
  // The f32 operand of the f32 tile where the data is not used as stored: the chunk's activations
  // times their weight scales (fp8) or its dequantized weights (GPTQ with g_idx, f32 activations).
  const bool fp8_widened = fmt == WeightFormat::fp8_block && (p.f32 || !g.bf16_f8_block_scaled);
  const std::size_t widened_floats = fp8_widened ? m * chunk : act_order && p.f32 ? n * chunk : 0;
  auto* widened = static_cast<float*>(thread_scratch(widened_floats * sizeof(float), 2));

  const std::uint16_t* xb = p.xb() + r0 * K;
  const float* xf = p.xf() + r0 * K;
  const std::size_t kb_count = (K + chunk - 1) / chunk;
  const std::size_t fp8_blocks = (K + kFp8Block - 1) / kFp8Block;  // scale blocks along K
  for (std::size_t kb = 0; kb < kb_count; ++kb) {
    const std::size_t k0 = kb * chunk, kn = std::min(chunk, K - k0);
    const bool first = kb == 0;
    switch (fmt) {
      case WeightFormat::dense:
        if (p.f32)
          g.f32_f32(m, n, kn, xf + k0, K, static_cast<const float*>(a.weight.data) + c0 * K + k0, K, acc, n, !first);
        else
          g.bf16_bf16(m, n, kn, xb + k0, K, static_cast<const std::uint16_t*>(a.weight.data) + c0 * K + k0, K, acc, n,
                      !first);
        break;
      case WeightFormat::fp8_block: {
        const float* s = static_cast<const float*>(a.weight_scale.data) + (c0 / kColTile) * fp8_blocks + k0 / kFp8Block;
        const auto* w = static_cast<const std::uint8_t*>(a.weight.data) + c0 * K + k0;
        if (!p.f32 && g.bf16_f8_block_scaled) {
          g.bf16_f8_block_scaled(m, n, kn, xb + k0, K, w, K, s, kFp8Block, acc, n, !first);
          break;
        }
        // x·s formed per element, so the scale rides with the activations and one call covers
        // several scale blocks (the kernel's horizontal reductions are paid once per chunk).
        for (std::size_t i = 0; i < m; ++i)
          for (std::size_t b0 = 0; b0 < kn; b0 += kFp8Block) {
            const std::size_t bn = std::min(kFp8Block, kn - b0);
            const float sb = s[b0 / kFp8Block];
            float* dst = widened + i * kn + b0;
            if (p.f32) {
              const float* x = xf + i * K + k0 + b0;
              for (std::size_t k = 0; k < bn; ++k) dst[k] = x[k] * sb;
            } else {
              const std::uint16_t* x = xb + i * K + k0 + b0;
              for (std::size_t k = 0; k < bn; ++k) dst[k] = bf16_to_f32(x[k]) * sb;
            }
          }
        g.f32_f8(m, n, kn, widened, kn, w, K, acc, n, !first);
        break;
      }
      case WeightFormat::gptq:
        if (!act_order && m == 1 && (p.f32 ? g.int4_row_f32 != nullptr : g.int4_row_bf16 != nullptr)) {
          // A decode row forms each group's tables from the scales and zero points as it reaches them.
          const simd::Int4Columns w = gptq_codes(p, c0, n, k0, kn, nullptr);
          const simd::Int4Groups q = gptq_groups(p, c0, k0);
          if (p.f32) g.int4_row_f32(n, kn, xf + k0, w, q, acc, !first);
          else g.int4_row_bf16(n, kn, xb + k0, w, q, acc, !first);
          break;
        }
        if (!act_order) {
          // Whole blocks of columns take the pack's decode tables where it holds them (the same
          // values), so the chunk's tables are formed only for a tile that ends within a block.
          const bool ahead = p.row_tables != nullptr && n % p.g->int4_row_table_cols == 0;
          if (!ahead) gptq_tables(p, c0, c1, k0, kn, tables);
          simd::Int4Columns w = gptq_codes(p, c0, n, k0, kn, ahead ? nullptr : tables);
          if (ahead) {
            const simd::Int4Groups q = gptq_groups(p, c0, k0);
            w.row_tables = q.row_tables;
            w.ldt = q.ldt;
          }
          if (p.f32) g.int4_f32(m, n, kn, xf + k0, K, w, acc, n, !first);
          else g.int4_bf16(m, n, kn, xb + k0, K, w, acc, n, !first);
          break;
        }
        dequantize_gptq_act_order(p, c0, c1, k0, kn, wq);
        if (p.f32) {
          for (std::size_t i = 0; i < n * kn; ++i) widened[i] = bf16_to_f32(wq[i]);
          g.f32_f32(m, n, kn, xf + k0, K, widened, kn, acc, n, !first);
        } else {
          g.bf16_bf16(m, n, kn, xb + k0, K, wq, kn, acc, n, !first);
        }
        break;
    }
  }
  store_tile(p, r0, r1, c0, c1, acc);
}

// ---- the library GEMM -----------------------------------------------------------------------------

// Rows from which the library GEMM takes a call in its automatic mode when the panel GEMM is off
// (MLAKIT_PANEL_GEMM=off), per weight format: where it measured faster than the own dot tiles on
// Zen 3, 2 threads (bench/RESULTS.md, "Op 5 against the library GEMM"). With the panel GEMM on,
// the library is taken only when forced (MLAKIT_LIBRARY_GEMM=on): the panel GEMM with its shared
// panels measured level with it from 512 rows and ahead below ("Op 5 on the panel GEMM").
constexpr std::size_t kLibraryMinRows[] = {/*dense*/ 128, /*fp8_block*/ 512, /*gptq*/ 384};
// The library's sgemm runs single-threaded on fixed tiles of kLibraryRows rows x kLibraryColumns
// weight columns (multiples of the fp8 scale block), the tiles of a group of kLibraryGroup columns
// side by side once their weights are widened (2048 x 7168 f32: 56 MiB). Large tiles, because
// each sgemm packs its operands: 512 x 1024 tiles pack 2.7x less than 256 x 256 ones.
constexpr std::size_t kLibraryRows = 512;
constexpr std::size_t kLibraryColumns = 1024;
constexpr std::size_t kLibraryGroup = 2048;
// Call-buffer slots: the library path's operands and tables, the panel path's shared panels and
// packed activations, the tile path's strips.
enum CallSlot { kSlotX, kSlotW, kSlotTables, kSlotPanels, kSlotTiles, kSlotRows, kSlotGathered };

bool library_path(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, const simd::GemmKernels& g) {
  const auto T = static_cast<std::size_t>(a.hidden_state.shape[0]), K = static_cast<std::size_t>(a.hidden_state.shape[1]);
  const std::size_t N = output_columns(d, a);
  // Where the bf16 dot is used, bf16 operands stay on the own pair-dot tiles.
  if (bf16_dot::use(g) && a.hidden_state.dtype == DType::bf16) return false;
  if (T > INT_MAX || K > INT_MAX || N > INT_MAX) return false;
  return library_gemm::use_for(T, kLibraryMinRows[static_cast<int>(d.weight_format)]);
}

// The library path's call buffers, in floats (0: not needed): X widened to f32 for `rows` rows at a
// time (the rows within the workspace budget), a group of widened weights, GPTQ's value tables of
// a group. One derivation for the run and for a plan's workspace.
struct LibraryBuffers {
  std::size_t rows = 0, x = 0, w = 0, tables = 0, groups = 1;
};

LibraryBuffers library_buffers(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a) {
  const auto T = static_cast<std::size_t>(a.hidden_state.shape[0]), K = static_cast<std::size_t>(a.hidden_state.shape[1]);
  const bool f32 = a.hidden_state.dtype == DType::f32;
  LibraryBuffers b;
  b.rows = items_within_budget(K * sizeof(float), T, 1);
  if (!f32) b.x = b.rows * K;
  if (!(d.weight_format == WeightFormat::dense && f32)) b.w = kLibraryGroup * K;
  if (d.weight_format == WeightFormat::gptq) {  // with a g_idx too: the call may take K in group order
    const auto gs = static_cast<std::size_t>(d.group_size);
    b.groups = (K + gs - 1) / gs;
    b.tables = kLibraryGroup * b.groups * 16;
  }
  return b;
}

// Weight rows [c0, c1) as f32 rows of K (w[(c - c0) * K + k]): the values the reference multiplies.
void weight_rows_f32(const Plan& p, std::size_t c0, std::size_t c1, float* w, const float* tables) {
  const FusedQkvPagedArgs& a = *p.a;
  const std::size_t K = p.K, N = p.N;
  switch (p.d->weight_format) {
    case WeightFormat::dense: {  // bf16 (f32 weights are used as stored)
      const auto* src = static_cast<const std::uint16_t*>(a.weight.data);
      for (std::size_t c = c0; c < c1; ++c)
        for (std::size_t k = 0; k < K; ++k) w[(c - c0) * K + k] = bf16_to_f32(src[c * K + k]);
      break;
    }
    case WeightFormat::fp8_block: {
      const auto* codes = static_cast<const std::uint8_t*>(a.weight.data);
      const auto* scales = static_cast<const float*>(a.weight_scale.data);
      const std::size_t kblocks = (K + kFp8Block - 1) / kFp8Block;
      const simd::Fp8DecodeKernels& dec = fp8_decode_kernels();
      for (std::size_t c = c0; c < c1; ++c) {
        float* row = w + (c - c0) * K;
        dec.to_f32(codes + c * K, row, K);
        const float* s = scales + (c / kFp8Block) * kblocks;
        for (std::size_t k = 0; k < K; ++k) row[k] *= s[k / kFp8Block];
      }
      break;
    }
    case WeightFormat::gptq: {
      const auto* qw = static_cast<const std::uint32_t*>(a.qweight.data);
      if (per_element(p)) {  // act-order: each element's group from g_idx
        const auto* gi = static_cast<const std::int32_t*>(a.g_idx.data);
        const GptqColumn col{*p.d, a, N};
        for (std::size_t k = 0; k < K; ++k) {
          const std::uint32_t* qrow = qw + (k / 8) * N;
          const auto grp = static_cast<std::size_t>(gi[k]);
          for (std::size_t c = c0; c < c1; ++c) w[(c - c0) * K + k] = bf16_to_f32(col.value(nibble(qrow[c], k % 8), grp, c));
        }
        break;
      }
      // tables[((c - c0) * groups + g) * 16 + q], as gptq_tables lays them out (bf16 values held as
      // f32); the codes in the call's K order (gptq_codes)
      const std::size_t gs = static_cast<std::size_t>(p.d->group_size), groups = (K + gs - 1) / gs;
      const simd::Int4Columns codes = gptq_codes(p, c0, c1 - c0, 0, K, tables);
      for (std::size_t kw = 0; kw < K / 8; ++kw) {
        const std::uint32_t* qrow = codes.words + kw * codes.ldw;
        const std::size_t grp = (kw * 8) / gs;
        for (std::size_t c = c0; c < c1; ++c) {
          const float* t = tables + ((c - c0) * groups + grp) * 16;
          const std::uint32_t word = qrow[c - c0];
          float* dst = w + (c - c0) * K + kw * 8;
          for (std::size_t i = 0; i < 8; ++i) dst[i] = t[nibble(word, i)];
        }
      }
      break;
    }
  }
}

Status run_library(Plan& p) {
  const FusedQkvPagedArgs& a = *p.a;
  const std::size_t T = p.T, K = p.K, N = p.N;
  const LibraryBuffers sizes = library_buffers(*p.d, a);
  const std::size_t rows = sizes.rows, groups = sizes.groups;
  float* x32 = sizes.x ? call_buffer_of<float>(sizes.x, kSlotX) : nullptr;
  float* wp = sizes.w ? call_buffer_of<float>(sizes.w, kSlotW) : nullptr;  // null: the f32 weight as stored
  float* tables = sizes.tables ? call_buffer_of<float>(sizes.tables, kSlotTables) : nullptr;
  constexpr std::size_t kColumnsPerTask = 16;
  const library_gemm::SingleThreaded one_thread_per_tile;
  for (std::size_t t0 = 0; t0 < T; t0 += rows) {
    const std::size_t tn = std::min(rows, T - t0);
    const float* x = p.xf() + t0 * K;
    if (x32) {
      const std::uint16_t* xb = p.xb() + t0 * K;
      parallel_for_tiles(tn, 64, [&](std::size_t r0, std::size_t r1) {
        for (std::size_t i = r0 * K; i < r1 * K; ++i) x32[i] = bf16_to_f32(xb[i]);
      });
      x = x32;
    }
    for (std::size_t g0 = 0; g0 < N; g0 += kLibraryGroup) {
      const std::size_t g1 = std::min(N, g0 + kLibraryGroup);
      const float* w = static_cast<const float*>(a.weight.data) + g0 * K;
      if (wp) {
        if (tables && !per_element(p)) gptq_tables(p, g0, g1, 0, K, tables);
        parallel_for_tiles(g1 - g0, kColumnsPerTask, [&](std::size_t j0, std::size_t j1) {
          weight_rows_f32(p, g0 + j0, g0 + j1, wp + j0 * K, tables ? tables + j0 * groups * 16 : nullptr);
        });
        w = wp;
      }
      parallel_for_tiles_2d(tn, kLibraryRows, g1 - g0, kLibraryColumns,
                            [&](std::size_t r0, std::size_t r1, std::size_t j0, std::size_t j1) {
                              const std::size_t m = r1 - r0, n = j1 - j0;
                              auto* c = static_cast<float*>(thread_scratch(m * n * sizeof(float), 0));
                              library_gemm::sgemm_nt(m, n, K, x + r0 * K, K, w + j0 * K, K, c, n);
                              store_tile(p, t0 + r0, t0 + r1, g0 + j0, g0 + j1, c);
                            });
    }
  }
  return Status::success();
}

// ---- the panel GEMM --------------------------------------------------------------------------------

// Rows from which a prefill takes the panel GEMM in its automatic mode, per weight format (dense,
// fp8_block, gptq): below, a work tile's rows are too few to pay for packing its weight panels
// against the own dot tiles, which read the weights as stored. Where the crossover lies depends on
// what those tiles run on, so one row of thresholds per kind, each measured where that kind is the
// CPU's own (2 threads, the routes paired in one process; bench/RESULTS.md):
//   8-lane f32 tiles (generic, avx2), Zen 3: at 32 rows the own tiles win (dense by 4 %; GPTQ and
//     fp8 by 1.05-1.15x against the library bar), from 64 the panel GEMM (dense 1.2x at 128; GPTQ
//     1.07-1.13x and fp8 1.03-1.13x at 64-128 against the bar, whose weights come from memory as a
//     layer's do: "Op 5's panel thresholds on avx2");
//   16-lane f32 tiles (the AVX-512 levels, and bf16 tiles' f32 activations), a Xeon: panel over own
//     at dense 16 / 32 rows 1.14 / 0.92, GPTQ 64 / 128 1.12 / 0.96, fp8 64 / 128 1.15 / 0.92;
//   the bf16 pair-dot tiles on a CPU that runs vdpbf16ps at half its f32 FMA rate (Intel's
//     avx512bf16, where bf16_dot::use declines them for the large products), a Xeon: dense 16 / 24
//     rows 1.07 / 0.88, GPTQ 24 / 32 1.17 / 0.98, fp8 32 / 48 1.02 / 0.89, and 0.63 at 128.
constexpr std::size_t kPanelMinRows[3][3] = {{64, 64, 64}, {32, 128, 128}, {24, 40, 32}};
std::size_t panel_min_rows(WeightFormat f, bool f32_activations, const simd::GemmKernels& g) {
  const int kind = !f32_activations && g.bf16_dot ? 2 : g.panel_cols >= 32 ? 1 : 0;
  return kPanelMinRows[kind][static_cast<int>(f)];
}
// Work tiles of kPanelRowTile rows x kPanelColTile weight columns (a multiple of the fp8 scale
// block), the reduction in chunks of kPanelChunk (a multiple of the fp8 block and of every GPTQ
// group size): per chunk the tile's activations are read as packed row groups (kept in L2 and
// read by every panel), and each panel of weight columns is packed once (kept in L1 and read by
// every row), so packing costs one conversion per weight per row tile against 2·kPanelRowTile
// flops.
constexpr std::size_t kPanelRowTile = 256;
constexpr std::size_t kPanelColTile = 256;
constexpr std::size_t kPanelChunk = 256;

bool panel_path(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, const simd::GemmKernels& g) {
  // Where the bf16 dot is used, bf16 operands stay on the own pair-dot tiles.
  if (bf16_dot::use(g) && a.hidden_state.dtype == DType::bf16) return false;
  const auto T = static_cast<std::size_t>(a.hidden_state.shape[0]);
  return panel_gemm::use_for(T, panel_min_rows(d.weight_format, a.hidden_state.dtype == DType::f32, g));
}

// The weight panel of columns [c, c + cols) for k in [k0, k0 + kn): panel[k * panel_cols + j].
void form_panel(const Plan& p, std::size_t c, std::size_t cols, std::size_t k0, std::size_t kn, float* panel) {
  const FusedQkvPagedArgs& a = *p.a;
  const simd::GemmKernels& g = *p.g;
  const std::size_t K = p.K, pc = g.panel_cols;
  const WeightFormat fmt = p.d->weight_format;
  switch (fmt) {
    case WeightFormat::dense:
      if (p.f32) g.pack_panel_f32(static_cast<const float*>(a.weight.data) + c * K + k0, K, cols, kn, panel);
      else g.pack_panel_bf16(static_cast<const std::uint16_t*>(a.weight.data) + c * K + k0, K, cols, kn, panel);
      return;
    case WeightFormat::fp8_block: {
      // Decoded, scaled and packed in one pass (the panel lies inside one block of columns: the
      // column tiles and panels start at multiples of the panel width, which divides the block).
      const auto* scales = static_cast<const float*>(a.weight_scale.data);
      const std::size_t kblocks = (K + kFp8Block - 1) / kFp8Block;
      g.pack_panel_f8_scaled(static_cast<const std::uint8_t*>(a.weight.data) + c * K + k0, K, cols, kn,
                             scales + (c / kFp8Block) * kblocks + k0 / kFp8Block, kFp8Block, panel);
      return;
    }
    case WeightFormat::gptq:
      if (per_element(p)) {
        auto* wq = static_cast<std::uint16_t*>(thread_scratch(pc * kn * sizeof(std::uint16_t), 5));
        dequantize_gptq_act_order(p, c, c + cols, k0, kn, wq);
        g.pack_panel_bf16(wq, kn, cols, kn, panel);
      } else {
        const std::size_t gs = static_cast<std::size_t>(p.d->group_size);
        auto* tables = static_cast<float*>(thread_scratch(pc * (kn / gs) * 16 * sizeof(float), 4));
        gptq_tables(p, c, c + cols, k0, kn, tables);
        g.pack_panel_int4(gptq_codes(p, c, cols, k0, kn, tables), cols, kn, panel);
      }
      return;
  }
}

// The activations are read again for every column tile, by then from L3: a chunk of a row is
// too short a stream for the hardware prefetcher, and the widening stalled at every row (8 % of a
// projection's time), so the next group's chunks are asked for before each group is packed.
void prefetch_row(const Plan& p, std::size_t row, std::size_t k0, std::size_t kn) {
  if (row >= p.T) return;
  const std::size_t bytes = p.f32 ? sizeof(float) : sizeof(std::uint16_t);
  const char* at = static_cast<const char*>(p.x) + (row * p.K + k0) * bytes;
  for (std::size_t b = 0; b < kn * bytes; b += 64) __builtin_prefetch(at + b);
}

// The activations of rows [r0, r1) for k in [k0, k0 + kn), widened into the register tiles'
// packed groups (gemm_panel_packed): group i / panel_rows at xs + i * kn.
void pack_activations(const Plan& p, std::size_t r0, std::size_t r1, std::size_t k0, std::size_t kn, float* xs) {
  const simd::GemmKernels& g = *p.g;
  const std::size_t m = r1 - r0, K = p.K, pr = g.panel_rows;
  for (std::size_t i = 0; i < m; i += pr) {
    const std::size_t rows = std::min(pr, m - i);
    for (std::size_t e = 0; e < rows; ++e) prefetch_row(p, r0 + i + pr + e, k0, kn);
    if (p.f32) g.pack_rows_f32(p.xf() + (r0 + i) * K + k0, K, rows, kn, xs + i * kn);
    else g.pack_rows_bf16(p.xb() + (r0 + i) * K + k0, K, rows, kn, xs + i * kn);
  }
}

// Where a row tile's activations lie once packed for the whole call: the tile from r0 at
// packed_tile_offset (every tile before it a full one), its chunk from k0 at + packed_rows(m) * k0
// inside (m the tile's rows, padded to whole row groups), laid out as pack_activations lays out a
// chunk.
std::size_t packed_rows(const Plan& p, std::size_t m) { return round_up(m, p.g->panel_rows); }
std::size_t packed_tile_offset(const Plan& p, std::size_t r0) { return r0 / kPanelRowTile * packed_rows(p, kPanelRowTile) * p.K; }

// Rows [r0, r1) x columns [c0, c1). `packed`: the columns' panels formed beforehand over all of K
// (panel q of the columns at packed + q * K * panel_cols, chunk k0 at + k0 * panel_cols), or null to
// form each panel here, once per chunk. `xs_call`: the tile's activations packed beforehand (at
// packed_tile_offset), or null to pack them here, once per chunk.
void run_panel_tile(const Plan& p, std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1, const float* packed,
                    const float* xs_call) {
  const simd::GemmKernels& g = *p.g;
  const std::size_t m = r1 - r0, n = c1 - c0, K = p.K, pc = g.panel_cols;
  const std::size_t chunk = std::min(kPanelChunk, K);
  auto* acc = static_cast<float*>(thread_scratch(m * n * sizeof(float), 0));
  // The activations in the register tiles' packed groups: every panel of the tile reads them
  // again, and a tile's broadcasts then come from one run of floats instead of panel_rows rows
  // (1.06-1.10x the kernel's rate on op 5's chunks, in isolation).
  auto* own_xs = xs_call ? nullptr : static_cast<float*>(thread_scratch(packed_rows(p, m) * chunk * sizeof(float), 1));
  auto* own = packed ? nullptr : static_cast<float*>(thread_scratch(pc * chunk * sizeof(float), 2));
  for (std::size_t k0 = 0; k0 < K; k0 += chunk) {
    const std::size_t kn = std::min(chunk, K - k0);
    const float* xs = own_xs;
    if (xs_call) xs = xs_call + packed_rows(p, m) * k0;
    else pack_activations(p, r0, r1, k0, kn, own_xs);
    for (std::size_t j0 = 0; j0 < n; j0 += pc) {
      const std::size_t cols = std::min(pc, n - j0);
      const float* panel = own;
      if (packed) panel = packed + (j0 / pc) * K * pc + k0 * pc;
      else form_panel(p, c0 + j0, cols, k0, kn, own);
      g.gemm_panel_packed(m, cols, kn, xs, panel, acc + j0, n, k0 != 0);
    }
  }
  store_tile(p, r0, r1, c0, c1, acc);
}

// Floats of one column tile's panels over all of K, for calls of more than one row tile (0: each
// tile forms its own).
std::size_t panel_group_floats(std::size_t T, std::size_t K) { return T > kPanelRowTile ? kPanelColTile * K : 0; }

// What the threads share about one column tile of the streamed panel route.
struct ColumnTileSync {
  std::atomic<std::size_t> claimed{0};     // panels claimed for forming
  std::atomic<std::size_t> formed{0};      // panels formed
  std::atomic<std::size_t> tiles_done{0};  // row tiles computed on them
};

// Bytes of the panel route's call buffer: two column tiles' panels (one formed while the other is
// read) and each column tile's sync state.
std::size_t panel_buffer_bytes(std::size_t T, std::size_t K, std::size_t N) {
  const std::size_t group = panel_group_floats(T, K);
  if (group == 0) return 0;
  return 2 * group * sizeof(float) + num_tiles(N, kPanelColTile) * sizeof(ColumnTileSync);
}

// The activations packed once and read by every column tile: with more than one column tile, every
// column tile would otherwise widen and transpose the same rows again (24 times over for
// Llama-3-8B's 6144 columns: 7 % of a dense T 512 call); packed once, the tiles read them from
// cache instead (0.94-0.95x the time of dense and GPTQ T 512 calls). Bounded: every column tile
// reads the whole buffer again, and once it outgrows a share of the last-level cache those reads
// stall the kernel by more than the widening cost (Llama-3-8B T 2048 packed whole, 34 MiB, on AMD
// Zen 3 with 32 MiB of L3: 1.035-1.045x the time of packing per tile). So a larger call runs in
// blocks of whole row tiles whose packed activations stay within the bound, each block forming
// the weight panels again: the weights are formed once per block instead of the activations once
// per column tile. The bound is half of the last-level cache the C library reports, at least 16
// MiB (Zen 3's measured bound): on a Xeon reporting 260 MiB, DeepSeek-V3's fp8 T 2048 (56 MiB
// packed) ran 0.96x the time packed whole as against in blocks of 16 MiB, dense T 2048 0.98x.
constexpr std::size_t kPackedActivationsMinBytes = std::size_t{16} << 20;
std::size_t default_packed_activations_bound() {
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::max(kPackedActivationsMinBytes, llc > 0 ? static_cast<std::size_t>(llc) / 2 : std::size_t{0});
}
std::atomic<std::size_t> packed_activations_bound{default_packed_activations_bound()};

// Rows that `rows` activation rows take once packed: every row tile padded to whole register-tile
// groups.
std::size_t packed_row_count(std::size_t rows, std::size_t panel_rows) {
  return rows / kPanelRowTile * round_up(kPanelRowTile, panel_rows) + round_up(rows % kPanelRowTile, panel_rows);
}

// Rows of a call's blocks: T in one block where the work tiles pack their own activations (one
// column tile covers N, or one row tile passes the bound).
std::size_t panel_block_rows(std::size_t T, std::size_t K, std::size_t N, std::size_t panel_rows) {
  if (N <= kPanelColTile) return T;
  const std::size_t tile_bytes = packed_row_count(kPanelRowTile, panel_rows) * K * sizeof(float);
  const std::size_t tiles = packed_activations_bound.load(std::memory_order_relaxed) / tile_bytes;
  return tiles == 0 ? T : std::min(T, tiles * kPanelRowTile);
}
std::size_t panel_block_rows(const Plan& p) { return panel_block_rows(p.T, p.K, p.N, p.g->panel_rows); }

// Floats of a block's activations packed for its work tiles (0: each work tile packs its own, a
// chunk at a time).
std::size_t packed_activation_floats(std::size_t T, std::size_t K, std::size_t N, std::size_t panel_rows) {
  if (N <= kPanelColTile) return 0;
  const std::size_t rows = packed_row_count(panel_block_rows(T, K, N, panel_rows), panel_rows);
  return rows * K * sizeof(float) <= packed_activations_bound.load(std::memory_order_relaxed) ? rows * K : 0;
}

// The activations of the block of rows [b0, b1) packed into the call's buffer (null when
// packed_activation_floats is 0), every (row tile, chunk) a task: a pass before the block's work
// tiles start. Tiles are placed by their rows from b0.
const float* pack_block_activations(const Plan& p, std::size_t b0, std::size_t b1) {
  const std::size_t floats = packed_activation_floats(p.T, p.K, p.N, p.g->panel_rows);
  if (floats == 0) return nullptr;
  float* xs = call_buffer_of<float>(floats, kSlotRows);
  parallel_for_tiles_2d(b1 - b0, kPanelRowTile, p.K, std::min(kPanelChunk, p.K),
                        [&](std::size_t r0, std::size_t r1, std::size_t k0, std::size_t k1) {
                          pack_activations(p, b0 + r0, b0 + r1, k0, k1 - k0,
                                           xs + packed_tile_offset(p, r0) + packed_rows(p, r1 - r0) * k0);
                        });
  return xs;
}

// Spins (yielding) until `counter` reaches `value`; the acquire pairs with the release of the
// thread that brought it there, so what that thread wrote before is visible.
void wait_for(const std::atomic<std::size_t>& counter, std::size_t value) {
  while (counter.load(std::memory_order_acquire) < value) std::this_thread::yield();
}

// The rows [b0, b1) of a call. A call of one row tile forms each panel in its tile (the column
// tiles give the threads work). Larger calls form each column tile's panels once per block, into a
// call buffer, and run the block's row tiles on them: the weights are dequantized once per block
// instead of once per row tile (3 times in Llama-3-8B's blocks of 768 rows). The work items
// (column tile c, row tile r) are claimed in order from one counter, with no barrier between
// column tiles: the thread that claims an item first helps form its column tile's panels
// (claimed one by one), waits until all are formed, then runs its row tile. So a thread that
// finishes early forms the next column tile's panels while the others still compute, and threads
// of unequal speed (a shared host, hybrid cores) each take as many items as they get through. Two
// buffers alternate; a column tile's panels overwrite those of two tiles before, once all of its
// row tiles are done (they were claimed earlier, so they are running). The panels and each tile's
// arithmetic are the same whoever runs them, so the bits do not change.
void run_panel_block(const Plan& p, std::size_t b0, std::size_t b1) {
  const std::size_t group = panel_group_floats(p.T, p.K);
  const float* xs = pack_block_activations(p, b0, b1);
  auto xs_of = [&](std::size_t r0) { return xs ? xs + packed_tile_offset(p, r0 - b0) : nullptr; };
  if (group == 0 || p.pack) {  // panels formed in each tile, or the caller's
    const auto* base = p.pack ? static_cast<const float*>(p.pack->data.get()) : nullptr;
    parallel_for_tiles_2d(b1 - b0, kPanelRowTile, p.N, kPanelColTile,
                          [&](std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) {
                            run_panel_tile(p, b0 + r0, b0 + r1, c0, c1,
                                           base ? base + (c0 / p.g->panel_cols) * p.pack->stride : nullptr, xs_of(b0 + r0));
                          });
    return;
  }
  const std::size_t K = p.K, pc = p.g->panel_cols, chunk = std::min(kPanelChunk, K);
  const std::size_t col_tiles = num_tiles(p.N, kPanelColTile), row_tiles = num_tiles(b1 - b0, kPanelRowTile);
  auto* buffers = static_cast<float*>(call_buffer(panel_buffer_bytes(p.T, K, p.N), kSlotPanels));
  auto* sync = reinterpret_cast<ColumnTileSync*>(buffers + 2 * group);
  for (std::size_t c = 0; c < col_tiles; ++c) new (&sync[c]) ColumnTileSync();
  std::atomic<std::size_t> next_item{0};
  parallel_workers([&] {
    for (std::size_t item; (item = next_item.fetch_add(1)) < col_tiles * row_tiles;) {
      const std::size_t c = item / row_tiles, r = item % row_tiles;
      const std::size_t c0 = c * kPanelColTile, c1 = std::min(p.N, c0 + kPanelColTile);
      const std::size_t panels = num_tiles(c1 - c0, pc);
      float* packed = buffers + (c % 2) * group;
      for (std::size_t q; (q = sync[c].claimed.fetch_add(1)) < panels;) {
        if (c >= 2) wait_for(sync[c - 2].tiles_done, row_tiles);
        for (std::size_t k0 = 0; k0 < K; k0 += chunk)
          form_panel(p, c0 + q * pc, std::min(pc, c1 - c0 - q * pc), k0, std::min(chunk, K - k0), packed + q * K * pc + k0 * pc);
        sync[c].formed.fetch_add(1, std::memory_order_release);
      }
      wait_for(sync[c].formed, panels);
      const std::size_t r0 = b0 + r * kPanelRowTile;
      run_panel_tile(p, r0, std::min(b1, r0 + kPanelRowTile), c0, c1, packed, xs_of(r0));
      sync[c].tiles_done.fetch_add(1, std::memory_order_release);
    }
  });
}

// The call's row blocks one after another (panel_block_rows): each packs its activations, then runs
// its work tiles as above.
Status run_panels(const Plan& p) {
  const std::size_t block = panel_block_rows(p);
  for (std::size_t b0 = 0; b0 < p.T; b0 += block) run_panel_block(p, b0, std::min(p.T, b0 + block));
  return Status::success();
}

// ---- the tile GEMM (AMX) ---------------------------------------------------------------------------

// Rows from which a bf16 prefill takes the tile GEMM on a level with tiles, in its automatic
// mode: a block of C is 32 rows, so fewer rows leave most of every tile product empty, and the
// weights are packed once per call (a copy of every weight as bf16).
constexpr std::size_t kTilesMinRows = 32;
// Work tiles of kTilesRowTile rows x kTilesColTile columns (a multiple of the fp8 scale block and
// of the tiles' 32 columns), k in calls of kTilesChunk (a multiple of the fp8 block): a call's
// activation rows (256 x 1024 bf16, 512 KiB) and its weight strips (as much) stay in L2.
constexpr std::size_t kTilesRowTile = 256;
constexpr std::size_t kTilesColTile = 256;
constexpr std::size_t kTilesChunk = 1024;
// A call of more than one row tile packs the weights of a group of column tiles once, all
// threads together, then runs the group's work tiles: the group is sized for kTilesPerGroup work
// tiles (for the threads), from T alone so that a plan sizes the same buffer as its runs.
constexpr std::size_t kTilesPerGroup = 16;

bool tiles_path(const FusedQkvPagedArgs& a, const simd::GemmKernels& g) {
  const auto T = static_cast<std::size_t>(a.hidden_state.shape[0]);
  const bool available = g.gemm_tiles != nullptr && a.hidden_state.dtype == DType::bf16;
  return tile_gemm::use_for(available, T, kTilesMinRows);
}

// Elements between packed strips: all of K, in whole tile steps.
std::size_t tile_strip_elems(std::size_t K) { return 16 * simd::tile_pack_k(K); }
// Columns per packing group of a call (0: each work tile packs its own).
std::size_t tile_group_cols(std::size_t T, std::size_t N) {
  if (T <= kTilesRowTile) return 0;
  const std::size_t row_tiles = num_tiles(T, kTilesRowTile);
  const std::size_t col_tiles = std::max<std::size_t>(1, num_tiles(kTilesPerGroup, row_tiles));
  return std::min(col_tiles * kTilesColTile, round_up(N, kTilesColTile));
}

// Weight columns [c, c + cols) over all of K into packed strips (stride ldp): dense and fp8 rows
// straight from storage (fp8 codes decoded exactly, their scales applied by the tile GEMM), GPTQ
// formed as bf16 rows a chunk of k at a time as the other routes form them.
void form_tiles(const Plan& p, std::size_t c, std::size_t cols, std::uint16_t* packed, std::size_t ldp) {
  const FusedQkvPagedArgs& a = *p.a;
  const simd::GemmKernels& g = *p.g;
  const std::size_t K = p.K;
  switch (p.d->weight_format) {
    case WeightFormat::dense:
      g.pack_tiles_bf16(static_cast<const std::uint16_t*>(a.weight.data) + c * K, K, cols, K, packed, ldp);
      return;
    case WeightFormat::fp8_block:
      g.pack_tiles_f8(static_cast<const std::uint8_t*>(a.weight.data) + c * K, K, cols, K, packed, ldp);
      return;
    case WeightFormat::gptq: {
      const std::size_t chunk = std::min(kGptqChunk, K), gs = static_cast<std::size_t>(p.d->group_size);
      auto* wq = static_cast<std::uint16_t*>(thread_scratch(cols * chunk * sizeof(std::uint16_t), 5));
      for (std::size_t k0 = 0; k0 < K; k0 += chunk) {
        const std::size_t kn = std::min(chunk, K - k0);
        if (per_element(p)) {
          dequantize_gptq_act_order(p, c, c + cols, k0, kn, wq);
        } else {
          // Table values are bf16 values held as f32: the rounding back to bf16 is exact.
          auto* rows = static_cast<float*>(thread_scratch(cols * kn * sizeof(float), 3));
          auto* tables = static_cast<float*>(thread_scratch(cols * (kn / gs) * 16 * sizeof(float), 4));
          gptq_tables(p, c, c + cols, k0, kn, tables);
          g.int4_rows_f32(gptq_codes(p, c, cols, k0, kn, tables), cols, kn, rows, kn);
          g.round_bf16(rows, wq, cols * kn);
        }
        g.pack_tiles_bf16(wq, kn, cols, kn, packed + 16 * k0, ldp);
      }
      return;
    }
  }
}

// Rows [r0, r1) x columns [c0, c1) on the tiles; `packed`: the columns' strips formed beforehand
// (strip stride ldp), or null to form them here.
void run_tiles_tile(const Plan& p, std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1,
                    const std::uint16_t* packed, std::size_t ldp) {
  const FusedQkvPagedArgs& a = *p.a;
  const simd::GemmKernels& g = *p.g;
  const std::size_t m = r1 - r0, n = c1 - c0, K = p.K;
  auto* acc = static_cast<float*>(thread_scratch(m * n * sizeof(float), 0));
  if (packed == nullptr) {
    auto* own = static_cast<std::uint16_t*>(thread_scratch(num_tiles(n, 16) * ldp * sizeof(std::uint16_t), 2));
    form_tiles(p, c0, n, own, ldp);
    packed = own;
  }
  const std::uint16_t* x = p.xb() + r0 * K;
  const bool fp8 = p.d->weight_format == WeightFormat::fp8_block;
  const std::size_t kblocks = num_tiles(K, kFp8Block);
  const float* scales = fp8 ? static_cast<const float*>(a.weight_scale.data) + (c0 / kFp8Block) * kblocks : nullptr;
  for (std::size_t k0 = 0; k0 < K; k0 += kTilesChunk) {
    const std::size_t kn = std::min(kTilesChunk, K - k0);
    const simd::TileScales ts{fp8 ? scales + k0 / kFp8Block : nullptr, kblocks, kFp8Block, kFp8Block};
    g.gemm_tiles(m, n, kn, x + k0, K, packed + 16 * k0, ldp, 32, fp8 ? &ts : nullptr, acc, n, k0 != 0);
  }
  store_tile(p, r0, r1, c0, c1, acc);
}

Status run_tiles(const Plan& p) {
  const std::size_t ldp = tile_strip_elems(p.K), group = tile_group_cols(p.T, p.N);
  if (group == 0 || p.pack) {  // strips formed in each tile, or the caller's (the same ldp)
    const auto* base = p.pack ? static_cast<const std::uint16_t*>(p.pack->data.get()) : nullptr;
    parallel_for_tiles_2d(p.T, kTilesRowTile, p.N, kTilesColTile,
                          [&](std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) {
                            run_tiles_tile(p, r0, r1, c0, c1, base ? base + (c0 / 16) * ldp : nullptr, ldp);
                          });
    return Status::success();
  }
  auto* packed = call_buffer_of<std::uint16_t>(num_tiles(group, 16) * ldp, kSlotTiles);
  constexpr std::size_t kPackCols = 32;  // columns per packing task: two strips
  for (std::size_t g0 = 0; g0 < p.N; g0 += group) {
    const std::size_t g1 = std::min(p.N, g0 + group);
    parallel_for_tiles(g1 - g0, kPackCols, [&](std::size_t j0, std::size_t j1) {
      form_tiles(p, g0 + j0, j1 - j0, packed + (j0 / 16) * ldp, ldp);
    });
    parallel_for_tiles_2d(p.T, kTilesRowTile, g1 - g0, kTilesColTile,
                          [&](std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) {
                            run_tiles_tile(p, r0, r1, g0 + c0, g0 + c1, packed + (c0 / 16) * ldp, ldp);
                          });
  }
  return Status::success();
}

// Which GEMM a call runs on: the library's when forced on, else the tile GEMM or the panel GEMM
// from their row thresholds, else the library's from its own (reached only with the panel GEMM
// off), else the own tiles.
enum class Route { own, tiles, panel, library };
Route route_of(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, const simd::GemmKernels& g) {
  const bool library = library_path(d, a, g);
  if (library && library_gemm::mode() == library_gemm::Mode::on) return Route::library;
  if (tiles_path(a, g)) return Route::tiles;
  if (panel_path(d, a, g)) return Route::panel;
  return library ? Route::library : Route::own;
}

// ---- packed weights ---------------------------------------------------------------------------------

using PackKind = mlakit::detail::FusedQkvPackedState::Kind;

// The layout a prefill of this CPU reads: the route a call of many rows takes.
PackKind pack_kind(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, const simd::GemmKernels& g) {
  if (library_gemm::mode() == RouteMode::on) return PackKind::none;  // every call on the library's sgemm
  FusedQkvPagedArgs prefill = a;
  prefill.hidden_state.shape[0] = std::int64_t{1} << 30;
  if (tiles_path(prefill, g)) return PackKind::tiles;
  if (panel_path(d, prefill, g)) return PackKind::panels;
  return PackKind::none;
}

// The caller's pack where this call's route reads it: made for these kernels and this route.
const mlakit::detail::FusedQkvPackedState* pack_for(const FusedQkvPagedArgs& a, Route route, const simd::GemmKernels& g) {
  const mlakit::detail::FusedQkvPackedState* s = a.packed_weights ? a.packed_weights->state() : nullptr;
  if (s == nullptr || s->kernels != &g) return nullptr;
  if ((route == Route::tiles && s->kind == PackKind::tiles) || (route == Route::panel && s->kind == PackKind::panels))
    return s;
  return nullptr;
}

// ---- act-order GPTQ in group order ------------------------------------------------------------------

// The call's activations with K in the plan's k_order, into a call buffer: every route then reads
// the weights and the activations in one order, each row gathered once per call.
const void* gather_in_group_order(const Plan& p) {
  constexpr std::size_t kGatherRows = 16;  // rows per task
  auto gather = [&](auto* dst, const auto* src) {
    parallel_for_tiles(p.T, kGatherRows, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t t = r0; t < r1; ++t)
        for (std::size_t k = 0; k < p.K; ++k) dst[t * p.K + k] = src[t * p.K + p.k_order[k]];
    });
    return static_cast<const void*>(dst);
  };
  if (p.f32) return gather(call_buffer_of<float>(p.T * p.K, kSlotGathered), p.xf());
  return gather(call_buffer_of<std::uint16_t>(p.T * p.K, kSlotGathered), p.xb());
}

bool act_order_map(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a) {
  return d.weight_format == WeightFormat::gptq && a.g_idx.data != nullptr;
}

// A part of a pack, 64-byte aligned and owned by the pointer returned (null where it could not be
// allocated: pack_part_failed says so).
template <class T>
std::shared_ptr<T> pack_part(std::size_t bytes) {
  void* mem = ::operator new(bytes, std::align_val_t(64), std::nothrow);
  if (mem == nullptr) return nullptr;
  return std::shared_ptr<T>(static_cast<T*>(mem),
                            [](T* m) { ::operator delete(static_cast<void*>(m), std::align_val_t(64)); });
}
Status pack_part_failed(std::size_t bytes, const std::string& what) {
  return Status::error(StatusCode::internal, "fused_qkv_paged.pack_weights", "out",
                       "fused_qkv_paged.pack_weights: out: allocating " + std::to_string(bytes) + " bytes for " + what +
                           " failed");
}

}  // namespace

Status pack_fused_qkv_weights(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a, bool prefill_layout,
                              mlakit::detail::FusedQkvPackedState* out) {
  Plan p;
  p.d = &d;
  p.a = &a;
  p.g = &gemm_kernels();
  p.f32 = a.hidden_state.dtype == DType::f32;
  p.T = 0;
  p.K = static_cast<std::size_t>(out->K);
  p.N = static_cast<std::size_t>(out->N);
  if (act_order_map(d, a)) p.own_order = group_order(d, a, p.K);  // panels and strips in the calls' K order
  if (!p.own_order.empty()) p.k_order = p.own_order.data();
  if (d.weight_format == WeightFormat::gptq && (p.k_order != nullptr || !act_order_map(d, a))) {
    // The codes once (in group order with a k_order), every call naming the pack reads them in
    // place: rows padded to 16 words past a multiple of 128 lie an odd number of lines apart
    // modulo 4 KiB, so a decode row's word rows spread over the cache sets instead of sharing one
    // (qweight's rows of N = 6144 words lie 24 KiB apart).
    const std::size_t ldw = (p.N + 111) / 128 * 128 + 16, words = p.K / 8 * ldw;
    const std::shared_ptr<std::uint32_t> codes_part = pack_part<std::uint32_t>(words * sizeof(std::uint32_t));
    if (!codes_part) return pack_part_failed(words * sizeof(std::uint32_t), "the GPTQ codes");
    std::uint32_t* codes = codes_part.get();
    constexpr std::size_t kCodeCols = 64;  // columns per task
    parallel_for_tiles(p.N, kCodeCols, [&](std::size_t c0, std::size_t c1) {
      if (p.k_order != nullptr) {
        grouped_words(p, c0, c1 - c0, 0, p.K, codes + c0, ldw);
      } else {
        const auto* qw = static_cast<const std::uint32_t*>(a.qweight.data);
        for (std::size_t r = 0; r < p.K / 8; ++r)
          std::memcpy(codes + r * ldw + c0, qw + r * p.N + c0, (c1 - c0) * sizeof(std::uint32_t));
      }
    });
    // The padding is never read; zeroed, so the pack's bytes are all defined.
    for (std::size_t r = 0; r < p.K / 8; ++r) std::fill(codes + r * ldw + p.N, codes + (r + 1) * ldw, 0u);
    out->codes = codes_part;
    out->codes_ldw = ldw;
    out->k_order = p.own_order;
    p.codes = codes;
    p.codes_ldw = ldw;
    const simd::GemmKernels& g = *p.g;
    if (g.int4_row_tables != nullptr && p.N >= g.int4_row_table_cols) {
      // The decode row's tables of every block of columns and group, formed once, so that decode
      // calls read them instead of forming them from the scales and zero points (a quarter of a
      // decode row's time on Zen 3) for half as many bytes again as the codes.
      const std::size_t gs = static_cast<std::size_t>(d.group_size), groups = (p.K + gs - 1) / gs;
      const std::size_t cols = g.int4_row_table_cols, ldt = groups * g.int4_row_table_bytes;
      const std::size_t bytes = p.N / cols * ldt;
      const std::shared_ptr<std::uint8_t> tables_part = pack_part<std::uint8_t>(bytes);
      if (!tables_part) return pack_part_failed(bytes, "the GPTQ decode tables");
      std::uint8_t* tables = tables_part.get();
      parallel_for_tiles(p.N / cols * cols, kCodeCols, [&](std::size_t c0, std::size_t c1) {
        g.int4_row_tables(gptq_groups(p, c0, 0), c1 - c0, groups, tables + c0 / cols * ldt, ldt);
      });
      out->row_tables = tables_part;
      out->row_tables_ld = ldt;
      out->bytes += bytes;
    }
    if (g.int4_row_codes != nullptr && p.N >= g.int4_row_table_cols) {
      // The codes again as this level's decode row reads them, each block's steps of a chunk of K
      // one stream and a chunk's blocks side by side (gptq_codes), without the shuffles that bring
      // qweight's words into lookup order (GPTQ decode on Zen 3: bench/RESULTS.md), for as many
      // bytes again as the codes.
      const std::size_t cols = g.int4_row_table_cols, steps = g.int4_row_code_bytes;
      const std::size_t chunk = chunk_of(WeightFormat::gptq, p.K), bytes = p.N / cols * ((p.K + 15) / 16) * steps;
      const std::shared_ptr<std::uint8_t> laid_part = pack_part<std::uint8_t>(bytes);
      if (!laid_part) return pack_part_failed(bytes, "the GPTQ decode codes");
      std::uint8_t* laid = laid_part.get();
      parallel_for_tiles(p.N / cols * cols, kCodeCols, [&](std::size_t c0, std::size_t c1) {
        for (std::size_t k0 = 0; k0 < p.K; k0 += chunk) {
          const std::size_t kn = std::min(chunk, p.K - k0), ldr = (kn + 15) / 16 * steps;
          const simd::Int4Columns chunk_codes{codes + k0 / 8 * ldw + c0, ldw, nullptr, static_cast<std::size_t>(d.group_size)};
          g.int4_row_codes(chunk_codes, c1 - c0, kn, laid + p.N / cols * (k0 / 16) * steps + c0 / cols * ldr, ldr);
        }
      });
      out->row_codes = laid_part;
      out->bytes += bytes;
    }
  }
  const simd::GemmKernels& g = *p.g;
  out->kernels = &g;
  out->kind = prefill_layout ? pack_kind(d, a, g) : PackKind::none;
  const std::size_t K = p.K, N = p.N;
  std::size_t elems = 0, elem_bytes = 0;
  if (out->kind == PackKind::tiles) {
    out->stride = tile_strip_elems(K);
    elems = num_tiles(N, 16) * out->stride;
    elem_bytes = sizeof(std::uint16_t);
  } else if (out->kind == PackKind::panels) {
    out->stride = K * g.panel_cols;
    elems = num_tiles(N, g.panel_cols) * out->stride;
    elem_bytes = sizeof(float);
  }
  if (elems != 0) {
    out->data = pack_part<void>(elems * elem_bytes);
    if (!out->data) return pack_part_failed(elems * elem_bytes, "the pack");
    out->bytes = elems * elem_bytes;
  }
  const std::string level = g.level;
  switch (out->kind) {
    case PackKind::tiles: {
      auto* base = static_cast<std::uint16_t*>(out->data.get());
      const std::size_t ldp = out->stride;
      constexpr std::size_t kPackCols = 32;  // columns per packing task: two strips
      parallel_for_tiles(N, kPackCols, [&](std::size_t j0, std::size_t j1) {
        form_tiles(p, j0, j1 - j0, base + (j0 / 16) * ldp, ldp);
      });
      out->layout = "tile GEMM pair strips (bf16, " + std::to_string(num_tiles(N, 16)) + " strips of 16 columns x " +
                    std::to_string(simd::tile_pack_k(K)) + " k) for the " + level + " level";
      break;
    }
    case PackKind::panels: {
      auto* base = static_cast<float*>(out->data.get());
      const std::size_t pc = g.panel_cols, chunk = std::min(kPanelChunk, K);
      parallel_for_each(num_tiles(N, pc), [&](std::size_t q) {
        for (std::size_t k0 = 0; k0 < K; k0 += chunk)
          form_panel(p, q * pc, std::min(pc, N - q * pc), k0, std::min(chunk, K - k0), base + q * out->stride + k0 * pc);
      });
      out->layout = "panel GEMM panels (f32, " + std::to_string(num_tiles(N, pc)) + " panels of " + std::to_string(pc) +
                    " columns x " + std::to_string(K) + " k) for the " + level + " level";
      break;
    }
    case PackKind::none:
      out->layout = prefill_layout ? "none: prefills at the " + level + " level read these weights in place"
                                   : "no prefill layout (not asked for)";
      break;
  }
  if (out->codes) {
    out->bytes += K / 8 * out->codes_ldw * sizeof(std::uint32_t);
    out->layout += std::string("; GPTQ codes") + (out->k_order.empty() ? "" : " in the act-order map's group order") +
                   " (" + std::to_string(K / 8) + " rows of " + std::to_string(N) + " words, " +
                   std::to_string(out->codes_ldw) + " apart), for every call";
    if (out->row_tables)
      out->layout += "; decode rows' group tables for the " + level + " level";
    if (out->row_codes)
      out->layout += "; the codes laid out for the " + level + " level's decode rows";
  }
  return Status::success();
}

std::size_t panel_packed_activations_bound() { return packed_activations_bound.load(); }
void set_panel_packed_activations_bound(std::size_t bytes) { packed_activations_bound.store(bytes); }

CallBufferSizes fused_qkv_paged_call_buffers(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a) {
  CallBufferSizes sizes;
  const Route route = route_of(d, a, gemm_kernels());
  if (act_order_map(d, a)) {  // the activations in group order (gather_in_group_order), on every route
    const auto T = static_cast<std::size_t>(a.hidden_state.shape[0]);
    const auto K = static_cast<std::size_t>(a.hidden_state.shape[1]);
    sizes.grow(kSlotGathered, T * K * dtype_size(a.hidden_state.dtype));
  }
  if (route == Route::tiles) {
    const auto T = static_cast<std::size_t>(a.hidden_state.shape[0]);
    const auto K = static_cast<std::size_t>(a.hidden_state.shape[1]);
    sizes.grow(kSlotTiles,
               num_tiles(tile_group_cols(T, output_columns(d, a)), 16) * tile_strip_elems(K) * sizeof(std::uint16_t));
  }
  if (route == Route::panel) {
    const auto T = static_cast<std::size_t>(a.hidden_state.shape[0]);
    const auto K = static_cast<std::size_t>(a.hidden_state.shape[1]);
    const std::size_t N = output_columns(d, a);
    sizes.grow(kSlotPanels, panel_buffer_bytes(T, K, N));
    sizes.grow(kSlotRows, packed_activation_floats(T, K, N, gemm_kernels().panel_rows) * sizeof(float));
  }
  if (route != Route::library) return sizes;
  const LibraryBuffers b = library_buffers(d, a);
  sizes.grow(kSlotX, b.x * sizeof(float));
  sizes.grow(kSlotW, b.w * sizeof(float));
  sizes.grow(kSlotTables, b.tables * sizeof(float));
  return sizes;
}

Status fused_qkv_paged(const FusedQkvPagedDesc& d, const FusedQkvPagedArgs& a) {
  const PagedKVCacheView& kc = a.kv_cache;
  Plan p;
  p.d = &d;
  p.a = &a;
  p.g = &gemm_kernels();
  p.f32 = a.hidden_state.dtype == DType::f32;
  p.T = static_cast<std::size_t>(a.hidden_state.shape[0]);
  p.K = static_cast<std::size_t>(a.hidden_state.shape[1]);
  p.N = output_columns(d, a);
  if (p.T == 0) return Status::success();

  // Each row's cache block and page offset (the validator checked every page exists).
  const std::int64_t B = a.input_row_offsets.shape[0] - 1, ps = kc.page_size();
  const std::int64_t max_pages = kc.lookup_table.shape[1];
  const auto* iro = static_cast<const std::uint32_t*>(a.input_row_offsets.data);
  const auto* lut = static_cast<const std::uint32_t*>(kc.lookup_table.data);
  const auto* lens = static_cast<const std::uint32_t*>(kc.cache_lengths.data);
  p.row_block.assign(p.T, 0);
  p.row_slot.assign(p.T, 0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::uint32_t t = iro[b]; t < iro[b + 1]; ++t) {
      const std::int64_t pos = std::int64_t(lens[b]) + (t - iro[b]);
      p.row_block[t] = lut[b * max_pages + pos / ps];
      p.row_slot[t] = pos % ps;
    }

  p.x = a.hidden_state.data;
  const mlakit::detail::FusedQkvPackedState* packed = a.packed_weights ? a.packed_weights->state() : nullptr;
  if (packed != nullptr && packed->codes) {  // the pack's codes (in its group order with a k_order)
    if (!packed->k_order.empty()) p.k_order = packed->k_order.data();
    p.codes = packed->codes.get();
    p.codes_ldw = packed->codes_ldw;
    if (packed->row_tables && packed->kernels == p.g) {
      p.row_tables = packed->row_tables.get();
      p.row_tables_ld = packed->row_tables_ld;
    }
    if (packed->row_codes && packed->kernels == p.g) p.row_codes = packed->row_codes.get();
  } else if (act_order_map(d, a)) {
    p.own_order = group_order(d, a, p.K);
    if (!p.own_order.empty()) p.k_order = p.own_order.data();
  }
  if (p.k_order != nullptr) p.x = gather_in_group_order(p);
  const Route route = route_of(d, a, *p.g);
  p.pack = pack_for(a, route, *p.g);
  switch (route) {
    case Route::library: return run_library(p);
    case Route::tiles: return run_tiles(p);
    case Route::panel: return run_panels(p);
    case Route::own: break;
  }
  parallel_for_tiles_2d(p.T, kRowTile, p.N, kColTile,
                        [&](std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) { run_tile(p, r0, r1, c0, c1); });
  return Status::success();
}

}  // namespace mlakit::cpu
