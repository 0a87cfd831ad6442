// MSA block indexer: one test per validated field or rule. Each checks the status code, that the
// message names the operator, the field and the value, and that the output and every input (the
// cache included) are byte-for-byte untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include "goldens/common/driver.hpp"
#include "support/lone_buffer.hpp"
#include "mlakit/ops/msa_block_indexer.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::Tensor;

// Sequence 0: 3 rows after 5 cached keys (pages 0, 1); sequence 1: empty (prefix 2);
// sequence 2: 2 rows, prefix 0 (page 0). Hi 2, Di 8, block 4, topk 3, two layers (layer 1 used).
// "=<v>", built without `literal + string` (GCC 12 reports a false -Wrestrict there).
std::string equals(std::int64_t v) {
  std::string s(1, '=');
  s += std::to_string(v);
  return s;
}

class MsaValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* d = goldens::find_driver("msa_block_indexer");
    ASSERT_NE(d, nullptr);
    b = d->generate({{"seq_lens", {3, 0, 2}}, {"prefix_lens", {5, 2, 0}}, {"num_index_heads", 2},
                     {"idx_head_dim", 8}, {"block_size", 4}, {"topk", 3}, {"num_layers", 2}, {"layer_idx", 1}},
                    1);
    Tensor& out = b.add("out.out_idxs", DType::i32, {2, 5, 3});
    out.poison();
    desc.num_index_heads = 2;
    desc.idx_head_dim = 8;
    desc.block_size = 4;
    desc.topk = 3;
    desc.init_blocks = 1;
    desc.local_blocks = 1;
    desc.scale = 0.25f;
    args.q = b.at("q").view();
    args.input_row_offsets = b.at("input_row_offsets").view();
    args.prefix_lens = b.at("prefix_lens").view();
    args.k_cache = goldens::cache_view(b, "k_cache");
    args.layer_idx = 1;
    args.out_idxs = out.view();
  }

  // Snapshot, call, then: code, message "msa_block_indexer: <field>..." containing `value`,
  // and nothing changed anywhere.
  void expect_rejected(StatusCode code, const std::string& field, const std::string& value,
                       const RunOptions& options = {}) {
    std::map<std::string, Tensor> before = b.tensors;
    const Status s = msa_block_indexer(desc, args, options);
    EXPECT_EQ(s.code, code) << s.message;
    EXPECT_EQ(s.op, "msa_block_indexer");
    EXPECT_EQ(s.field, field) << s.message;
    EXPECT_EQ(s.message.rfind("msa_block_indexer: " + field, 0), 0u) << s.message;
    EXPECT_NE(s.message.find(value), std::string::npos) << "'" << value << "' not in: " << s.message;
    for (const auto& [name, t] : before) {
      EXPECT_TRUE(b.at(name).same_bytes(t)) << name << " was modified";
      EXPECT_TRUE(b.at(name).guard_intact()) << name;
    }
  }
  void expect_invalid(const std::string& field, const std::string& value) {
    expect_rejected(StatusCode::invalid_argument, field, value);
  }

  void expect_accepted() {
    const Status s = msa_block_indexer(desc, args, RunOptions{Backend::reference});
    EXPECT_TRUE(s.ok()) << s.message;
  }

  static void reshape(TensorView& v, std::initializer_list<std::int64_t> dims) {
    v = TensorView::contiguous(v.data, v.dtype, dims, v.memory);
  }

  std::uint32_t& lut(std::int64_t s, std::int64_t c) {
    Tensor& t = b.at("k_cache.lookup_table");
    return t.data<std::uint32_t>()[s * t.shape()[1] + c];
  }
  std::int64_t num_blocks() const { return b.at("k_cache.blocks").shape()[0]; }

  // `offset` bytes into `input`, moved alone into a buffer with room for the whole output.
  std::uint8_t* inside(TensorView& input, std::int64_t offset) {
    return test_support::move_alone(input, room, args.out_idxs.size_bytes() + offset) + offset;
  }

  Bundle b;
  Tensor room;
  MsaBlockIndexerDesc desc;
  MsaBlockIndexerArgs args;
};

