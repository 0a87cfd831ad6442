// Op 1 (docs/lightning_indexer.md) on the GPU: scores on BF16 tensor cores, then a per-row top-k.
//
// Scores. One thread block per (tile of QR query rows, chunk of kKeysPerBlock key positions), 8
// warps. The block's query rows (all heads, fp8 decoded exactly to bf16) stay in shared memory;
// each key tile of 64 positions is gathered through the page table and decoded into shared memory
// once, then used by every row and head of the block. Where head_dim is a multiple of 16 and every
// cache row starts 16-byte aligned, the codes arrive by cp.async, 16 a copy, into a ring of two
// tiles, the next tile's copies in flight while this one is scored (two barriers a tile); other
// caches are read one byte a load. The product is heads x keys per query row:
// A = Q[row] (heads padded to 16, the M dimension), B = K tile (keys, the N dimension), k = head_dim.
// Each warp owns one query row and QR of the tile's eight 8-key column slices; it runs up to four
// head tiles side by side over k (the key fragments, by ldmatrix, shared by them), then in order
// applies ReLU (IEEE maximum: NaN stays NaN) and the q_s weight per head, sums the 16 heads of a
// tile across lanes with a fixed shuffle tree and accumulates the head tiles in registers; the
// key scale multiplies the head sum. A query tile that spans two sequences is
// processed one sequence segment at a time (each segment has its own keys).
//
// With MLAKIT_CUDA_WGMMA=on (sm_90a), DeepSeek's shape (64 heads of 128, sequences of four new rows
// or more) is scored by one warpgroup a block on warpgroup products, four query rows at once (kWg
// below).
// fp8 x fp8 products are exact in bf16 x bf16 -> f32, so only the accumulation rounds (f32).
// Selection. One block of 512 threads per query row over the row's scores (kept in global memory,
// one row of max_keys floats per query row, processed in row chunks that bound the buffer): radix
// select + ordered compaction + bitonic sort (topk.cuh), then positions and -1 padding.
#include <algorithm>
#include <vector>

#include "cuda/async_copy.cuh"
#include "cuda/common.cuh"
#include "cuda/lightning_indexer.hpp"
#include "cuda/mma.cuh"
#include "cuda/topk.cuh"
#include "cuda/wgmma.cuh"
#include "cuda/wgmma_route.hpp"

