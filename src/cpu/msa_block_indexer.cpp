// cpu back-end of the MSA block indexer (docs/msa_block_indexer.md).
//
// Work. The query rows of one sequence that read one K head (Hk heads; index head h reads K head
// h / G, G = Hi / Hk), flattened (token, head of the group) -> token * G + j, are cut into query
// tiles of whole tokens, about kTileRows rows; the Hk tiles of one token range are consecutive.
// Each query tile's rows are packed once (simd
// block_score pack_q: groups of `lanes` rows, transposed, f32 or bf16 pairs by level) and scored
// against the key blocks its last row sees, in key ranges of a few blocks: a work tile is (query
// tile, block range). For each block the block_score kernel converts the page's keys once per
// chunk (or reads bf16 keys in place) and uses them for every row of the tile, and writes scale * block max per row with the row's causal cut
// (keys >= nk) and NaN stickiness in its epilogue. Block maxima go to a score buffer
// [row][block]; then each (head, row) takes its forced init/local values and is selected with
// the simd top-k (TopkNan::exclude). With reduce_heads a token's heads (in the Hk tiles of its
// token range) are first folded into one score row, the IEEE maximum with NaN sticking.
//
// Determinism. A row's block maximum depends only on the row, the keys and the level (see
// simd/block_score.hpp): never on the tile, the chunk, the thread or the call path. Tiles are
// fixed by the problem (kTileRows, kGroupBlocks), not by the thread count, and write disjoint
// scores; so results are bitwise identical for 1, 2 or N threads, for any workspace budget, and a
// decode call (one token per sequence) gives exactly what a prefill call gives for the same row.
//
// Memory. Per call, chunks of consecutive query tiles whose packed queries and block scores fit
// workspace_budget_bytes() (at least one tile per chunk); per thread, the kernel scratch (a key
// chunk in L1), the per-lane limits and the top-k scratch.
#include "cpu/msa_block_indexer.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/common/kernels.hpp"
#include "cpu/common/parallel.hpp"

namespace mlakit::cpu {
namespace {

// Query rows per query tile: a multiple of every level's lanes (4, 8, 16). 256 rows = 32 tokens
// of 8 index heads: 128 KiB of packed queries (f32, Di 128; 64 KiB as bf16 pairs), reused for
// every block of the tile.
constexpr std::size_t kTileRows = 256;
// Work of one tile, in (lane group x key block) units: 64 keeps a tile near 1 M multiply-add
// instructions (~0.2 ms on one Zen 3 core) for both a 32-group prefill tile (2 blocks) and a
// one-group decode token (64 blocks), so that even a B=1 decode splits into several tiles.
constexpr std::size_t kGroupBlocks = 64;

constexpr float kInitScore = 1e30f;
constexpr float kLocalScore = 1e29f;

struct QueryTile {
  std::int64_t seq;
  std::int64_t tok0;        // first token; row r is token tok0 + r / G, index head kh * G + r % G
  std::int64_t kh;          // the K head the tile's rows read
  std::size_t rows;         // ntok * G
  std::size_t groups;       // ceil(rows / lanes)
  std::size_t blocks;       // blocks of the tile's last row (the most any row sees)
  std::size_t q_at;         // bytes into the chunk's packed queries
  std::size_t s_at;         // floats into the chunk's block scores: row r, block c at s_at + r*blocks + c
};

struct WorkTile {
  std::size_t tile;
  std::size_t c0, c1;  // blocks
};

struct Plan {
  const MsaBlockIndexerDesc* d;
  const MsaBlockIndexerArgs* a;
  const simd::BlockScoreKernels* bs;
  const simd::TopkKernels* topk;
  std::int64_t heads, group, k_heads, dim, block, rows_total, max_pages, layer;
  const std::uint32_t* offsets;
  const std::uint32_t* prefix;
  const std::uint32_t* lut;
  bool fp8, reduce;

