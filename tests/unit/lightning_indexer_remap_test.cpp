// remap_indices_to_rows (docs/lightning_indexer.md §9): exact values on hand-built tables, the composition
// with the indexer's output, and every rejected input (nothing written when rejected).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "goldens/common/driver.hpp"
#include "mlakit/ops/lightning_indexer.hpp"
#include "support/lone_buffer.hpp"

namespace mlakit {
namespace {

using goldens::Tensor;

// Two sequences (rows 0-1 and row 2), pages of 4, 7 blocks (7 = the sentinel), 3 table columns.
struct Remap {
  Tensor indices{DType::i32, {3, 4}};
  Tensor offsets{DType::u32, {3}};
  Tensor lut{DType::u32, {2, 3}};
  Tensor rows{DType::i32, {3, 4}};
  RemapIndicesArgs a;

  Remap() {
    const std::int32_t idx[12] = {0, 5, -1, 3, /**/ 7, 4, -1, -1, /**/ 6, 0, 1, -1};
    std::copy(idx, idx + 12, indices.data<std::int32_t>());
    const std::uint32_t off[3] = {0, 2, 3};
    std::copy(off, off + 3, offsets.data<std::uint32_t>());
    const std::uint32_t table[6] = {5, 2, 7, /**/ 0, 1, 7};
    std::copy(table, table + 6, lut.data<std::uint32_t>());
    rows.poison();
    a.indices = indices.view();
    a.input_row_offsets = offsets.view();
    a.lookup_table = lut.view();
    a.page_size = 4;
    a.num_blocks = 7;
    a.rows = rows.view();
  }
  std::vector<std::int32_t> result() const { return {rows.data<std::int32_t>(), rows.data<std::int32_t>() + 12}; }
};

TEST(LightningIndexerRemap, MapsPositionsThroughTheTableAndKeepsMinusOne) {
  for (Backend be : {Backend::automatic, Backend::reference, Backend::cpu}) {
    Remap r;
    RunOptions o;
    o.backend = be;
    const Status s = remap_indices_to_rows(r.a, o);
    ASSERT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(r.result(), (std::vector<std::int32_t>{20, 9, -1, 23, /**/ 11, 8, -1, -1, /**/ 6, 0, 1, -1}))
        << backend_name(be);
  }
}

TEST(LightningIndexerRemap, ZeroRowsAreValid) {
  Tensor indices(DType::i32, {0, 4}), offsets(DType::u32, {1}), lut(DType::u32, {0, 2}), rows(DType::i32, {0, 4});
  RemapIndicesArgs a{indices.view(), offsets.view(), lut.view(), 4, 3, rows.view()};
  const Status s = remap_indices_to_rows(a);
  EXPECT_TRUE(s.ok()) << s.message;
}

// The indexer's output remapped: each row names the physical K row of the same logical key.
TEST(LightningIndexerRemap, ComposesWithTheIndexer) {
  const goldens::OpDriver& drv = *goldens::find_driver("lightning_indexer");
  goldens::Bundle b = drv.generate({{"seq_lens", {4, 0, 3}}, {"cache_lens", {9, 1, 5}}, {"num_heads", 2},
                                    {"head_dim", 16}, {"top_k", 12}, {"page_size", 3}, {"num_layers", 2},
                                    {"layer_idx", 1}},
                                   8);
  ASSERT_TRUE(drv.run(b, RunOptions{Backend::reference}).ok());
  const Tensor& idx = b.at("out.output_indices");
  const Tensor& blocks = b.at("k_cache.blocks");
  const Tensor& lut = b.at("k_cache.lookup_table");
  const std::int64_t ps = 3, nb = blocks.shape()[0], layers = blocks.shape()[2], D = 16, cols = lut.shape()[1];
  Tensor rows(DType::i32, idx.shape());
  RemapIndicesArgs a{idx.view(), b.at("input_row_offsets").view(), lut.view(), ps, nb, rows.view()};
  ASSERT_TRUE(remap_indices_to_rows(a).ok());
  const std::uint32_t* off = b.at("input_row_offsets").data<std::uint32_t>();
  std::int64_t checked = 0;
  for (std::int64_t s = 0; s < 3; ++s)
    for (std::int64_t t = off[s]; t < off[s + 1]; ++t)
      for (std::int64_t c = 0; c < 12; ++c) {
        const std::int32_t j = idx.data<std::int32_t>()[t * 12 + c], r = rows.data<std::int32_t>()[t * 12 + c];
        if (j < 0) {
          EXPECT_EQ(r, -1);
          continue;
        }
        const std::int64_t logical_blk = lut.data<std::uint32_t>()[s * cols + j / ps];
        EXPECT_EQ(r / ps, logical_blk);
        EXPECT_EQ(r % ps, j % ps);
        // Same K bytes through the physical row view of layer 1.
        const std::uint8_t* by_row = blocks.data<std::uint8_t>() + (((r / ps) * layers + 1) * ps + r % ps) * D;
        const std::uint8_t* by_pos = blocks.data<std::uint8_t>() + ((logical_blk * layers + 1) * ps + j % ps) * D;
        EXPECT_EQ(std::vector<std::uint8_t>(by_row, by_row + D), std::vector<std::uint8_t>(by_pos, by_pos + D));
        ++checked;
      }
  EXPECT_GT(checked, 30);
}

void expect_rejected(Remap& r, const std::string& field, const std::string& value) {
  const Tensor indices = r.indices, offsets = r.offsets, lut = r.lut, rows = r.rows;
  const Status s = remap_indices_to_rows(r.a);
  EXPECT_EQ(s.code, StatusCode::invalid_argument) << s.message;
  EXPECT_EQ(s.op, "remap_indices_to_rows");
  EXPECT_EQ(s.field, field) << s.message;
  EXPECT_EQ(s.message.rfind("remap_indices_to_rows: " + field, 0), 0u) << s.message;
  EXPECT_NE(s.message.find(value), std::string::npos) << "message lacks '" << value << "': " << s.message;
  EXPECT_TRUE(r.rows.same_bytes(rows)) << "rows written on a rejected call";
  EXPECT_TRUE(r.indices.same_bytes(indices));
  EXPECT_TRUE(r.offsets.same_bytes(offsets));
  EXPECT_TRUE(r.lut.same_bytes(lut));
}

TEST(LightningIndexerRemapValidation, SentinelPage) {
  Remap r;
  r.indices.data<std::int32_t>()[1] = 9;  // row 0 (sequence 0), page 2 = sentinel 7
  expect_rejected(r, "lookup_table[0, 2]", "=7 (must be < num_blocks=7: indices[0, 1]=9");
}

TEST(LightningIndexerRemapValidation, PageOutOfRange) {
  Remap r;
  r.lut.data<std::uint32_t>()[4] = 12;  // sequence 1, page 1
  expect_rejected(r, "lookup_table[1, 1]", "=12");
}

TEST(LightningIndexerRemapValidation, PositionPastTheTable) {
  Remap r;
  r.indices.data<std::int32_t>()[9] = 12;  // row 2, column 1: page 3 of a 3-column table
  expect_rejected(r, "indices[2, 1]", "=12 is past the lookup table");
  Remap big;
  big.indices.data<std::int32_t>()[0] = std::numeric_limits<std::int32_t>::max();
  expect_rejected(big, "indices[0, 0]", "=2147483647");
}

TEST(LightningIndexerRemapValidation, NegativeValuesOtherThanMinusOne) {
  for (std::int32_t v : {-2, std::numeric_limits<std::int32_t>::min()}) {
    Remap r;
    r.indices.data<std::int32_t>()[6] = v;  // row 1, column 2
    expect_rejected(r, "indices[1, 2]", std::string("=") + std::to_string(v) + " (must be -1");
  }
}

TEST(LightningIndexerRemapValidation, RowsMayNotAliasIndices) {
  Remap r;
  r.a.rows = r.a.indices;  // in place
  expect_rejected(r, "rows", "overlaps indices");
  // Partial overlap: rows start three elements into the indices' buffer.
  Tensor both(DType::i32, {2 * 12});
  std::copy(r.indices.data<std::int32_t>(), r.indices.data<std::int32_t>() + 12, both.data<std::int32_t>());
  Remap p;
  p.a.indices = TensorView::contiguous(both.data<std::int32_t>(), DType::i32, {3, 4});
  p.a.rows = TensorView::contiguous(both.data<std::int32_t>() + 3, DType::i32, {3, 4});
  const Tensor saved = both;
  const Status s = remap_indices_to_rows(p.a);
  EXPECT_EQ(s.field, "rows") << s.message;
  EXPECT_NE(s.message.find("overlaps indices"), std::string::npos) << s.message;
  EXPECT_TRUE(both.same_bytes(saved));
}

TEST(LightningIndexerRemapValidation, RowsMayNotAliasTheTableOrOffsets) {
  // rows is larger than either, so each is moved alone into a buffer with room for all of rows.
  Remap r;
  Tensor room;
  r.a.rows.data = test_support::move_alone(r.a.lookup_table, room, r.a.rows.size_bytes());
  expect_rejected(r, "rows", "overlaps lookup_table");
  Remap r2;
  Tensor room2;
  r2.a.rows.data = test_support::move_alone(r2.a.input_row_offsets, room2, r2.a.rows.size_bytes());
  expect_rejected(r2, "rows", "overlaps input_row_offsets");
}

TEST(LightningIndexerRemapValidation, DtypesAndShapes) {
  { Remap r; r.a.indices.dtype = DType::u32; expect_rejected(r, "indices.dtype", "=u32"); }
  { Remap r; r.a.rows.dtype = DType::u32; expect_rejected(r, "rows.dtype", "=u32"); }
  { Remap r; r.a.lookup_table.dtype = DType::i32; expect_rejected(r, "lookup_table.dtype", "=i32"); }
  { Remap r; r.a.input_row_offsets.dtype = DType::i32; expect_rejected(r, "input_row_offsets.dtype", "=i32"); }
  { Remap r; r.a.rows = TensorView::contiguous(r.rows.bytes(), DType::i32, {3, 3}); expect_rejected(r, "rows.shape", "=[3, 3]"); }
  { Remap r; r.a.lookup_table = TensorView::contiguous(r.lut.bytes(), DType::u32, {1, 3}); expect_rejected(r, "lookup_table.shape", "=[1, 3]"); }
  { Remap r; r.offsets.data<std::uint32_t>()[2] = 2; expect_rejected(r, "input_row_offsets[2]", "=2"); }
  { Remap r; r.a.indices.data = nullptr; expect_rejected(r, "indices", "missing"); }
}

TEST(LightningIndexerRemapValidation, PageSizeAndNumBlocks) {
  { Remap r; r.a.page_size = 0; expect_rejected(r, "page_size", "=0"); }
  { Remap r; r.a.num_blocks = -1; expect_rejected(r, "num_blocks", "=-1"); }
  { Remap r; r.a.num_blocks = 1 << 20; r.a.page_size = 1 << 12; expect_rejected(r, "num_blocks", "=1048576 with page_size=4096"); }
}

// A device call takes every tensor in device memory (its kernel checks the indices); device
// indices beside host tables are refused before anything is read.
TEST(LightningIndexerRemapValidation, DeviceIndicesBesideHostTablesAreRefused) {
  Remap r;
  r.a.indices.memory = MemorySpace::device;
  expect_rejected(r, "input_row_offsets", "indices is in device memory");
}

}  // namespace
}  // namespace mlakit
