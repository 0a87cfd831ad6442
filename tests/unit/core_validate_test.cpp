// The shared validation helpers and the back-end router: each rule fails with a message naming
// the operator, the field, the value and the expectation.
#include <gtest/gtest.h>

#include <vector>

#include "core/common/dispatch.hpp"
#include "core/common/validate.hpp"

namespace mlakit::core {
namespace {

TensorView u32_view(std::vector<std::uint32_t>& v) {
  return TensorView::contiguous(v.data(), DType::u32, {static_cast<std::int64_t>(v.size())});
}

void expect_message(const Validator& v, const std::string& field, const std::string& fragment) {
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code, StatusCode::invalid_argument);
  EXPECT_EQ(v.status().op, "op");
  EXPECT_EQ(v.status().field, field);
  EXPECT_NE(v.status().message.find("op: " + field), std::string::npos) << v.status().message;
  EXPECT_NE(v.status().message.find(fragment), std::string::npos) << v.status().message;
}

TEST(Validator, RowOffsetsMustStartAtZeroRiseAndEndAtTotal) {
  std::vector<std::uint32_t> good = {0, 3, 3, 7};
  Validator ok("op");
  EXPECT_TRUE(ok.row_offsets("iro", u32_view(good), 7));

  std::vector<std::uint32_t> start = {1, 3};
  Validator a("op");
  EXPECT_FALSE(a.row_offsets("iro", u32_view(start), 3));
  expect_message(a, "iro[0]", "=1 (must be 0)");

  std::vector<std::uint32_t> falling = {0, 20, 17};
  Validator b("op");
  EXPECT_FALSE(b.row_offsets("iro", u32_view(falling), 17));
  expect_message(b, "iro[2]", "=17 < iro[1]=20 (must be non-decreasing)");

  Validator c("op");
  EXPECT_FALSE(c.row_offsets("iro", u32_view(good), 8));
  expect_message(c, "iro[3]", "=7 (must equal the total row count 8)");

  Validator d("op");
  std::uint32_t dummy = 0;
  EXPECT_FALSE(d.row_offsets("iro", TensorView::contiguous(&dummy, DType::u32, {0}), 0));
  expect_message(d, "iro.shape", "[0]");
}

TEST(Validator, TensorChecksPresenceDtypeRankShapeAndContiguity) {
  float buf[24] = {};
  Validator missing("op");
  EXPECT_FALSE(missing.tensor("x", TensorView{}, {DType::f32}, {2}));
  expect_message(missing, "x", "missing");

  Validator dtype("op");
  EXPECT_FALSE(dtype.tensor("x", TensorView::contiguous(buf, DType::bf16, {2, 3}), {DType::f32}, {2, 3}));
  expect_message(dtype, "x.dtype", "=bf16 (expected f32)");

  Validator rank("op");
  EXPECT_FALSE(rank.tensor("x", TensorView::contiguous(buf, DType::f32, {6}), {DType::f32}, {2, 3}));
  expect_message(rank, "x.rank", "=1 (expected 2");

  Validator shape("op");
  EXPECT_FALSE(shape.tensor("x", TensorView::contiguous(buf, DType::f32, {2, 4}), {DType::f32}, {2, 3}));
  expect_message(shape, "x.shape", "=[2, 4] (expected [2, 3])");

  TensorView strided = TensorView::contiguous(buf, DType::f32, {2, 3});
  strided.strides[0] = 4;
  Validator contig("op");
  EXPECT_FALSE(contig.tensor("x", strided, {DType::f32}, {2, 3}));
  expect_message(contig, "x.strides", "contiguous");

  Validator any("op");
  EXPECT_TRUE(any.tensor("x", TensorView::contiguous(buf, DType::f32, {2, 3}), {DType::f32}, {kAnyDim, 3}));
  EXPECT_TRUE(any.optional_tensor("y", TensorView{}, {DType::f32}, {5}));
}

TEST(Validator, FirstFailureWins) {
  Validator v("op");
  EXPECT_FALSE(v.positive("a", 0));
  EXPECT_FALSE(v.positive("b", -1));
  expect_message(v, "a", "=0 (must be > 0)");
}

struct CacheFixture {
  std::vector<std::uint16_t> blocks = std::vector<std::uint16_t>(3 * 1 * 2 * 4 * 1 * 8);
  std::vector<std::uint32_t> lut = {2, 0, 1, 1, 3, 3};  // B = 2, max_pages = 3; 3 = sentinel
  std::vector<std::uint32_t> lens = {5, 0};
  PagedKVCacheView view() {
    PagedKVCacheView c;
    c.blocks = TensorView::contiguous(blocks.data(), DType::bf16, {3, 1, 2, 4, 1, 8});
    c.lookup_table = TensorView::contiguous(lut.data(), DType::u32, {2, 3});
    c.cache_lengths = TensorView::contiguous(lens.data(), DType::u32, {2});
    return c;
  }
};

TEST(Validator, PagedCacheShapesAndPages) {
  CacheFixture f;
  Validator ok("op");
  CacheExpect e{{DType::bf16}, 1, 1, 8, false, 0, 1, true};
  EXPECT_TRUE(ok.paged_cache("kv_cache", f.view(), e, 2));
  EXPECT_TRUE(ok.pages_exist("kv_cache", f.view(), 0, 0, 8));  // pages 0, 1 -> blocks 2, 0
  EXPECT_TRUE(ok.pages_exist("kv_cache", f.view(), 1, 0, 4));  // page 0 -> block 1

  Validator sentinel("op");
  EXPECT_FALSE(sentinel.pages_exist("kv_cache", f.view(), 1, 3, 6));  // page 1 is the sentinel
  expect_message(sentinel, "kv_cache.lookup_table[1, 1]", "=3 (must be < num_blocks=3: position 4");

  Validator past("op");
  EXPECT_FALSE(past.pages_exist("kv_cache", f.view(), 0, 0, 13));  // needs page column 3 of 3
  expect_message(past, "kv_cache.lookup_table", "too small");

  Validator layer("op");
  CacheExpect bad_layer = e;
  bad_layer.layer_idx = 2;
  EXPECT_FALSE(layer.paged_cache("kv_cache", f.view(), bad_layer, 2));
  expect_message(layer, "layer_idx", "=2 (must be < num_layers=2)");

  Validator kv("op");
  CacheExpect two = e;
  two.kv_dim = 2;
  EXPECT_FALSE(kv.paged_cache("kv_cache", f.view(), two, 2));
  expect_message(kv, "kv_cache.blocks.shape[1]", "kv_dim must be 2");

  Validator scales("op");
  CacheExpect need = e;
  need.scales = true;
  need.min_granularity = 8;
  EXPECT_FALSE(scales.paged_cache("kv_cache", f.view(), need, 2));
  expect_message(scales, "kv_cache.quant_granularity", "=0 (must be >= 8)");

  Validator batch("op");
  EXPECT_FALSE(batch.paged_cache("kv_cache", f.view(), e, 3));
  expect_message(batch, "kv_cache.lookup_table.shape", "expected [3, *]");
}

// Caches as engines keep them: any non-negative strides with contiguous rows; a written cache
// whose rows would share memory is refused; the aliasing checks see a strided view's whole reach.
TEST(Validator, PagedCacheStrides) {
  CacheFixture f;
  CacheExpect e{{DType::bf16}, 1, 1, 8, false, 0, 1, true};
  PagedKVCacheView padded = f.view();
  padded.blocks.strides[0] += 64;  // blocks padded apart: fine read or written
  Validator ok("op");
  CacheExpect w = e;
  w.written = true;
  EXPECT_TRUE(ok.paged_cache("kv_cache", padded, w, 2)) << ok.status().message;

  PagedKVCacheView rows = f.view();
  rows.blocks.strides[5] = 2;
  Validator row("op");
  EXPECT_FALSE(row.paged_cache("kv_cache", rows, e, 2));
  expect_message(row, "kv_cache.blocks.strides", "the last stride must be 1");

  PagedKVCacheView negative = f.view();
  negative.blocks.strides[0] = -negative.blocks.strides[0];
  Validator neg("op");
  EXPECT_FALSE(neg.paged_cache("kv_cache", negative, e, 2));
  expect_message(neg, "kv_cache.blocks.strides", "strides must be >= 0");

  PagedKVCacheView shared = f.view();
  shared.blocks.strides[0] = 0;  // every block on the same memory: fine to read, not to write
  Validator read("op");
  EXPECT_TRUE(read.paged_cache("kv_cache", shared, e, 2)) << read.status().message;
  Validator write("op");
  EXPECT_FALSE(write.paged_cache("kv_cache", shared, w, 2));
  expect_message(write, "kv_cache.blocks.strides", "two rows would share memory");

  PagedKVCacheView huge = f.view();
  huge.blocks.strides[0] = std::int64_t{1} << 62;
  Validator reach("op");
  EXPECT_FALSE(reach.paged_cache("kv_cache", huge, e, 2));
  expect_message(reach, "kv_cache.blocks.strides", "overflows int64");

  // A padded view reaches past numel(): an output inside its padding overlaps it.
  TensorView inside = TensorView::contiguous(static_cast<std::uint16_t*>(padded.blocks.data) + padded.blocks.numel(),
                                             DType::bf16, {1});
  Validator alias("op");
  EXPECT_FALSE(alias.no_overlap("out", inside, "kv_cache.blocks", padded.blocks));
}

TEST(Validator, OverlapAndMemorySpace) {
  float buf[16];
  TensorView a = TensorView::contiguous(buf, DType::f32, {8});
  TensorView b = TensorView::contiguous(buf + 7, DType::f32, {8});
  TensorView c = TensorView::contiguous(buf + 8, DType::f32, {8});
  Validator v("op");
  EXPECT_TRUE(v.no_overlap("a", a, "c", c));
  EXPECT_FALSE(v.no_overlap("a", a, "b", b));
  expect_message(v, "a", "overlaps b");

  TensorView d = c;
  d.memory = MemorySpace::device;
  Validator m("op");
  MemorySpace space;
  EXPECT_FALSE(m.same_memory({{"a", &a}, {"d", &d}}, &space));
  expect_message(m, "d", "device memory but a is in host memory");
  // Two lists read as one, in order.
  const Validator::NamedView first[] = {{"a", &a}}, then[] = {{"d", &d}};
  Validator n("op");
  EXPECT_FALSE(n.same_memory(first, then, &space));
  expect_message(n, "d", "device memory but a is in host memory");
  Validator o("op");
  EXPECT_FALSE(o.same_memory(then, first, &space));
  expect_message(o, "a", "host memory but d is in device memory");
}

// Written views against every read view and against the written views listed before them; absent
// views take no part.
TEST(Validator, WrittenApart) {
  float buf[64];
  const TensorView r0 = TensorView::contiguous(buf, DType::f32, {8});
  const TensorView r1 = TensorView::contiguous(buf + 8, DType::f32, {8});
  const TensorView w0 = TensorView::contiguous(buf + 16, DType::f32, {8});
  const TensorView w1 = TensorView::contiguous(buf + 24, DType::f32, {8});
  const TensorView absent{};
  const Validator::NamedView reads[] = {{"r0", &r0}, {"r1", &r1}, {"none", &absent}};
  const Validator::NamedView writes[] = {{"w0", &w0}, {"w1", &w1}, {"none", &absent}};
  EXPECT_TRUE(Validator("op").written_apart(writes, reads));

  const TensorView over_r1 = TensorView::contiguous(buf + 15, DType::f32, {8});  // r1's last element
  Validator a("op");
  const Validator::NamedView into_r1[] = {{"w0", &w0}, {"w1", &over_r1}};
  EXPECT_FALSE(a.written_apart(into_r1, reads));
  expect_message(a, "w1", "overlaps r1");

  const TensorView over_w0 = TensorView::contiguous(buf + 23, DType::f32, {1});  // w0's last element
  Validator b("op");
  const Validator::NamedView into_w0[] = {{"w0", &w0}, {"w1", &over_w0}};
  EXPECT_FALSE(b.written_apart(into_w0, reads));
  expect_message(b, "w1", "overlaps w0");
}

TEST(Route, ResolvesAutomaticAndRefusesMixedMemory) {
  Route r;
  ASSERT_TRUE(route("op", RunOptions{Backend::automatic}, MemorySpace::host, &r).ok());
  EXPECT_EQ(r.backend, Backend::cpu);
  ASSERT_TRUE(route("op", RunOptions{Backend::reference}, MemorySpace::host, &r).ok());
  EXPECT_EQ(r.backend, Backend::reference);
  const Status s = route("op", RunOptions{Backend::cuda}, MemorySpace::host, &r);
  EXPECT_EQ(s.code, StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("host memory"), std::string::npos);
  const Status d = route("op", RunOptions{Backend::cpu}, MemorySpace::device, &r);
  EXPECT_EQ(d.code, StatusCode::invalid_argument);
  std::string why;
  if (!backend_available(Backend::cuda, &why)) {
    const Status u = route("op", RunOptions{Backend::cuda}, MemorySpace::device, &r);
    EXPECT_EQ(u.code, StatusCode::unavailable);
    EXPECT_NE(u.message.find(why), std::string::npos);
  }
}

}  // namespace
}  // namespace mlakit::core