namespace mlakit::cuda {
namespace {

constexpr const char* kOp = "lightning_indexer";
constexpr int kScoreThreads = 256;
// The warpgroup kernel (kWg below): one warpgroup, four query rows of 64 heads (the products' 256
// columns), head_dim 128 (8 products a key tile, unrolled: a loop over them would be serialized).
constexpr int kWgThreads = 128, kWgRows = 4, kWgHeads = 64, kWgDim = 128;
constexpr int kKeyTile = 64;
constexpr int kKeysPerBlock = 1024;
constexpr int kTopkThreads = 512;
constexpr int kSharedWinners = 4096;  // top-k sorts up to this many winners in shared memory
constexpr std::int64_t kScoreBudgetBytes = std::int64_t{512} << 20;

struct ScoreParams {
  const std::uint8_t* q;
  const float* q_s;
  const std::uint32_t* iro;
  DevPagedCache cache;
  int B, H, D, Hp, Dp, layer;
  bool causal;
  std::int64_t row0, rows;
  float* scores;
  std::int64_t ld;  // floats per query row in `scores`
};

// `ring`: the codes of two key tiles (Dp bytes a key) and their scales, for the cp.async gather.
// Q's rows and the key tile: rows padded by 16 bytes for ldmatrix, or (wg) core matrices for the
// warpgroup products.
struct ScoreLayout {
  std::size_t kbase, kscale, qw, table, qs, ks, codes, ring_scale, bytes;
  __host__ __device__ ScoreLayout(int QR, int Hp, int Dp, bool ring, bool wg = false) {
    const std::size_t ld = static_cast<std::size_t>(Dp + (wg ? 0 : 8));
    kbase = 0;
    kscale = kbase + kKeyTile * sizeof(std::int64_t);
    qw = kscale + kKeyTile * sizeof(float);
    table = qw + static_cast<std::size_t>(QR) * Hp * sizeof(float);
    qs = (table + 256 * sizeof(std::uint16_t) + 15) / 16 * 16;
    ks = qs + static_cast<std::size_t>(QR) * Hp * ld * sizeof(std::uint16_t);
    codes = ks + kKeyTile * ld * sizeof(std::uint16_t);
    ring_scale = codes + (ring ? 2 * kKeyTile * static_cast<std::size_t>(Dp) : 0);
    bytes = ring_scale + (ring ? 2 * kKeyTile * sizeof(float) : 0);
  }
};

// IEEE maximum(x, +0): NaN stays NaN, -0 becomes +0.
__device__ __forceinline__ float relu_ieee(float x) { return (x > 0.0f || x != x) ? x : 0.0f; }

// VectorCodes is a template argument, not a branch on p: with both gathers in one body ptxas spilled
// the two-row kernel's accumulators.
// kWg (sm_90a; with VectorCodes, QR = kWgRows, Hp = kWgHeads, Dp = kWgDim): one warpgroup scores
// a key tile for the block's four rows at once, keys as the products' 64 rows and (row, head) as
// their 256 columns, K tile and Q as core matrices; each thread then holds all 64 heads of its two
// keys for a row in groups of four (heads 2c, 2c + 1, 8 + 2c, 9 + 2c of each 16-head tile). The
// fold is the mma.sync kernel's, step for step: per head tile the pair (h, h + 8), then the pairs
// of neighbouring heads (in registers), then the lanes of a quad, the head tiles in order; so the
// same scores. A block's rows from another sequence are multiplied too but not written.
template <int QR, bool VectorCodes, bool kWg = false>
__global__ void __launch_bounds__(kWg ? kWgThreads : kScoreThreads) score_kernel(ScoreParams p) {
  static_assert(!kWg || (VectorCodes && QR == kWgRows), "the warpgroup kernel gathers by cp.async, four rows");
  constexpr int kThreads = kWg ? kWgThreads : kScoreThreads;
  MLAKIT_DYNAMIC_SHARED(smem);
  const ScoreLayout L(QR, p.Hp, p.Dp, VectorCodes, kWg);
  auto* kbase = reinterpret_cast<std::int64_t*>(smem + L.kbase);
  auto* kscale = reinterpret_cast<float*>(smem + L.kscale);
  auto* qw = reinterpret_cast<float*>(smem + L.qw);
  auto* table = reinterpret_cast<std::uint16_t*>(smem + L.table);
  auto* qs = reinterpret_cast<std::uint16_t*>(smem + L.qs);
  auto* ks = reinterpret_cast<std::uint16_t*>(smem + L.ks);
  auto* codes = smem + L.codes;
  auto* ring_scale = reinterpret_cast<float*>(smem + L.ring_scale);
  __shared__ int row_seq[QR];
  __shared__ std::int64_t row_t[QR], row_n[QR];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int ld = p.Dp + (kWg ? 0 : 8);
  const int H = p.H, D = p.D, Hp = p.Hp, Dp = p.Dp;
  // Element (row n, column d) of Q's rows (n = row·Hp + head) or of the key tile, in the layout.
  const auto at = [&](std::uint16_t* base, int n, int d) {
    return kWg ? base + (n / 8) * 8 * Dp + (d / 8) * 64 + (n % 8) * 8 + d % 8 : base + n * ld + d;
  };
  build_fp8_table(table);
  if (tid < QR) {
    const std::int64_t t = p.row0 + static_cast<std::int64_t>(blockIdx.x) * QR + tid;
    if (t < p.row0 + p.rows) {
      const int b = find_sequence(p.iro, p.B, t);
      const std::int64_t first = p.iro[b], last = p.iro[b + 1];
      const std::int64_t cache_len = p.cache.cache_lengths[b];
      row_seq[tid] = b;
      row_t[tid] = t;
      row_n[tid] = p.causal ? cache_len + (t - first) + 1 : cache_len + (last - first);
    } else {
      row_seq[tid] = -1;
      row_t[tid] = -1;
      row_n[tid] = 0;
    }
  }
  __syncthreads();

  // The block's query rows, decoded, and their head weights (zero for padding rows and heads).
  for (int e = tid; e < QR * Hp * Dp; e += kThreads) {
    const int r = e / (Hp * Dp), rem = e % (Hp * Dp), h = rem / Dp, d = rem % Dp;
    std::uint16_t v = 0;
    if (row_seq[r] >= 0 && h < H && d < D) v = table[p.q[(row_t[r] * H + h) * D + d]];
    *at(qs, r * Hp + h, d) = v;
  }
  for (int e = tid; e < QR * Hp; e += kThreads) {
    const int r = e / Hp, h = e % Hp;
    qw[e] = (row_seq[r] >= 0 && h < H) ? p.q_s[row_t[r] * H + h] : 0.0f;
  }
  if constexpr (kWg) fence_proxy_async();  // Q, before the products read it
  __syncthreads();

  constexpr int kWarpsPerRow = 8 / QR;
  // Head tiles whose products share a warp's key fragments (two for four rows: with four, ptxas
  // held that instance to 128 registers and spilled).
  constexpr int kHeadGroup = QR == 4 ? 2 : 4;
  const int my_row = warp / kWarpsPerRow, sub = warp % kWarpsPerRow;
  const int g = lane >> 2, c = lane & 3;
  // The warp's key slices (8 keys each) at k0 as B fragments, two slices an ldmatrix.
  auto key_fragments = [&](std::uint32_t (&bf)[QR][2], int k0) {
    if constexpr (QR == 1) {
      load_b_nmajor(bf[0], ks, ld, sub * 8, k0);
    } else {
#pragma unroll
      for (int i = 0; i < QR; i += 2) {
        std::uint32_t r[4];
        const int first = (sub + kWarpsPerRow * i) * 8, second = first + kWarpsPerRow * 8;
        ldmatrix_x4(r, ldmatrix_b_nmajor_rows(ks, ld, first, second, k0));
        bf[i][0] = r[0];
        bf[i][1] = r[1];
        bf[i + 1][0] = r[2];
        bf[i + 1][1] = r[3];
      }
    }
  };
  const auto* blocks = static_cast<const std::uint8_t*>(p.cache.blocks);

  for (int seg = 0; seg < QR && row_seq[seg] >= 0;) {
    const int b = row_seq[seg];
    int seg_end = seg + 1;
    while (seg_end < QR && row_seq[seg_end] == b) ++seg_end;
    std::int64_t n_max = 0;
    for (int r = seg; r < seg_end; ++r) n_max = max(n_max, row_n[r]);
    const bool mine = my_row >= seg && my_row < seg_end;

    for (std::int64_t chunk = blockIdx.y; chunk * kKeysPerBlock < n_max; chunk += gridDim.y) {
      const std::int64_t k_begin = chunk * kKeysPerBlock;
      const std::int64_t k_end = min(k_begin + kKeysPerBlock, n_max);
      // Scores of the key tile at kt from ks and kscale: the warpgroup's, for the segment's rows.
      auto score_tile_wg = [&](std::int64_t kt) {
        float acc[128];
        wgmma_fence(acc);
        wgmma_m64n256k16(acc, ks, qs, 128, 16 * kWgDim, false);
#pragma unroll
        for (int s = 1; s < kWgDim / 16; ++s) wgmma_m64n256k16(acc, ks + 64 * 2 * s, qs + 64 * 2 * s, 128, 16 * kWgDim, true);
        wgmma_commit();
        wgmma_wait<0>(acc);
        // acc[4i + e]: key 16·warp + g (+ 8 for e >= 2), column 8i + 2c + (e & 1) = row·64 + head.
#pragma unroll
        for (int r = 0; r < kWgRows; ++r) {
          if (r < seg || r >= seg_end) continue;
          float score[2] = {0.0f, 0.0f};  // keys g and g + 8 of the warp's 16
#pragma unroll
          for (int m = 0; m < kWgHeads / 16; ++m)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              float v[2];
#pragma unroll
              for (int col = 0; col < 2; ++col) {
                const int h0 = 16 * m + 2 * c + col, h1 = h0 + 8;
                const int i0 = 4 * (8 * r + 2 * m) + 2 * half + col, i1 = i0 + 4;
                v[col] = (h0 < H ? relu_ieee(acc[i0]) * qw[r * kWgHeads + h0] : 0.0f) +
                         (h1 < H ? relu_ieee(acc[i1]) * qw[r * kWgHeads + h1] : 0.0f);
              }
              float sum = v[0] + v[1];
              sum += __shfl_xor_sync(0xffffffffu, sum, 1);
              sum += __shfl_xor_sync(0xffffffffu, sum, 2);
              score[half] += sum;
            }
          if (c == 0) {
            const std::int64_t n_row = min(row_n[r], k_end);
            float* out = p.scores + (row_t[r] - p.row0) * p.ld;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int key = 16 * warp + g + 8 * half;
              if (kt + key < n_row) out[kt + key] = kscale[key] * score[half];
            }
          }
        }
      };
      // Scores of the key tile at kt from ks and kscale, by the warps of this segment's rows.
      auto score_tile = [&](std::int64_t kt) {
        if constexpr (kWg) {
          score_tile_wg(kt);
          return;
        }
        if (!mine) return;
        float score[QR][2];
        for (int i = 0; i < QR; ++i) score[i][0] = score[i][1] = 0.0f;
        // Up to kHeadGroup head tiles at once: each key fragment serves all of them, and their
        // product chains run side by side (one head tile's chain alone left the warps waiting on
        // each product). Each head tile still sums its k steps, and the heads fold, in order.
        for (int mt0 = 0; mt0 < Hp / 16; mt0 += kHeadGroup) {
          float acc[kHeadGroup][QR][4];
#pragma unroll
          for (int m = 0; m < kHeadGroup; ++m)
#pragma unroll
            for (int i = 0; i < QR; ++i) acc[m][i][0] = acc[m][i][1] = acc[m][i][2] = acc[m][i][3] = 0.0f;
          for (int k0 = 0; k0 < Dp; k0 += 16) {
            std::uint32_t bf[QR][2];
            key_fragments(bf, k0);
#pragma unroll
            for (int m = 0; m < kHeadGroup; ++m) {
              if (mt0 + m >= Hp / 16) break;
              std::uint32_t af[4];
              ldmatrix_x4(af, ldmatrix_a_row(qs, ld, my_row * Hp + (mt0 + m) * 16, k0));
#pragma unroll
              for (int i = 0; i < QR; ++i) mma_bf16_16816(acc[m][i], af, bf[i]);
            }
          }
#pragma unroll
          for (int m = 0; m < kHeadGroup; ++m) {
            if (mt0 + m >= Hp / 16) break;
            const int h0 = (mt0 + m) * 16 + g, h1 = h0 + 8;
            const float w0 = qw[my_row * Hp + h0], w1 = qw[my_row * Hp + h1];
#pragma unroll
            for (int i = 0; i < QR; ++i) {
#pragma unroll
              for (int col = 0; col < 2; ++col) {
                float v = (h0 < H ? relu_ieee(acc[m][i][col]) * w0 : 0.0f) +
                          (h1 < H ? relu_ieee(acc[m][i][2 + col]) * w1 : 0.0f);
                v += __shfl_xor_sync(0xffffffffu, v, 4);
                v += __shfl_xor_sync(0xffffffffu, v, 8);
                v += __shfl_xor_sync(0xffffffffu, v, 16);
                score[i][col] += v;
              }
            }
          }
        }
        if (g == 0) {
          const std::int64_t n_row = min(row_n[my_row], k_end);
          float* out = p.scores + (row_t[my_row] - p.row0) * p.ld;
          for (int i = 0; i < QR; ++i) {
            for (int col = 0; col < 2; ++col) {
              const int key = (sub + kWarpsPerRow * i) * 8 + 2 * c + col;
              if (kt + key < n_row) out[kt + key] = kscale[key] * score[i][col];
            }
          }
        }
      };
      if constexpr (VectorCodes) {
        // Each tile's codes arrive by cp.async, 16 a copy, into a ring of two while the previous
        // tile is scored (a key past the chunk's end is zero-filled: codes 0 decode to +0); once a
        // tile has landed the block decodes it through the table into ks.
        const int vecs = D / 16;
        const std::int64_t page = p.cache.page_size;
        auto gather = [&](std::int64_t kt, int st) {
          for (int e = tid; e < kKeyTile * vecs; e += kThreads) {
            const int kk = e / vecs, v = e % vecs;
            const std::int64_t j = kt + kk;
            const bool ok = j < k_end;
            const std::uint8_t* src = blocks;
            if (ok) {
              const std::int64_t blk = p.cache.block_of(b, j), off = j % page;
              src = blocks + p.cache.row_offset(blk, 0, p.layer, off, 0) + 16 * v;
              if (v == 0) ring_scale[st * kKeyTile + kk] = p.cache.scale_at(p.cache.scale_offset(blk, 0, p.layer, off, 0));
            } else if (v == 0) {
              ring_scale[st * kKeyTile + kk] = 0.0f;
            }
            cp_async_16(codes + (st * kKeyTile + kk) * Dp + 16 * v, src, ok);
          }
        };
        gather(k_begin, 0);
        cp_async_commit();
        int st = 0;
        for (std::int64_t kt = k_begin; kt < k_end; kt += kKeyTile, st ^= 1) {
          // The other stage was last read by the previous tile's decode, before its second barrier.
          if (kt + kKeyTile < k_end) gather(kt + kKeyTile, st ^ 1);
          cp_async_commit();
          cp_async_wait<1>();
          __syncthreads();
          for (int e = tid; e < kKeyTile * vecs; e += kThreads) {
            const int kk = e / vecs, v = e % vecs;
            const uint4 x = *reinterpret_cast<const uint4*>(codes + (st * kKeyTile + kk) * Dp + 16 * v);
            *reinterpret_cast<uint4*>(at(ks, kk, 16 * v)) = decode_fp8x8(x.x, x.y, table);
            *reinterpret_cast<uint4*>(at(ks, kk, 16 * v + 8)) = decode_fp8x8(x.z, x.w, table);
          }
          if (tid < kKeyTile) kscale[tid] = ring_scale[st * kKeyTile + tid];
          if constexpr (kWg) fence_proxy_async();  // the decoded tile, before the products read it
          __syncthreads();
          score_tile(kt);  // ks and kscale are next written after the next tile's first barrier
        }
        cp_async_wait<0>();
      } else {
        for (std::int64_t kt = k_begin; kt < k_end; kt += kKeyTile) {
          if (tid < kKeyTile) {
            const std::int64_t j = kt + tid;
            if (j < k_end) {
              const std::int64_t blk = p.cache.block_of(b, j), off = j % p.cache.page_size;
              kbase[tid] = p.cache.row_offset(blk, 0, p.layer, off, 0);
              kscale[tid] = p.cache.scale_at(p.cache.scale_offset(blk, 0, p.layer, off, 0));
            } else {
              kbase[tid] = -1;
              kscale[tid] = 0.0f;
            }
          }
          __syncthreads();
          for (int e = tid; e < kKeyTile * Dp; e += kThreads) {
            const int kk = e / Dp, d = e % Dp;
            const std::int64_t base = kbase[kk];
            ks[kk * ld + d] = (base >= 0 && d < D) ? table[blocks[base + d]] : std::uint16_t{0};
          }
          __syncthreads();
          score_tile(kt);
          __syncthreads();
        }
      }
    }
    seg = seg_end;
  }
}

