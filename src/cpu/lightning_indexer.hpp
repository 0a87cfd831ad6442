// cpu back-end of op 1 (docs/lightning_indexer.md) and of its companion remap. Called only after validation.
//
// Plan: rows are taken in order in chunks whose f32 score rows fit the workspace budget
// (cpu::workspace_budget_bytes(), at most kMaxChunkBytes per chunk). Within a chunk:
//  1. scoring, in parallel over fixed work items: (sequence, query tile of kQueryTile rows, key
//     range of kKeySplit keys). An item packs its queries once (simd index_score: heads in vector
//     lanes), then walks its key range kKeyTile keys at a time: the tile's K rows and scales are
//     located through the page table and decoded once (fp8 -> f32, exact) and reused for every
//     query row and head of the item — or, for items of fewer rows than the level's
//     decode_pass_rows (decode; every item on bf16-dot levels), read in place by the kernel,
//     which converts each register tile's keys itself (same bits). ReLU x weight x
//     head-sum is the epilogue of the register tile, so one f32 score per (row, key) is stored.
//  2. selection, in parallel over rows: the simd top-k (TopkNan::last, the spec's order) writes
//     the min(top_k, n) best positions and the -1 tail.
// Tile boundaries depend only on the problem (never on the thread count or the budget), and a
// key's score does not depend on the tile it was computed in, so outputs are bitwise identical for
// any number of threads, any workspace budget and repeated calls. Scores accumulate in f32: they
// differ from the reference's f64 scores within the spec's bound (the golden matrix's structural
// check), and match it exactly on data whose scores are exact in f32.
//
// Workspace: the chunk's score rows (bounded as above; one chunk always holds at least one row,
// so a row longer than the budget is still served), plus per thread kQueryTile packed queries
// (at most 4·(H rounded up to the vector width)·(D+1) bytes each), one decoded key tile
// (4·kKeyTile·(D+1) bytes) and the top-k scratch of one row (about 8 bytes per candidate key).
#pragma once

#include <cstdint>

#include "cpu/common/parallel.hpp"
#include "mlakit/ops/lightning_indexer.hpp"

namespace mlakit::cpu {

Status lightning_indexer(const LightningIndexerDesc& desc, const LightningIndexerArgs& args);

// A gather: the scalar code the reference back-end uses.
Status remap_indices_to_rows(const RemapIndicesArgs& args);

namespace lightning_indexer_detail {

constexpr std::int64_t kQueryTile = 8;      // query rows per work item
constexpr std::int64_t kKeyTile = 256;      // keys decoded at once (128 KiB of f32 rows at D = 128: L2)
constexpr std::int64_t kKeySplit = 4096;    // keys per work item (decode rows split their keys)
constexpr std::int64_t kMaxChunkBytes = std::int64_t{64} << 20;  // score rows per chunk, below the budget

// For benchmarks: the operator with selection skipped (scores_only) — the scores are computed
// into the chunk buffers exactly as in a full call and output_indices is left untouched.
Status run(const LightningIndexerDesc& desc, const LightningIndexerArgs& args, bool scores_only);
// What run() takes from call_buffer() for this call (a validated host call).
CallBufferSizes call_buffers(const LightningIndexerDesc& desc, const LightningIndexerArgs& args);

}  // namespace lightning_indexer_detail

}  // namespace mlakit::cpu
