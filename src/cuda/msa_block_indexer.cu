// Op 2 (docs/msa_block_indexer.md) on the GPU: block scores on BF16 tensor cores, then a per-(row, head) top-k.
//
// Block scores. One thread block per (tile of QR query rows, chunk of whole pages, K head), 8 warps.
// The rows' index queries of the heads that read that K head (QR x G rows of A, G = Hi / Hk, padded
// to 16) stay in shared memory; each tile of 64 key
// positions is gathered through the page table into shared memory once (bf16 copied, fp8 decoded
// exactly; 16 bytes a load where idx_head_dim is a multiple of 16 and the rows are 16-byte
// aligned) and multiplied by all of them: warp w computes the 8 keys [8w, 8w+8) of the tile for
// every query row. The scaled dots go to a shared tile, from which each (row, head, page) takes
// the maximum over its keys below the row's causal end (a NaN makes the page's maximum NaN). A
// block's key range is a whole number of pages, so every page maximum is finished in one block and
// written to a global [rows, Hi, max_blocks] buffer; there is no cross-block reduction.
// Selection. Per (query row, head), or per query row with reduce_heads (the block score read is
// then the maximum over heads, NaN sticking): forced init/local scores applied on read; calls of
// at most kWarpTopkBlocks blocks and kWarpTopkK winners select by one warp each (warp_topk: the
// m smallest packed winners from registers), others by a block of 512 threads (the shared radix
// select + sort); the same order either way (topk.cuh); NaN winners become -1.
#include <algorithm>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/mma.cuh"
#include "cuda/msa_block_indexer.hpp"
#include "cuda/topk.cuh"