TEST_F(MsaValidation, ValidCallIsAccepted) { expect_accepted(); }

// ---- parameters -------------------------------------------------------------------------------
// Split rows (spec 06 §B) are op 4's: the block indexer declines a tail by name.
TEST_F(MsaValidation, SplitRowsAreDeclined) {
  const auto& bl = args.k_cache.blocks.shape;
  const Tensor tail(DType::bf16, {bl[0], bl[1], bl[2], bl[3], bl[4], 8});
  args.k_cache.tail = tail.view();
  expect_rejected(StatusCode::unsupported, "k_cache.tail", "split rows with a bf16 tail are read by sparse_mla_prefill only");
}
TEST_F(MsaValidation, NumIndexHeads) { desc.num_index_heads = 0; expect_invalid("num_index_heads", "=0"); }
TEST_F(MsaValidation, IdxHeadDim) { desc.idx_head_dim = -1; expect_invalid("idx_head_dim", "=-1"); }
TEST_F(MsaValidation, BlockSizePositive) { desc.block_size = 0; expect_invalid("block_size", "=0"); }
TEST_F(MsaValidation, Topk) { desc.topk = 0; expect_invalid("topk", "=0"); }
TEST_F(MsaValidation, InitBlocks) { desc.init_blocks = -1; expect_invalid("init_blocks", "=-1"); }
TEST_F(MsaValidation, LocalBlocks) { desc.local_blocks = -2; expect_invalid("local_blocks", "=-2"); }
TEST_F(MsaValidation, ScaleNaN) { desc.scale = std::numeric_limits<float>::quiet_NaN(); expect_invalid("scale", "=nan"); }
TEST_F(MsaValidation, ScaleInf) { desc.scale = -std::numeric_limits<float>::infinity(); expect_invalid("scale", "=-inf"); }
TEST_F(MsaValidation, ScaleZeroAndNegativeAreValid) {
  desc.scale = 0;
  expect_accepted();
  desc.scale = -3;
  expect_accepted();
}

// ---- q ----------------------------------------------------------------------------------------
TEST_F(MsaValidation, QMissing) { args.q.data = nullptr; expect_invalid("q", "missing"); }
TEST_F(MsaValidation, QDtype) { args.q.dtype = DType::f16; expect_invalid("q.dtype", "=f16"); }
TEST_F(MsaValidation, QRank) { reshape(args.q, {5, 16}); expect_invalid("q.rank", "=2"); }
TEST_F(MsaValidation, QHeads) { reshape(args.q, {5, 1, 16}); expect_invalid("q.shape", "=[5, 1, 16]"); }
TEST_F(MsaValidation, QHeadDim) { reshape(args.q, {10, 2, 4}); expect_invalid("q.shape", "=[10, 2, 4]"); }
TEST_F(MsaValidation, QStrides) { args.q.strides[0] = 32; expect_invalid("q.strides", "contiguous"); }

