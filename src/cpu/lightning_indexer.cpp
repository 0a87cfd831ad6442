#include "cpu/lightning_indexer.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/common/kernels.hpp"
#include "cpu/common/parallel.hpp"
#include "core/shared/remap_indices.hpp"

namespace mlakit::cpu {
namespace lightning_indexer_detail {
namespace {

// One query row of the call: its sequence, its candidate count and where its scores go.
struct Row {
  std::int64_t seq;
  std::int64_t n;       // candidate keys 0 .. n-1
  std::int64_t offset;  // of its scores in the chunk buffer
};

// Scoring work: rows [row0, row0 + rows) of one sequence (indices into the chunk's rows) against
// keys [key0, key1).
struct Item {
  std::int64_t row0, rows, key0, key1;
};

// The call's fixed data and the kernels chosen for it.
struct Plan {
  std::int64_t H, D, top_k, layer, page_size, max_pages;
  const std::uint8_t* q;
  const float* q_s;
  const std::uint8_t* blocks;
  const float* scales;
  const std::uint32_t* lut;
  const PagedKVCacheView* cache;
  const simd::IndexScoreKernels* score;
  const simd::Fp8DecodeKernels* decode;
  const simd::TopkKernels* topk;
};

// Chunk buffers belong to the calling thread (never to a worker's scratch slots, which tasks of
// other calls running on this thread may reuse).
float* chunk_buffer(std::size_t floats) { return call_buffer_of<float>(floats, 0); }

// Keys [j0, j0 + nk) of sequence b: K rows decoded to f32 (stride D) and their scales, one page
// run at a time.
void gather_keys(const Plan& p, std::int64_t b, std::int64_t j0, std::int64_t nk, float* k, float* ks) {
  const PagedKVCacheView& c = *p.cache;
  for (std::int64_t j = j0; j < j0 + nk;) {
    const std::int64_t blk = p.lut[b * p.max_pages + j / p.page_size];
    const std::int64_t off = j % p.page_size;
    const std::int64_t run = std::min(p.page_size - off, j0 + nk - j);
    const std::uint8_t* rows = p.blocks + c.row_offset(blk, 0, p.layer, off, 0);
    const std::int64_t ld = c.blocks.strides[3];
    if (ld == p.D) {  // the page's rows back to back: one run
      p.decode->to_f32(rows, k + (j - j0) * p.D, static_cast<std::size_t>(run * p.D));
    } else {
      for (std::int64_t r = 0; r < run; ++r)
        p.decode->to_f32(rows + r * ld, k + (j - j0 + r) * p.D, static_cast<std::size_t>(p.D));
    }
    const float* s = p.scales + c.scale_offset(blk, 0, p.layer, off, 0);
    const std::int64_t stride = c.scales.strides[3];
    for (std::int64_t r = 0; r < run; ++r) ks[j - j0 + r] = s[r * stride];
    j += run;
  }
}

// Keys [j0, j0 + nk) of sequence b read in place: a pointer to each fp8 row, and the scales.
void locate_keys(const Plan& p, std::int64_t b, std::int64_t j0, std::int64_t nk, const std::uint8_t** rows,
                 float* ks) {
  const PagedKVCacheView& c = *p.cache;
  const std::int64_t stride = c.scales.strides[3], ld = c.blocks.strides[3];
  for (std::int64_t j = j0; j < j0 + nk;) {
    const std::int64_t blk = p.lut[b * p.max_pages + j / p.page_size];
    const std::int64_t off = j % p.page_size;
    const std::int64_t run = std::min(p.page_size - off, j0 + nk - j);
    const std::uint8_t* k = p.blocks + c.row_offset(blk, 0, p.layer, off, 0);
    const float* s = p.scales + c.scale_offset(blk, 0, p.layer, off, 0);
    for (std::int64_t r = 0; r < run; ++r) {
      rows[j - j0 + r] = k + r * ld;
      ks[j - j0 + r] = s[r * stride];
    }
    j += run;
  }
}

void score_item(const Plan& p, const Item& it, const std::vector<Row>& rows, std::int64_t chunk_t0, float* buf) {
  const std::size_t H = static_cast<std::size_t>(p.H), D = static_cast<std::size_t>(p.D);
  const std::size_t qfloats = p.score->packed_floats(H, D);
  auto* packed = static_cast<float*>(thread_scratch(qfloats * sizeof(float) * static_cast<std::size_t>(it.rows), 0));
  for (std::int64_t r = 0; r < it.rows; ++r) {
    const std::int64_t t = chunk_t0 + it.row0 + r;
    p.score->pack_query(p.q + t * p.H * p.D, p.q_s + t * p.H, H, D, packed + r * qfloats);
  }
  const std::int64_t seq = rows[it.row0].seq;
  const std::int64_t tile = std::min(kKeyTile, it.key1 - it.key0);
  // Few rows share the keys: score the fp8 rows in place (a decode pass would cost more than it
  // saves). Otherwise decode each key tile once for all the item's rows. Both give the same bits.
  const bool in_place = p.score->decode_pass_rows == 0 || it.rows < p.score->decode_pass_rows;
  void* keys = thread_scratch(static_cast<std::size_t>(tile) * (in_place ? sizeof(void*) + sizeof(float)
                                                                          : (D + 1) * sizeof(float)),
                              1);
  auto* kf = static_cast<float*>(keys);
  auto* kp = static_cast<const std::uint8_t**>(keys);
  float* ks = in_place ? reinterpret_cast<float*>(kp + tile) : kf + tile * p.D;
  for (std::int64_t j0 = it.key0; j0 < it.key1; j0 += kKeyTile) {
    const std::int64_t nk = std::min(kKeyTile, it.key1 - j0);
    if (in_place) locate_keys(p, seq, j0, nk, kp, ks);
    else gather_keys(p, seq, j0, nk, kf, ks);
    std::size_t n[kQueryTile];  // causal rows see fewer keys
    float* dst[kQueryTile];
    for (std::int64_t r = 0; r < it.rows; ++r) {
      const Row& row = rows[it.row0 + r];
      n[r] = static_cast<std::size_t>(std::clamp<std::int64_t>(row.n - j0, 0, nk));
      dst[r] = n[r] ? buf + row.offset + j0 : nullptr;
    }
    if (in_place && p.score->score_f8_queries) {  // the level converts each key once for all rows
      p.score->score_f8_queries(packed, qfloats, static_cast<std::size_t>(it.rows), H, D, kp, ks, n, dst);
      continue;
    }
    for (std::int64_t r = 0; r < it.rows; ++r) {
      if (n[r] == 0) continue;
      if (in_place) p.score->score_f8(packed + r * qfloats, H, D, kp, ks, n[r], dst[r]);
      else p.score->score(packed + r * qfloats, H, D, kf, D, ks, n[r], dst[r]);
    }
  }
}

void select_row(const Plan& p, const Row& row, const float* buf, std::int32_t* out) {
  const std::size_t n = static_cast<std::size_t>(row.n), k = static_cast<std::size_t>(p.top_k);
  void* scratch = thread_scratch(simd::topk_scratch_bytes(n, k), 2);
  const std::size_t m = p.topk->select(buf + row.offset, n, k, simd::TopkNan::last, out, scratch);
  std::fill(out + m, out + k, -1);
}

// Every row's sequence and candidate count, in row order.
std::vector<Row> all_rows(const LightningIndexerDesc& desc, const LightningIndexerArgs& args) {
  const auto* offsets = args.input_row_offsets.as<const std::uint32_t>();
  const auto* cache_lengths = args.k_cache.cache_lengths.as<const std::uint32_t>();
  const std::int64_t B = args.input_row_offsets.shape[0] - 1;
  const bool causal = desc.mask == IndexerMask::causal;
  std::vector<Row> all(static_cast<std::size_t>(args.q.shape[0]));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t first = offsets[b], last = offsets[b + 1], cl = cache_lengths[b];
    for (std::int64_t t = first; t < last; ++t)
      all[static_cast<std::size_t>(t)] = {b, causal ? cl + (t - first) + 1 : cl + (last - first), 0};
  }
  return all;
}

std::int64_t chunk_budget() {
  return static_cast<std::int64_t>(std::min(static_cast<std::size_t>(kMaxChunkBytes), workspace_budget_bytes()));
}

// The chunk from row t0: rows t0 .. end-1, at least one, their score rows within the budget.
std::int64_t chunk_end(const std::vector<Row>& all, std::int64_t t0, std::int64_t budget, std::int64_t* floats) {
  const std::int64_t T = static_cast<std::int64_t>(all.size());
  std::int64_t t1 = t0;
  *floats = 0;
  while (t1 < T && (t1 == t0 || (*floats + all[t1].n) * 4 <= budget)) *floats += all[t1++].n;
  return t1;
}

}  // namespace

CallBufferSizes call_buffers(const LightningIndexerDesc& desc, const LightningIndexerArgs& args) {
  CallBufferSizes sizes;
  const std::vector<Row> all = all_rows(desc, args);
  const std::int64_t budget = chunk_budget();
  for (std::int64_t t0 = 0, floats = 0; t0 < static_cast<std::int64_t>(all.size());) {
    t0 = chunk_end(all, t0, budget, &floats);
    sizes.grow(0, static_cast<std::size_t>(floats) * sizeof(float));
  }
  return sizes;
}

Status run(const LightningIndexerDesc& desc, const LightningIndexerArgs& args, bool scores_only) {
  const std::int64_t T = args.q.shape[0];
  if (T == 0) return Status::success();
  const PagedKVCacheView& cache = args.k_cache;
  Plan p{};
  p.H = desc.num_heads;
  p.D = desc.head_dim;
  p.top_k = desc.top_k;
  p.layer = args.layer_idx;
  p.page_size = cache.page_size();
  p.max_pages = cache.lookup_table.shape[1];
  p.q = args.q.as<const std::uint8_t>();
  p.q_s = args.q_s.as<const float>();
  p.blocks = cache.blocks.as<const std::uint8_t>();
  p.scales = cache.scales.as<const float>();
  p.lut = cache.lookup_table.as<const std::uint32_t>();
  p.cache = &cache;
  p.score = &index_score_kernels();
  p.decode = &fp8_decode_kernels();
  p.topk = &topk_kernels();
  auto* out = args.output_indices.as<std::int32_t>();

  const std::vector<Row> all = all_rows(desc, args);
  const std::int64_t budget = chunk_budget();
  std::vector<Row> rows;
  std::vector<Item> items;
  for (std::int64_t t0 = 0; t0 < T;) {
    std::int64_t floats = 0;
    const std::int64_t t1 = chunk_end(all, t0, budget, &floats);
    rows.assign(all.begin() + t0, all.begin() + t1);
    std::int64_t off = 0;
    for (Row& r : rows) {
      r.offset = off;
      off += r.n;
    }
    float* buf = chunk_buffer(static_cast<std::size_t>(floats));

    // Items: per sequence run, query tiles counted from the run's first row in the chunk, each
    // split into key ranges of kKeySplit (the tile's last row sees the most keys).
    items.clear();
    for (std::int64_t r0 = 0; r0 < t1 - t0;) {
      std::int64_t r1 = r0;
      while (r1 < t1 - t0 && rows[r1].seq == rows[r0].seq) ++r1;
      for (std::int64_t a = r0; a < r1; a += kQueryTile) {
        const std::int64_t n = std::min(kQueryTile, r1 - a);
        const std::int64_t keys = rows[a + n - 1].n;
        for (std::int64_t k0 = 0; k0 < keys; k0 += kKeySplit) items.push_back({a, n, k0, std::min(keys, k0 + kKeySplit)});
      }
      r0 = r1;
    }
    parallel_for_each(items.size(), [&](std::size_t i) { score_item(p, items[i], rows, t0, buf); });
    if (!scores_only)
      parallel_for_each(rows.size(), [&](std::size_t i) {
        select_row(p, rows[i], buf, out + (t0 + static_cast<std::int64_t>(i)) * p.top_k);
      });
    t0 = t1;
  }
  return Status::success();
}

}  // namespace lightning_indexer_detail

Status lightning_indexer(const LightningIndexerDesc& desc, const LightningIndexerArgs& args) {
  return lightning_indexer_detail::run(desc, args, false);
}

Status remap_indices_to_rows(const RemapIndicesArgs& args) {
  shared::remap_indices_to_rows(args);
  return Status::success();
}

}  // namespace mlakit::cpu