namespace mlakit::cuda {
namespace {

constexpr const char* kOp = "msa_block_indexer";
constexpr int kThreads = 256;
constexpr int kKeyTile = 64;
constexpr int kKeysPerBlock = 1024;
constexpr int kPageMaxFloats = 8192;  // shared page maxima per block
constexpr int kTopkThreads = 512;
// A warp per selection where every row has at most this many blocks and this many winners: a
// block's four radix passes and sort leave most of 512 threads idle on a row of a few hundred
// blocks (an H200 spent 1.71 ms of the 5.83 ms prefill at s4096 c28672 on them).
constexpr int kWarpTopkThreads = 256;
constexpr std::int64_t kWarpTopkBlocks = 1024, kWarpTopkK = 64;
constexpr int kSharedWinners = 4096;
constexpr std::int64_t kBudgetBytes = std::int64_t{512} << 20;

struct ScoreParams {
  const std::uint16_t* q;
  const std::uint32_t* iro;
  const std::uint32_t* prefix;
  DevPagedCache cache;
  bool fp8;
  int B, Hi, G, Di, Dp, QR, MA, MAp, layer, pages_per_block;
  float scale;
  std::int64_t row0, rows;
  float* block_scores;  // [rows of the chunk, Hi, max_blocks]
  std::int64_t max_blocks;
};

struct Layout {
  std::size_t kbase, table, S, pmax, qs, ks, bytes;
  __host__ __device__ Layout(int MAp, int Dp, int pages_per_block) {
    const std::size_t ld = static_cast<std::size_t>(Dp + 8);
    kbase = 0;
    table = kbase + kKeyTile * sizeof(std::int64_t);
    S = table + 256 * sizeof(std::uint16_t);
    pmax = S + static_cast<std::size_t>(MAp) * (kKeyTile + 1) * sizeof(float);
    qs = (pmax + static_cast<std::size_t>(MAp) * pages_per_block * sizeof(float) + 15) / 16 * 16;
    ks = qs + static_cast<std::size_t>(MAp) * ld * sizeof(std::uint16_t);
    bytes = ks + kKeyTile * ld * sizeof(std::uint16_t);
  }
};

// max that lets a NaN in and never lets it out (order-independent: NaN if any NaN, else the max).
__device__ __forceinline__ float max_nan_sticky(float m, float x) { return (x != x || x > m) ? x : m; }

// VectorKeys (idx_head_dim a multiple of 16, every cache row 16-byte aligned): the key rows are
// read 16 bytes a load (16 fp8 codes, decoded through the table, or 8 bf16) instead of one element
// a load. A template argument, not a branch on p, so that each variant keeps its own registers.
template <bool VectorKeys>
__global__ void __launch_bounds__(kThreads) score_kernel(ScoreParams p) {
  MLAKIT_DYNAMIC_SHARED(smem);
  const Layout L(p.MAp, p.Dp, p.pages_per_block);
  auto* kbase = reinterpret_cast<std::int64_t*>(smem + L.kbase);
  auto* table = reinterpret_cast<std::uint16_t*>(smem + L.table);
  auto* S = reinterpret_cast<float*>(smem + L.S);
  auto* pmax = reinterpret_cast<float*>(smem + L.pmax);
  auto* qs = reinterpret_cast<std::uint16_t*>(smem + L.qs);
  auto* ks = reinterpret_cast<std::uint16_t*>(smem + L.ks);
  constexpr int kMaxRows = 8;
  __shared__ int row_seq[kMaxRows];
  __shared__ std::int64_t row_t[kMaxRows], row_n[kMaxRows];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int ld = p.Dp + 8, Hi = p.Hi, G = p.G, Di = p.Di, Dp = p.Dp, QR = p.QR, MAp = p.MAp, ppb = p.pages_per_block;
  const std::int64_t ps = p.cache.page_size;
  constexpr int kLdS = kKeyTile + 1;
  if (p.fp8) build_fp8_table(table);
  if (tid < QR) {
    const std::int64_t t = p.row0 + static_cast<std::int64_t>(blockIdx.x) * QR + tid;
    if (t < p.row0 + p.rows) {
      const int b = find_sequence(p.iro, p.B, t);
      row_seq[tid] = b;
      row_t[tid] = t;
      row_n[tid] = static_cast<std::int64_t>(p.prefix[b]) + (t - p.iro[b]) + 1;  // causal key count
    } else {
      row_seq[tid] = -1;
      row_t[tid] = -1;
      row_n[tid] = 0;
    }
  }
  __syncthreads();
  // A rows a = r·G + j for index head kh·G + j (zero past the rows and columns that exist).
  const int kh = static_cast<int>(blockIdx.z);
  for (int e = tid; e < MAp * Dp; e += kThreads) {
    const int arow = e / Dp, d = e % Dp, r = arow / G, h = kh * G + arow % G;
    std::uint16_t v = 0;
    if (arow < p.MA && row_seq[r] >= 0 && d < Di) v = p.q[(row_t[r] * Hi + h) * Di + d];
    qs[arow * ld + d] = v;
  }
  __syncthreads();

  const auto* blocks8 = static_cast<const std::uint8_t*>(p.cache.blocks);
  const auto* blocks16 = static_cast<const std::uint16_t*>(p.cache.blocks);
  for (int seg = 0; seg < QR && row_seq[seg] >= 0;) {
    const int b = row_seq[seg];
    int seg_end = seg + 1;
    while (seg_end < QR && row_seq[seg_end] == b) ++seg_end;
    std::int64_t n_max = 0;
    for (int r = seg; r < seg_end; ++r) n_max = max(n_max, row_n[r]);
    const std::int64_t keys_per_chunk = static_cast<std::int64_t>(ppb) * ps;

    for (std::int64_t chunk = blockIdx.y; chunk * keys_per_chunk < n_max; chunk += gridDim.y) {
      const std::int64_t k_begin = chunk * keys_per_chunk;
      const std::int64_t k_end = min(k_begin + keys_per_chunk, n_max);
      const std::int64_t page0 = chunk * ppb;
      for (int e = tid; e < MAp * ppb; e += kThreads) pmax[e] = -INFINITY;
      for (std::int64_t kt = k_begin; kt < k_end; kt += kKeyTile) {
        if (tid < kKeyTile) {
          const std::int64_t j = kt + tid;
          kbase[tid] = j < k_end ? p.cache.row_offset(p.cache.block_of(b, j), 0, p.layer, j % ps, kh) : -1;
        }
        __syncthreads();
        if constexpr (VectorKeys) {
          const int vecs = p.fp8 ? Di / 16 : Di / 8;  // 16 bytes a load
          for (int e = tid; e < kKeyTile * vecs; e += kThreads) {
            const int kk = e / vecs, v = e % vecs;
            const std::int64_t base = kbase[kk];
            uint4 x = make_uint4(0, 0, 0, 0);  // a key past the tile's end: zero (codes 0 decode to +0)
            if (p.fp8) {
              if (base >= 0) x = *reinterpret_cast<const uint4*>(blocks8 + base + 16 * v);
              auto* dst = reinterpret_cast<uint4*>(ks + kk * ld + 16 * v);
              dst[0] = decode_fp8x8(x.x, x.y, table);
              dst[1] = decode_fp8x8(x.z, x.w, table);
            } else {
              if (base >= 0) x = *reinterpret_cast<const uint4*>(blocks16 + base + 8 * v);
              *reinterpret_cast<uint4*>(ks + kk * ld + 8 * v) = x;
            }
          }
        } else {
          for (int e = tid; e < kKeyTile * Dp; e += kThreads) {
            const int kk = e / Dp, d = e % Dp;
            const std::int64_t base = kbase[kk];
            std::uint16_t v = 0;
            if (base >= 0 && d < Di) v = p.fp8 ? table[blocks8[base + d]] : blocks16[base + d];
            ks[kk * ld + d] = v;
          }
        }
        __syncthreads();
        // S = scale · A·Kᵀ: warp w owns keys [8w, 8w+8) for every A row.
        for (int mt0 = 0; mt0 < MAp / 16; mt0 += 4) {
          float acc[4][4];
          for (int i = 0; i < 4; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
          const int mts = min(4, MAp / 16 - mt0);
          for (int k0 = 0; k0 < Dp; k0 += 16) {
            std::uint32_t bf[2];
            load_b_nmajor(bf, ks, ld, warp * 8, k0);
            for (int i = 0; i < 4; ++i) {
              if (i >= mts) break;
              std::uint32_t af[4];
              load_a_rowmajor(af, qs, ld, (mt0 + i) * 16, k0);
              mma_bf16_16816(acc[i], af, bf);
            }
          }
          for (int i = 0; i < mts; ++i) {
            const int r0 = (mt0 + i) * 16 + g, col = warp * 8 + 2 * c;
            S[r0 * kLdS + col] = p.scale * acc[i][0];
            S[r0 * kLdS + col + 1] = p.scale * acc[i][1];
            S[(r0 + 8) * kLdS + col] = p.scale * acc[i][2];
            S[(r0 + 8) * kLdS + col + 1] = p.scale * acc[i][3];
          }
        }
        __syncthreads();
        // Page maxima over each row's visible keys of this tile.
        const std::int64_t tile_end = min(kt + kKeyTile, k_end);
        const std::int64_t c_lo = kt / ps, c_hi = (tile_end - 1) / ps;
        const int pages = static_cast<int>(c_hi - c_lo + 1);
        const int seg_rows = (seg_end - seg) * G;
        for (int e = tid; e < seg_rows * pages; e += kThreads) {
          const int arow = seg * G + e / pages;
          const std::int64_t page = c_lo + e % pages;
          const std::int64_t j0 = max(kt, page * ps);
          const std::int64_t j1 = min(min(tile_end, (page + 1) * ps), row_n[arow / G]);
          if (j0 >= j1) continue;
          float m = pmax[arow * ppb + (page - page0)];
          for (std::int64_t j = j0; j < j1; ++j) m = max_nan_sticky(m, S[arow * kLdS + (j - kt)]);
          pmax[arow * ppb + (page - page0)] = m;
        }
        __syncthreads();
      }
      // Pages of this chunk that a row has (page < ceil(n / ps)).
      const int seg_rows = (seg_end - seg) * G;
      for (int e = tid; e < seg_rows * ppb; e += kThreads) {
        const int arow = seg * G + e / ppb, r = arow / G, h = kh * G + arow % G;
        const std::int64_t page = page0 + e % ppb;
        const std::int64_t nb = (row_n[r] + ps - 1) / ps;
        if (page < nb)
          p.block_scores[((row_t[r] - p.row0) * Hi + h) * p.max_blocks + page] = pmax[arow * ppb + (page - page0)];
      }
      __syncthreads();
    }
    seg = seg_end;
  }
}

struct TopkParams {
  const float* block_scores;
  std::int64_t max_blocks;
  const std::uint32_t* iro;
  const std::uint32_t* prefix;
  int B, Hi;
  bool reduce;  // one selection per row over the heads' maximum; out is [1, R, topk]
  std::int64_t row0, rows_total, block_size, topk, init_blocks, local_blocks;
  std::int32_t* out;  // [Hi, R, topk]
  unsigned long long* scratch;
  std::int64_t scratch_stride;
};

// One selection: pair = (row of the chunk, head), or the row with reduce.
struct Selection {
  const float* s;
  int fold;
  std::int64_t head_stride, nb, m, init, local_from;
  std::int32_t* out;  // topk entries
  __device__ Selection(const TopkParams& p, std::int64_t pair) {
    const int selections = p.reduce ? 1 : p.Hi;
    const std::int64_t row = pair / selections;
    const int h = static_cast<int>(pair % selections);
    const std::int64_t t = p.row0 + row;
    const int b = find_sequence(p.iro, p.B, t);
    const std::int64_t nk = static_cast<std::int64_t>(p.prefix[b]) + (t - p.iro[b]) + 1;
    nb = (nk + p.block_size - 1) / p.block_size;
    m = min(p.topk, nb);
    s = p.block_scores + (row * p.Hi + h) * p.max_blocks;
    fold = p.reduce ? p.Hi : 1;
    head_stride = p.max_blocks;
    init = p.init_blocks;
    local_from = nb - p.local_blocks;
    out = p.out + (static_cast<std::int64_t>(h) * p.rows_total + t) * p.topk;
  }
  // Block cblk's rank key: the heads' maximum with reduce, then the forced init and local blocks.
  __device__ std::uint32_t key(int cblk) const {
    float v = s[cblk];
    for (int o = 1; o < fold; ++o) v = max_nan_sticky(v, s[o * head_stride + cblk]);
    if (cblk < init) v = 1e30f;
    if (cblk >= local_from) v = 1e29f;  // applied second: wins over init
    return rank_key(v);
  }
};

__device__ __forceinline__ std::int32_t winner_or_none(unsigned long long w) {
  return winner_is_nan(w) ? -1 : static_cast<std::int32_t>(winner_index(w));
}

__global__ void __launch_bounds__(kTopkThreads) topk_kernel(TopkParams p) {
  __shared__ TopkShared<kTopkThreads> sm;
  __shared__ unsigned long long winners[kSharedWinners];
  const std::int64_t pair = blockIdx.x;
  const Selection sel(p, pair);
  unsigned long long* buf = next_pow2(sel.m) <= kSharedWinners ? winners : p.scratch + pair * p.scratch_stride;
  const auto key = [&](int cblk) { return sel.key(cblk); };
  block_topk<kTopkThreads>(sm, static_cast<int>(sel.nb), static_cast<int>(sel.m), key, buf);
  for (std::int64_t i = threadIdx.x; i < p.topk; i += kTopkThreads)
    sel.out[i] = i < sel.m ? winner_or_none(buf[i]) : -1;
}

// kWarpTopkThreads / 32 selections a block, one a warp; every row has at most 32·kPerLane blocks.
template <int kPerLane>
__global__ void __launch_bounds__(kWarpTopkThreads) topk_warp_kernel(TopkParams p, std::int64_t pairs) {
  const std::int64_t pair = static_cast<std::int64_t>(blockIdx.x) * (kWarpTopkThreads / 32) + threadIdx.x / 32;
  if (pair >= pairs) return;  // the whole warp
  const Selection sel(p, pair);
  warp_topk<kPerLane>(static_cast<int>(sel.nb), static_cast<int>(sel.m), [&](int cblk) { return sel.key(cblk); },
                      [&](int i, unsigned long long w) { sel.out[i] = winner_or_none(w); });
  for (std::int64_t i = sel.m + (threadIdx.x & 31); i < p.topk; i += 32) sel.out[i] = -1;
}

}  // namespace

Status msa_block_indexer(const MsaBlockIndexerDesc& d, const MsaBlockIndexerArgs& a, const MsaBlockIndexerArgs& host,
                         const core::DeviceLaunch& launch) {
  const cudaStream_t stream = as_stream(launch.stream);
  const std::int64_t R = a.q.shape[0];
  if (R == 0) return Status::success();
  const int B = static_cast<int>(a.input_row_offsets.shape[0] - 1);
  const auto* iro = static_cast<const std::uint32_t*>(host.input_row_offsets.data);
  const auto* prefix = static_cast<const std::uint32_t*>(host.prefix_lens.data);
  const std::int64_t ps = a.k_cache.page_size();
  std::int64_t max_keys = 1, max_rows = 1;
  for (int b = 0; b < B; ++b) {
    const std::int64_t seq = static_cast<std::int64_t>(iro[b + 1]) - iro[b];
    if (seq == 0) continue;
    max_keys = std::max(max_keys, static_cast<std::int64_t>(prefix[b]) + seq);
    max_rows = std::max(max_rows, seq);
  }
  const std::int64_t max_blocks = ceil_div(max_keys, ps);
  const int Hi = static_cast<int>(d.num_index_heads), Di = static_cast<int>(d.idx_head_dim);
  const int Hk = static_cast<int>(d.num_k_heads), G = Hi / Hk;
  const int Dp = static_cast<int>(round_up(Di, 16));
  const bool vector_keys = Di % 16 == 0 && cache_rows_16_byte_aligned(a.k_cache.blocks);

  Status s;
  const std::size_t smem_max = max_shared_memory(kOp, &s);
  MLAKIT_STATUS_TRY(s);
  int QR = max_rows >= 8 ? 8 : max_rows >= 4 ? 4 : max_rows >= 2 ? 2 : 1;
  while (QR > 1 && QR * G > 64) QR /= 2;
  auto layout_for = [&](int qr) {
    const int mapad = static_cast<int>(round_up(static_cast<std::int64_t>(qr) * G, 16));
    const int ppb = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(kKeysPerBlock / ps, kPageMaxFloats / mapad)));
    return std::make_pair(Layout(mapad, Dp, ppb), ppb);
  };
  while (QR > 1 && layout_for(QR).first.bytes > smem_max) QR /= 2;
  const auto [layout, ppb] = layout_for(QR);
  MLAKIT_STATUS_TRY(shared_memory_fits(kOp, "num_index_heads",
                                       "num_index_heads=" + std::to_string(Hi) + " with idx_head_dim=" + std::to_string(Di),
                                       layout.bytes, smem_max));