// ---- offsets and prefix lengths -----------------------------------------------------------------
TEST_F(MsaValidation, OffsetsDtype) { args.input_row_offsets.dtype = DType::i32; expect_invalid("input_row_offsets.dtype", "=i32"); }
TEST_F(MsaValidation, OffsetsFirst) {
  b.at("input_row_offsets").data<std::uint32_t>()[0] = 1;
  expect_invalid("input_row_offsets[0]", "=1");
}
TEST_F(MsaValidation, OffsetsDecreasing) {
  b.at("input_row_offsets").data<std::uint32_t>()[2] = 2;  // [0, 3, 2, 5]
  expect_invalid("input_row_offsets[2]", "=2 < input_row_offsets[1]=3");
}
TEST_F(MsaValidation, OffsetsTotal) {
  b.at("input_row_offsets").data<std::uint32_t>()[3] = 4;
  expect_invalid("input_row_offsets[3]", "=4");
}
TEST_F(MsaValidation, OffsetsOnDevice) {
  args.input_row_offsets.memory = MemorySpace::device;
  expect_invalid("input_row_offsets", "device memory");
}
TEST_F(MsaValidation, PrefixLensMissing) { args.prefix_lens.data = nullptr; expect_invalid("prefix_lens", "missing"); }
TEST_F(MsaValidation, PrefixLensDtype) { args.prefix_lens.dtype = DType::i32; expect_invalid("prefix_lens.dtype", "=i32"); }
TEST_F(MsaValidation, PrefixLensShape) { reshape(args.prefix_lens, {2}); expect_invalid("prefix_lens.shape", "=[2]"); }
TEST_F(MsaValidation, PrefixLensOnDevice) {
  args.prefix_lens.memory = MemorySpace::device;
  expect_invalid("prefix_lens", "device memory");
}

// ---- cache --------------------------------------------------------------------------------------
TEST_F(MsaValidation, CacheDtype) {
  args.k_cache.blocks.dtype = DType::f32;
  expect_invalid("k_cache.blocks.dtype", "=f32");
}
TEST_F(MsaValidation, CacheKvDim) {
  reshape(args.k_cache.blocks, {num_blocks(), 2, 1, 4, 1, 8});
  expect_invalid("k_cache.blocks.shape[1]", "=2");
}
TEST_F(MsaValidation, CacheHeads) {
  reshape(args.k_cache.blocks, {num_blocks(), 1, 2, 4, 2, 4});
  expect_invalid("k_cache.blocks.shape[4]", "=2");
}
TEST_F(MsaValidation, CacheHeadsMustBeNumKHeads) {
  desc.num_k_heads = 2;  // the cache holds 1 head
  expect_invalid("k_cache.blocks.shape[4]", "=1 (num_kv_heads must be 2)");
}
TEST_F(MsaValidation, NumKHeadsPositive) { desc.num_k_heads = 0; expect_invalid("num_k_heads", "=0"); }
TEST_F(MsaValidation, NumKHeadsMustDivideIndexHeads) {
  desc.num_index_heads = 3;
  desc.num_k_heads = 2;
  expect_invalid("num_k_heads", "=2 (must divide num_index_heads=3)");
}
TEST_F(MsaValidation, GroupedKHeadsAreAccepted) {
  // Two K heads: the cache's bytes seen as pages of 2 positions x 2 heads (index heads 0 and 1
  // read one each), every position on block 0 of a page table twice as wide.
  reshape(args.k_cache.blocks, {num_blocks(), 1, 2, 2, 2, 8});
  desc.num_k_heads = 2;
  desc.block_size = 2;
  const Tensor& lut = b.at("k_cache.lookup_table");
  Tensor& wide = b.add("wide_lut", DType::u32, {lut.shape()[0], lut.shape()[1] * 2});
  std::fill_n(wide.data<std::uint32_t>(), wide.numel(), 0u);
  args.k_cache.lookup_table = wide.view();
  expect_accepted();
}
TEST_F(MsaValidation, ReduceHeadsWantsOneSelectionRow) {
  desc.reduce_heads = true;  // out_idxs is still [2, 5, 3]
  expect_invalid("out_idxs.shape", "=[2, 5, 3] (expected [1, 5, 3])");
  Tensor& one = b.add("out_one", DType::i32, {1, 5, 3});
  args.out_idxs = one.view();
  expect_accepted();
}
TEST_F(MsaValidation, CacheHeadSize) {
  reshape(args.k_cache.blocks, {num_blocks(), 1, 2, 8, 1, 4});
  expect_invalid("k_cache.blocks.shape[5]", "=4");
}
TEST_F(MsaValidation, CacheScalesForbidden) {
  Tensor& sc = b.add("k_cache.scales", DType::f32, {num_blocks(), 1, 2, 4, 1, 1});
  args.k_cache.scales = sc.view();
  args.k_cache.quant_granularity = 8;
  expect_invalid("k_cache.scales", "is present");
}
TEST_F(MsaValidation, LayerIdx) { args.layer_idx = 2; expect_invalid("layer_idx", "=2"); }
TEST_F(MsaValidation, LookupTableRows) {
  reshape(args.k_cache.lookup_table, {2, args.k_cache.lookup_table.shape[1]});
  expect_invalid("k_cache.lookup_table.shape", "=[2, ");
}
TEST_F(MsaValidation, LookupTableDtype) {
  args.k_cache.lookup_table.dtype = DType::i32;
  expect_invalid("k_cache.lookup_table.dtype", "=i32");
}
TEST_F(MsaValidation, LookupTableOnDevice) {
  args.k_cache.lookup_table.memory = MemorySpace::device;
  expect_invalid("k_cache.lookup_table", "device memory");
}
TEST_F(MsaValidation, CacheLengthsShape) {
  reshape(args.k_cache.cache_lengths, {2});
  expect_invalid("k_cache.cache_lengths.shape", "=[2]");
}
TEST_F(MsaValidation, CacheLengthsDtype) {
  args.k_cache.cache_lengths.dtype = DType::f32;
  expect_invalid("k_cache.cache_lengths.dtype", "=f32");
}
TEST_F(MsaValidation, CacheLengthsOnDevice) {
  args.k_cache.cache_lengths.memory = MemorySpace::device;
  expect_invalid("k_cache.cache_lengths", "device memory");
}
TEST_F(MsaValidation, CacheLengthsAreOptionalAndNotRead) {
  b.at("k_cache.cache_lengths").data<std::uint32_t>()[0] = 1000000;  // not read
  expect_accepted();
  args.k_cache.cache_lengths = TensorView{};
  expect_accepted();
}
TEST_F(MsaValidation, BlockSizeMustEqualPageSize) {
  desc.block_size = 2;
  expect_invalid("block_size", "=2 (must equal the k_cache page_size=4)");
}