  // Keys visible to token t of sequence b: nk = prefix + i + 1.
  std::int64_t visible_to(std::int64_t b, std::int64_t t) const {
    return static_cast<std::int64_t>(prefix[b]) + (t - static_cast<std::int64_t>(offsets[b])) + 1;
  }
  std::int64_t token_of(const QueryTile& qt, std::size_t r) const { return qt.tok0 + static_cast<std::int64_t>(r) / group; }
  std::int64_t visible(const QueryTile& qt, std::size_t r) const { return visible_to(qt.seq, token_of(qt, r)); }
  std::size_t blocks_of(std::int64_t nk) const { return static_cast<std::size_t>((nk + block - 1) / block); }
};

void score_tile(const Plan& p, const QueryTile& qt, std::size_t c0, std::size_t c1, const void* packed,
                float* scores) {
  const std::size_t lanes = p.bs->lanes;
  const std::size_t slots = qt.groups * lanes;
  void* kscratch = thread_scratch(p.bs->scratch_bytes(qt.rows, static_cast<std::size_t>(p.dim)), 0);
  auto* limit = static_cast<std::int32_t*>(thread_scratch(slots * (sizeof(std::int32_t) + sizeof(float)), 1));
  auto* out = reinterpret_cast<float*>(limit + slots);
  const PagedKVCacheView& c = p.a->k_cache;
  const std::int64_t total_keys = p.visible(qt, qt.rows - 1);  // keys that exist for this tile
  const std::int64_t first_nk = p.visible(qt, 0);
  const std::size_t dim = static_cast<std::size_t>(p.dim);
  const std::size_t ldk = static_cast<std::size_t>(c.blocks.strides[3]);  // a page's rows, one after another
  auto page_at = [&](std::size_t blk) {
    const std::int64_t page = p.lut[qt.seq * p.max_pages + static_cast<std::int64_t>(blk)];
    return c.row_offset(page, 0, p.layer, 0, qt.kh);
  };
  for (std::size_t blk = c0; blk < c1; ++blk) {
    const std::int64_t key0 = static_cast<std::int64_t>(blk) * p.block;
    const std::int64_t n = std::min<std::int64_t>(p.block, total_keys - key0);
    // Every row sees the whole block unless the block reaches past the first row's cut. Then no
    // limits are passed, even when the tile's last group has lanes past its rows (a decode
    // token's 8 heads in 16 lanes): the kernel's results for those lanes are not read, and
    // without limits it takes its unmasked fold.
    const bool full = key0 + n <= first_nk;
    if (!full) {
      for (std::size_t r = 0; r < slots; ++r) {
        std::int64_t lim = 0;
        if (r < qt.rows) lim = std::clamp<std::int64_t>(p.visible(qt, r) - key0, 0, n);
        limit[r] = static_cast<std::int32_t>(lim);
      }
    }
    // This block's page, and the next one of the tile for the kernel to prefetch.
    const std::int64_t at = page_at(blk);
    std::int64_t next_at = 0, next_n = 0;
    if (blk + 1 < c1) {
      next_at = page_at(blk + 1);
      next_n = std::min<std::int64_t>(p.block, total_keys - key0 - p.block);
    }
    if (p.fp8) {
      const auto* keys = c.blocks.as<const std::uint8_t>();
      p.bs->block_max_f8(qt.rows, dim, packed, keys + at, ldk, static_cast<std::size_t>(n), full ? nullptr : limit,
                         p.d->scale, out, kscratch, next_n > 0 ? keys + next_at : nullptr,
                         static_cast<std::size_t>(next_n));
    } else {
      const auto* keys = c.blocks.as<const std::uint16_t>();
      p.bs->block_max_bf16(qt.rows, dim, packed, keys + at, ldk, static_cast<std::size_t>(n), full ? nullptr : limit,
                           p.d->scale, out, kscratch, next_n > 0 ? keys + next_at : nullptr,
                           static_cast<std::size_t>(next_n));
    }
    for (std::size_t r = 0; r < qt.rows; ++r) scores[r * qt.blocks + blk] = out[r];
  }
}

// Forced values, then the top-k of one score row s[0 .. nb) into o[0 .. topk).
void select_row(const Plan& p, float* s, std::size_t nb, std::int32_t* o, void* scratch) {
  const std::int64_t topk = p.d->topk;
  const std::size_t init = std::min<std::size_t>(nb, static_cast<std::size_t>(p.d->init_blocks));
  for (std::size_t blk = 0; blk < init; ++blk) s[blk] = kInitScore;
  const std::size_t local = std::min<std::size_t>(nb, static_cast<std::size_t>(p.d->local_blocks));
  for (std::size_t blk = nb - local; blk < nb; ++blk) s[blk] = kLocalScore;  // second: wins over init
  const std::size_t want = std::min<std::size_t>(static_cast<std::size_t>(topk), nb);
  const std::size_t m = p.topk->select(s, nb, want, simd::TopkNan::exclude, o, scratch);
  for (std::size_t col = m; col < static_cast<std::size_t>(topk); ++col) o[col] = -1;
}

void select_tile(const Plan& p, const QueryTile& qt, float* scores) {
  const std::size_t want_max = std::min<std::size_t>(static_cast<std::size_t>(p.d->topk), qt.blocks);
  void* scratch = thread_scratch(simd::topk_scratch_bytes(qt.blocks, want_max), 2);
  auto* out = p.a->out_idxs.as<std::int32_t>();
  for (std::size_t r = 0; r < qt.rows; ++r) {
    const std::int64_t t = p.token_of(qt, r), h = qt.kh * p.group + static_cast<std::int64_t>(r) % p.group;
    const std::size_t nb = p.blocks_of(p.visible(qt, r));
    select_row(p, scores + r * qt.blocks, nb, out + (h * p.rows_total + t) * p.d->topk, scratch);
  }
}

// reduce_heads: the Hk tiles [first, first + Hk) of one token range hold every head of its tokens.
// Each token's head rows are folded into its first row of the first tile (IEEE maximum, NaN
// sticking; heads in ascending order, though the result does not depend on it), then selected.
void select_reduced(const Plan& p, const QueryTile* tiles, float* chunk_scores) {
  const QueryTile& qt = tiles[0];
  const std::size_t want_max = std::min<std::size_t>(static_cast<std::size_t>(p.d->topk), qt.blocks);
  void* scratch = thread_scratch(simd::topk_scratch_bytes(qt.blocks, want_max), 2);
  auto* out = p.a->out_idxs.as<std::int32_t>();
  const std::size_t group = static_cast<std::size_t>(p.group);
  for (std::size_t r = 0; r < qt.rows; r += group) {
    const std::size_t nb = p.blocks_of(p.visible(qt, r));
    float* s = chunk_scores + tiles[0].s_at + r * qt.blocks;
    for (std::int64_t g = 0; g < p.k_heads; ++g)
      for (std::size_t j = g == 0 ? 1 : 0; j < group; ++j) {
        const float* x = chunk_scores + tiles[g].s_at + (r + j) * qt.blocks;
        for (std::size_t c = 0; c < nb; ++c)
          if (!(s[c] != s[c]) && (x[c] != x[c] || x[c] > s[c])) s[c] = x[c];
      }
    select_row(p, s, nb, out + p.token_of(qt, r) * p.d->topk, scratch);
  }
}

Plan plan_of(const MsaBlockIndexerDesc& d, const MsaBlockIndexerArgs& a) {
  Plan p{};
  p.d = &d;
  p.a = &a;
  p.bs = &block_score_kernels();
  p.topk = &topk_kernels();
  p.heads = d.num_index_heads;
  p.k_heads = d.num_k_heads;
  p.group = d.num_index_heads / d.num_k_heads;
  p.reduce = d.reduce_heads;
  p.dim = d.idx_head_dim;
  p.block = d.block_size;
  p.rows_total = a.q.shape[0];
  p.max_pages = a.k_cache.lookup_table.shape[1];
  p.layer = a.layer_idx;
  p.offsets = a.input_row_offsets.as<const std::uint32_t>();
  p.prefix = a.prefix_lens.as<const std::uint32_t>();
  p.lut = a.k_cache.lookup_table.as<const std::uint32_t>();
  p.fp8 = a.k_cache.blocks.dtype == DType::f8e4m3;
  return p;
}

// Query tiles: per sequence, token ranges of about kTileRows rows, and per range one tile for each
// K head; never across a sequence.
std::vector<QueryTile> query_tiles(const Plan& p, std::int64_t batch) {
  const std::size_t lanes = p.bs->lanes;
  const std::int64_t per = std::max<std::int64_t>(1, static_cast<std::int64_t>(kTileRows) / p.group);
  std::vector<QueryTile> tiles;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t t1 = p.offsets[b + 1];
    for (std::int64_t t0 = p.offsets[b]; t0 < t1; t0 += per) {
      for (std::int64_t kh = 0; kh < p.k_heads; ++kh) {
        QueryTile qt{};
        qt.seq = b;
        qt.tok0 = t0;
        qt.kh = kh;
        qt.rows = static_cast<std::size_t>(std::min(per, t1 - t0) * p.group);
        qt.groups = (qt.rows + lanes - 1) / lanes;
        qt.blocks = p.blocks_of(p.visible(qt, qt.rows - 1));
        tiles.push_back(qt);
      }
    }
  }
  return tiles;
}

// The chunk from tile t0: consecutive query tiles within the workspace budget (at least one),
// their packed queries and block scores placed; returns the end tile.
std::size_t chunk_end(const Plan& p, std::vector<QueryTile>& tiles, std::size_t t0, std::size_t* q_bytes,
                      std::size_t* s_floats) {
  const std::size_t budget = workspace_budget_bytes();
  const std::size_t dim = static_cast<std::size_t>(p.dim);
  // Whole token ranges (k_heads tiles each), so that reduce_heads finds every head in the chunk.
  const std::size_t range = static_cast<std::size_t>(p.k_heads);
  std::size_t t1 = t0;
  *q_bytes = 0;
  *s_floats = 0;
  while (t1 < tiles.size()) {
    std::size_t qb = 0, sf = 0;
    for (std::size_t t = t1; t < t1 + range; ++t) {
      qb += (p.bs->packed_q_bytes(tiles[t].rows, dim) + 63) / 64 * 64;
      sf += tiles[t].rows * tiles[t].blocks;
    }
    if (t1 > t0 && *q_bytes + qb + (*s_floats + sf) * sizeof(float) > budget) break;
    for (std::size_t t = t1; t < t1 + range; ++t) {
      QueryTile& qt = tiles[t];
      qt.q_at = *q_bytes;
      qt.s_at = *s_floats;
      *q_bytes += (p.bs->packed_q_bytes(qt.rows, dim) + 63) / 64 * 64;
      *s_floats += qt.rows * qt.blocks;
    }
    t1 += range;
  }
  return t1;
}

}  // namespace