  const std::int64_t winners_pow2 = next_pow2(std::min(d.topk, max_blocks));
  const std::int64_t scratch_per_pair = winners_pow2 > kSharedWinners ? winners_pow2 : 0;
  const std::int64_t bytes_per_row = Hi * (max_blocks * 4 + scratch_per_pair * 8);
  const std::int64_t chunk_rows = std::max<std::int64_t>(1, std::min(R, kBudgetBytes / bytes_per_row));
  Temporaries tmp;
  const std::size_t scores = tmp.add(static_cast<std::size_t>(chunk_rows * Hi * max_blocks * 4));
  const std::size_t scratch = tmp.add(static_cast<std::size_t>(chunk_rows * Hi * scratch_per_pair * 8));
  if (launch.workspace_query != nullptr) {
    *launch.workspace_query = tmp.total();
    return Status::success();
  }
  MLAKIT_STATUS_TRY(tmp.acquire(kOp, launch, stream));

  ScoreParams sp;
  sp.q = static_cast<const std::uint16_t*>(a.q.data);
  sp.iro = static_cast<const std::uint32_t*>(a.input_row_offsets.data);
  sp.prefix = static_cast<const std::uint32_t*>(a.prefix_lens.data);
  sp.cache = DevPagedCache::from(a.k_cache);
  sp.fp8 = a.k_cache.blocks.dtype == DType::f8e4m3;
  sp.B = B;
  sp.Hi = Hi;
  sp.G = G;
  sp.Di = Di;
  sp.Dp = Dp;
  sp.QR = QR;
  sp.MA = QR * G;
  sp.MAp = static_cast<int>(round_up(sp.MA, 16));
  sp.layer = static_cast<int>(a.layer_idx);
  sp.pages_per_block = ppb;
  sp.scale = d.scale;
  sp.block_scores = tmp.at<float>(scores);
  sp.max_blocks = max_blocks;