struct TopkParams {
  const float* scores;
  std::int64_t ld;
  const std::uint32_t* iro;
  const std::uint32_t* cache_lengths;
  int B;
  bool causal;
  std::int64_t row0, top_k;
  std::int32_t* out;
  unsigned long long* scratch;  // per block, scratch_stride entries (when the winners exceed shared memory)
  std::int64_t scratch_stride;
};

__global__ void __launch_bounds__(kTopkThreads) topk_kernel(TopkParams p) {
  __shared__ TopkShared<kTopkThreads> sm;
  __shared__ unsigned long long winners[kSharedWinners];
  const std::int64_t t = p.row0 + blockIdx.x;
  const int b = find_sequence(p.iro, p.B, t);
  const std::int64_t first = p.iro[b], last = p.iro[b + 1];
  const std::int64_t cache_len = p.cache_lengths[b];
  const std::int64_t n = p.causal ? cache_len + (t - first) + 1 : cache_len + (last - first);
  const std::int64_t m = min(p.top_k, n);
  const float* row = p.scores + blockIdx.x * p.ld;
  unsigned long long* buf =
      next_pow2(m) <= kSharedWinners ? winners : p.scratch + static_cast<std::int64_t>(blockIdx.x) * p.scratch_stride;
  if (m > 0)
    block_topk<kTopkThreads>(sm, static_cast<int>(n), static_cast<int>(m),
                             [row](int j) { return rank_key(row[j]); }, buf);
  std::int32_t* out = p.out + t * p.top_k;
  for (std::int64_t i = threadIdx.x; i < p.top_k; i += kTopkThreads)
    out[i] = i < m ? static_cast<std::int32_t>(winner_index(buf[i])) : -1;
}