// ---- pages --------------------------------------------------------------------------------------
TEST_F(MsaValidation, SentinelWhereANewRowLives) {
  lut(0, 1) = static_cast<std::uint32_t>(num_blocks());  // positions 4..7 of sequence 0
  expect_invalid("k_cache.lookup_table[0, 1]", equals(num_blocks()));
}
TEST_F(MsaValidation, SentinelInThePrefix) {
  lut(0, 0) = static_cast<std::uint32_t>(num_blocks());
  expect_invalid("k_cache.lookup_table[0, 0]", equals(num_blocks()));
}
TEST_F(MsaValidation, PageOutOfRange) {
  lut(2, 0) = static_cast<std::uint32_t>(num_blocks() + 7);
  expect_invalid("k_cache.lookup_table[2, 0]", equals(num_blocks() + 7));
}
TEST_F(MsaValidation, PageTableTooNarrow) {
  reshape(args.k_cache.lookup_table, {3, 1});
  expect_invalid("k_cache.lookup_table", "shape[1]=1 too small");
}
TEST_F(MsaValidation, PrefixPastItsPages) {
  b.at("prefix_lens").data<std::uint32_t>()[2] = 400;  // column 1 of sequence 2 is a sentinel
  expect_invalid("k_cache.lookup_table[2, 1]", "position 4 of sequence 2 needs a page");
}
TEST_F(MsaValidation, PrefixPastThePageTable) {
  for (std::int64_t c = 0; c < 3; ++c) lut(2, c) = 0;
  b.at("prefix_lens").data<std::uint32_t>()[2] = 400;
  expect_invalid("k_cache.lookup_table", "needs page column 3");
}
TEST_F(MsaValidation, OnlyPagesThatAreReadAreChecked) {
  // Columns past the last read position and the whole row of the empty sequence may hold anything.
  const std::int64_t cols = b.at("k_cache.lookup_table").shape()[1];
  for (std::int64_t c = 2; c < cols; ++c) lut(0, c) = 0xFFFFFFFFu;
  for (std::int64_t c = 0; c < cols; ++c) lut(1, c) = 0xFFFFFFFFu;
  b.at("prefix_lens").data<std::uint32_t>()[1] = 0xFFFFFFF0u;
  expect_accepted();
}