  TopkParams tp;
  tp.block_scores = tmp.at<float>(scores);
  tp.max_blocks = max_blocks;
  tp.iro = sp.iro;
  tp.prefix = sp.prefix;
  tp.B = B;
  tp.Hi = Hi;
  tp.reduce = d.reduce_heads;
  tp.rows_total = R;
  tp.block_size = ps;
  tp.topk = d.topk;
  tp.init_blocks = d.init_blocks;
  tp.local_blocks = d.local_blocks;
  tp.out = static_cast<std::int32_t*>(a.out_idxs.data);
  tp.scratch = scratch_per_pair > 0 ? tmp.at<unsigned long long>(scratch) : nullptr;
  tp.scratch_stride = scratch_per_pair;

  const std::int64_t keys_per_chunk = static_cast<std::int64_t>(ppb) * ps;
  const bool warp_topk_rows = max_blocks <= kWarpTopkBlocks && d.topk <= kWarpTopkK;
  for (std::int64_t row0 = 0; row0 < R; row0 += chunk_rows) {
    const std::int64_t rows = std::min(chunk_rows, R - row0);
    sp.row0 = row0;
    sp.rows = rows;
    const dim3 grid(static_cast<unsigned>(ceil_div(rows, QR)),
                    static_cast<unsigned>(std::min<std::int64_t>(ceil_div(max_keys, keys_per_chunk), 65535)),
                    static_cast<unsigned>(Hk));
    MLAKIT_STATUS_TRY(launch_kernel(kOp, "score_kernel", vector_keys ? score_kernel<true> : score_kernel<false>, grid,
                                    kThreads, layout.bytes, stream, sp));
    tp.row0 = row0;
    const std::int64_t pairs = rows * (d.reduce_heads ? 1 : Hi);
    if (warp_topk_rows) {
      const auto kernel = max_blocks <= 256 ? topk_warp_kernel<8> : topk_warp_kernel<32>;
      const auto blocks = static_cast<unsigned>(ceil_div(pairs, kWarpTopkThreads / 32));
      MLAKIT_STATUS_TRY(launch_kernel(kOp, "topk_warp_kernel", kernel, blocks, kWarpTopkThreads, 0, stream, tp, pairs));
    } else {
      MLAKIT_STATUS_TRY(launch_kernel(kOp, "topk_kernel", topk_kernel, static_cast<unsigned>(pairs), kTopkThreads, 0,
                                      stream, tp));
    }
  }
  return Status::success();
}

}  // namespace mlakit::cuda