// An index the host could not check (a run on device memory) that is below -1, past the table or
// on no page is written as -1 and raises the device error flag.
__global__ void remap_kernel(const std::int32_t* in, const std::uint32_t* iro, int B, const std::uint32_t* lut,
                             std::int64_t lut_cols, std::int64_t page_size, std::int64_t num_blocks, std::int64_t K,
                             std::int64_t total, std::int32_t* out, std::uint32_t* error_flag) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int32_t v = in[e];
    std::int64_t blk = -1;
    if (v >= 0 && v / page_size < lut_cols) {
      const int b = find_sequence(iro, B, e / K);
      blk = lut[b * lut_cols + v / page_size];
    }
    if (blk < 0 || blk >= num_blocks) {
      if (v != -1 && error_flag != nullptr) atomicOr(error_flag, core::kDeviceErrorRemapIndex);
      out[e] = -1;
      continue;
    }
    out[e] = static_cast<std::int32_t>(blk * page_size + v % page_size);
  }
}

}  // namespace

Status lightning_indexer(const LightningIndexerDesc& d, const LightningIndexerArgs& a, const LightningIndexerArgs& host,
                         const core::DeviceLaunch& launch) {
  const cudaStream_t stream = as_stream(launch.stream);
  const std::int64_t T = a.q.shape[0];
  if (T == 0) return Status::success();
  const int B = static_cast<int>(a.input_row_offsets.shape[0] - 1);
  const auto* iro = static_cast<const std::uint32_t*>(host.input_row_offsets.data);
  const auto* lens = static_cast<const std::uint32_t*>(host.k_cache.cache_lengths.data);
  std::int64_t max_keys = 1, max_rows = 1;
  for (int b = 0; b < B; ++b) {
    const std::int64_t seq = static_cast<std::int64_t>(iro[b + 1]) - iro[b];
    if (seq == 0) continue;
    max_keys = std::max(max_keys, static_cast<std::int64_t>(lens[b]) + seq);
    max_rows = std::max(max_rows, seq);
  }
  const int H = static_cast<int>(d.num_heads), D = static_cast<int>(d.head_dim);
  const int Hp = static_cast<int>(round_up(H, 16)), Dp = static_cast<int>(round_up(D, 16));

  Status s;
  const std::size_t smem_max = max_shared_memory(kOp, &s);
  MLAKIT_STATUS_TRY(s);
  int QR = max_rows >= 8 ? 8 : max_rows >= 4 ? 4 : max_rows >= 2 ? 2 : 1;
  const bool vector_codes = D % 16 == 0 && cache_rows_16_byte_aligned(a.k_cache.blocks);
  // The warpgroup kernel: DeepSeek's 64 heads of 128 (49-64 heads, the rest padding), sequences of
  // four new rows or more (a block's rows from four sequences would each pay for all four).
  const bool wg = wgmma_route::takes(false) && vector_codes && Hp == kWgHeads && Dp == kWgDim && max_rows >= kWgRows &&
                  ScoreLayout(kWgRows, Hp, Dp, true, true).bytes <= smem_max;
  if (wg) QR = kWgRows;
  while (!wg && QR > 1 && ScoreLayout(QR, Hp, Dp, vector_codes).bytes > smem_max) QR /= 2;
  const std::size_t smem = ScoreLayout(QR, Hp, Dp, vector_codes, wg).bytes;
  MLAKIT_STATUS_TRY(shared_memory_fits(kOp, "num_heads",
                                       "num_heads=" + std::to_string(H) + " with head_dim=" + std::to_string(D), smem,
                                       smem_max));
  void (*const score)(ScoreParams) =
      wg             ? score_kernel<kWgRows, true, true>
      : vector_codes ? (QR == 8   ? score_kernel<8, true>
                      : QR == 4 ? score_kernel<4, true>
                      : QR == 2 ? score_kernel<2, true>
                                : score_kernel<1, true>)
                   : (QR == 8   ? score_kernel<8, false>
                      : QR == 4 ? score_kernel<4, false>
                      : QR == 2 ? score_kernel<2, false>
                                : score_kernel<1, false>);

  // Row chunks bound the score buffer (and the global scratch of very large top_k).
  const std::int64_t winners_pow2 = next_pow2(std::min(d.top_k, max_keys));
  const std::int64_t scratch_per_row = winners_pow2 > kSharedWinners ? winners_pow2 : 0;
  const std::int64_t bytes_per_row = max_keys * 4 + scratch_per_row * 8;
  const std::int64_t chunk_rows = std::max<std::int64_t>(1, std::min(T, kScoreBudgetBytes / bytes_per_row));

  Temporaries tmp;
  const std::size_t scores = tmp.add(static_cast<std::size_t>(chunk_rows * max_keys * 4));
  const std::size_t scratch = tmp.add(static_cast<std::size_t>(chunk_rows * scratch_per_row * 8));
  if (launch.workspace_query != nullptr) {
    *launch.workspace_query = tmp.total();
    return Status::success();
  }
  MLAKIT_STATUS_TRY(tmp.acquire(kOp, launch, stream));
  if (wg) wgmma_route::count();

  ScoreParams sp;
  sp.q = static_cast<const std::uint8_t*>(a.q.data);
  sp.q_s = static_cast<const float*>(a.q_s.data);
  sp.iro = static_cast<const std::uint32_t*>(a.input_row_offsets.data);
  sp.cache = DevPagedCache::from(a.k_cache);
  sp.B = B;
  sp.H = H;
  sp.D = D;
  sp.Hp = Hp;
  sp.Dp = Dp;
  sp.layer = static_cast<int>(a.layer_idx);
  sp.causal = d.mask == IndexerMask::causal;
  sp.scores = tmp.at<float>(scores);
  sp.ld = max_keys;

  TopkParams tp;
  tp.scores = tmp.at<float>(scores);
  tp.ld = max_keys;
  tp.iro = sp.iro;
  tp.cache_lengths = sp.cache.cache_lengths;
  tp.B = B;
  tp.causal = sp.causal;
  tp.top_k = d.top_k;
  tp.out = static_cast<std::int32_t*>(a.output_indices.data);
  tp.scratch = scratch_per_row > 0 ? tmp.at<unsigned long long>(scratch) : nullptr;
  tp.scratch_stride = scratch_per_row;

  for (std::int64_t row0 = 0; row0 < T; row0 += chunk_rows) {
    const std::int64_t rows = std::min(chunk_rows, T - row0);
    sp.row0 = row0;
    sp.rows = rows;
    const dim3 grid(static_cast<unsigned>(ceil_div(rows, QR)),
                    static_cast<unsigned>(std::min<std::int64_t>(ceil_div(max_keys, kKeysPerBlock), 65535)));
    MLAKIT_STATUS_TRY(launch_kernel(kOp, wg ? "score_kernel (wgmma)" : "score_kernel", score, grid,
                                    wg ? kWgThreads : kScoreThreads, smem, stream, sp));
    tp.row0 = row0;
    MLAKIT_STATUS_TRY(launch_kernel(kOp, "topk_kernel", topk_kernel, static_cast<unsigned>(rows), kTopkThreads, 0,
                                    stream, tp));
  }
  return Status::success();
}

Status remap_indices_to_rows(const RemapIndicesArgs& a, const core::DeviceLaunch& launch) {
  const std::int64_t T = a.indices.shape[0], K = a.indices.shape[1];
  const std::int64_t total = T * K;
  if (total == 0 || launch.workspace_query != nullptr) return Status::success();  // no temporaries
  const std::int64_t blocks = std::min<std::int64_t>(ceil_div(total, 256), 65535);
  return launch_kernel("remap_indices_to_rows", "remap_kernel", remap_kernel, static_cast<unsigned>(blocks), 256, 0,
                       as_stream(launch.stream), static_cast<const std::int32_t*>(a.indices.data),
                       static_cast<const std::uint32_t*>(a.input_row_offsets.data),
                       static_cast<int>(a.input_row_offsets.shape[0] - 1),
                       static_cast<const std::uint32_t*>(a.lookup_table.data), a.lookup_table.shape[1], a.page_size,
                       a.num_blocks, K, total, static_cast<std::int32_t*>(a.rows.data), launch.error_flag);
}

}  // namespace mlakit::cuda