// ---- output -------------------------------------------------------------------------------------
TEST_F(MsaValidation, OutMissing) { args.out_idxs.data = nullptr; expect_invalid("out_idxs", "missing"); }
TEST_F(MsaValidation, OutDtype) { args.out_idxs.dtype = DType::u32; expect_invalid("out_idxs.dtype", "=u32"); }
TEST_F(MsaValidation, OutShape) { reshape(args.out_idxs, {5, 2, 3}); expect_invalid("out_idxs.shape", "=[5, 2, 3]"); }
TEST_F(MsaValidation, OutRank) { reshape(args.out_idxs, {10, 3}); expect_invalid("out_idxs.rank", "=2"); }
// The output starts inside the input, moved alone into a buffer with room for the whole output,
// so that it overlaps that input and nothing else.
TEST_F(MsaValidation, OutOverlapsQ) {
  args.out_idxs.data = inside(args.q, 4);
  expect_invalid("out_idxs", "overlaps q");
}
TEST_F(MsaValidation, OutOverlapsOffsets) {
  args.out_idxs.data = inside(args.input_row_offsets, 0);
  expect_invalid("out_idxs", "overlaps input_row_offsets");
}
TEST_F(MsaValidation, OutOverlapsPrefixLens) {
  args.out_idxs.data = inside(args.prefix_lens, 0);
  expect_invalid("out_idxs", "overlaps prefix_lens");
}
TEST_F(MsaValidation, OutOverlapsCache) {
  args.out_idxs.data = inside(args.k_cache.blocks, 64);
  expect_invalid("out_idxs", "overlaps k_cache.blocks");
}
TEST_F(MsaValidation, OutOverlapsLookupTable) {
  args.out_idxs.data = inside(args.k_cache.lookup_table, 0);
  expect_invalid("out_idxs", "overlaps k_cache.lookup_table");
}
TEST_F(MsaValidation, OutOverlapsCacheLengths) {
  args.out_idxs.data = inside(args.k_cache.cache_lengths, 0);
  expect_invalid("out_idxs", "overlaps k_cache.cache_lengths");
}

// ---- memory spaces and back-ends ------------------------------------------------------------------
TEST_F(MsaValidation, MixedMemorySpaces) {
  args.q.memory = MemorySpace::device;
  expect_invalid("k_cache.blocks", "host memory but q is in device memory");
}
TEST_F(MsaValidation, OutInAnotherSpace) {
  args.out_idxs.memory = MemorySpace::device;
  expect_invalid("out_idxs", "device memory but q is in host memory");
}
TEST_F(MsaValidation, HostBackEndOnDeviceTensors) {
  args.q.memory = args.k_cache.blocks.memory = args.out_idxs.memory = MemorySpace::device;
  expect_rejected(StatusCode::invalid_argument, "backend", "backend=reference", RunOptions{Backend::reference});
}
// Device tensors with host metadata: without a GPU the call stops at the back-end; with one, at the
// metadata that is not where the data is.
TEST_F(MsaValidation, DeviceTensorsWithHostMetadata) {
  args.q.memory = args.k_cache.blocks.memory = args.out_idxs.memory = MemorySpace::device;
  std::string why;
  if (backend_available(Backend::cuda, &why))
    expect_invalid("input_row_offsets", "host memory but q is in device memory");
  else
    expect_rejected(StatusCode::unavailable, "backend", "backend=cuda");
}
TEST_F(MsaValidation, CudaOnHostTensors) {
  expect_rejected(StatusCode::invalid_argument, "backend", "host memory", RunOptions{Backend::cuda});
}

}  // namespace
}  // namespace mlakit