CallBufferSizes msa_block_indexer_call_buffers(const MsaBlockIndexerDesc& d, const MsaBlockIndexerArgs& a) {
  CallBufferSizes sizes;
  if (a.q.shape[0] == 0) return sizes;
  const Plan p = plan_of(d, a);
  std::vector<QueryTile> tiles = query_tiles(p, a.input_row_offsets.shape[0] - 1);
  for (std::size_t t0 = 0; t0 < tiles.size();) {
    std::size_t q_bytes = 0, s_floats = 0;
    t0 = chunk_end(p, tiles, t0, &q_bytes, &s_floats);
    sizes.grow(0, q_bytes);
    sizes.grow(1, s_floats * sizeof(float));
  }
  return sizes;
}

Status msa_block_indexer(const MsaBlockIndexerDesc& d, const MsaBlockIndexerArgs& a) {
  const std::int64_t rows_total = a.q.shape[0];
  if (rows_total == 0) return Status::success();

  const Plan p = plan_of(d, a);
  const std::int64_t batch = a.input_row_offsets.shape[0] - 1;
  const std::size_t dim = static_cast<std::size_t>(p.dim);

  std::vector<QueryTile> tiles = query_tiles(p, batch);
  const auto* q = a.q.as<const std::uint16_t>();
  std::vector<WorkTile> work;
  for (std::size_t t0 = 0; t0 < tiles.size();) {
    std::size_t q_bytes = 0, s_floats = 0;
    const std::size_t t1 = chunk_end(p, tiles, t0, &q_bytes, &s_floats);
    unsigned char* const packed = call_buffer_of<unsigned char>(q_bytes, 0);
    float* const scores = call_buffer_of<float>(s_floats, 1);

    parallel_for_each(t1 - t0, [&](std::size_t i) {
      const QueryTile& qt = tiles[t0 + i];
      const std::uint16_t* rows = q + static_cast<std::size_t>(qt.tok0 * p.heads) * dim;
      if (p.k_heads > 1) {  // the group's heads of each token, gathered into consecutive rows
        const std::size_t group = static_cast<std::size_t>(p.group), heads = static_cast<std::size_t>(p.heads);
        auto* gathered = static_cast<std::uint16_t*>(thread_scratch(qt.rows * dim * sizeof(std::uint16_t), 0));
        for (std::size_t r = 0; r < qt.rows; r += group)
          std::copy_n(rows + ((r / group) * heads + static_cast<std::size_t>(qt.kh) * group) * dim, group * dim,
                      gathered + r * dim);
        rows = gathered;
      }
      p.bs->pack_q(rows, qt.rows, dim, dim, packed + qt.q_at);
    });

    // Work tiles: each query tile's blocks in ranges of about kGroupBlocks / groups blocks.
    work.clear();
    for (std::size_t t = t0; t < t1; ++t) {
      const QueryTile& qt = tiles[t];
      const std::size_t per = std::max<std::size_t>(1, kGroupBlocks / qt.groups);
      const std::size_t ranges = (qt.blocks + per - 1) / per;
      const std::size_t len = (qt.blocks + ranges - 1) / ranges;
      for (std::size_t c0 = 0; c0 < qt.blocks; c0 += len) work.push_back({t, c0, std::min(qt.blocks, c0 + len)});
    }
    parallel_for_each(work.size(), [&](std::size_t i) {
      const WorkTile& w = work[i];
      const QueryTile& qt = tiles[w.tile];
      score_tile(p, qt, w.c0, w.c1, packed + qt.q_at, scores + qt.s_at);
    });

    if (p.reduce) {
      const std::size_t range = static_cast<std::size_t>(p.k_heads);
      parallel_for_each((t1 - t0) / range, [&](std::size_t i) {
        select_reduced(p, &tiles[t0 + i * range], scores);
      });
    } else {
      parallel_for_each(t1 - t0, [&](std::size_t i) {
        const QueryTile& qt = tiles[t0 + i];
        select_tile(p, qt, scores + qt.s_at);
      });
    }
    t0 = t1;
  }
  return Status::success();
}

}  // namespace mlakit::cpu
