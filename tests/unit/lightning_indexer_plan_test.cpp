// Plan once, run many (mlakit/plan.hpp), on op 1 and its remap: a plan serves every layer of a step
// bit for bit as the one-shot call; a run refuses another batch, an empty plan, a short or
// misaligned workspace and a wrong step id, naming the field and writing nothing; the candidate
// list records why a back-end declined; runs follow the caller's arena.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <tbb/task_arena.h>

#include "cpu/common/parallel.hpp"
#include "goldens/common/driver.hpp"
#include "mlakit/ops/lightning_indexer.hpp"

namespace mlakit {
namespace {

using goldens::Bundle;
using goldens::json;
using goldens::Tensor;

// A step of two layers: sequences of 3, 0 and 2 rows over caches of 5, 2 and 4 tokens, H=2, D=16,
// top_k 4, pages of 4. Layer l reads layer l of the cache with q of layer l (q differs per layer).
struct Step {
  Bundle b;
  LightningIndexerDesc d;
  Tensor q1;  // layer 1's queries (layer 0 uses the bundle's q)

  explicit Step(std::uint64_t seed = 3) {
    json knobs = {{"seq_lens", {3, 0, 2}}, {"cache_lens", {5, 2, 4}}, {"num_heads", 2}, {"head_dim", 16},
                  {"top_k", 4}, {"page_size", 4}, {"num_layers", 2}, {"layer_idx", 0}};
    b = goldens::find_driver("lightning_indexer")->generate(knobs, seed);
    q1 = goldens::find_driver("lightning_indexer")->generate(knobs, seed + 100).at("q");
    d.top_k = b.params.at("top_k");
    d.num_heads = b.params.at("num_heads");
    d.head_dim = b.params.at("head_dim");
    out(0);
    out(1);
  }
  Tensor& out(int layer) {
    const std::string name = "out.layer" + std::to_string(layer);
    if (!b.has(name)) {
      Tensor& t = b.add(name, DType::i32, {b.at("q").shape()[0], d.top_k});
      for (std::int64_t i = 0; i < t.numel(); ++i) t.data<std::int32_t>()[i] = 0x5EEDBEEF + static_cast<std::int32_t>(i);
    }
    return b.at(name);
  }
  LightningIndexerArgs args(int layer) {
    LightningIndexerArgs a;
    a.q = layer == 0 ? b.at("q").view() : q1.view();
    a.q_s = b.at("q_s").view();
    a.input_row_offsets = b.at("input_row_offsets").view();
    a.k_cache = goldens::cache_view(b, "k_cache", b.params.at("quant_granularity"));
    a.layer_idx = static_cast<std::uint32_t>(layer);
    a.output_indices = out(layer).view();
    return a;
  }
};

void expect_refused(const Status& s, const std::string& op, const std::string& field, const std::string& text) {
  EXPECT_EQ(s.code, StatusCode::invalid_argument) << s.message;
  EXPECT_EQ(s.op, op);
  EXPECT_EQ(s.field, field) << s.message;
  EXPECT_EQ(s.message.rfind(op + ": " + field, 0), 0u) << s.message;
  EXPECT_NE(s.message.find(text), std::string::npos) << "message lacks '" << text << "': " << s.message;
}

TEST(LightningIndexerPlan, EveryLayerOfAStepMatchesTheOneShotCall) {
  for (std::uint64_t seed : {3, 4, 5}) {
    for (Backend be : {Backend::cpu, Backend::reference}) {
      Step planned(seed), one_shot(seed);
      PlanOptions po;
      po.backends = {be};
      LightningIndexerPlan p;
      ASSERT_TRUE(plan(planned.d, planned.args(1), po, &p).ok());
      EXPECT_EQ(p.backend(), be);
      for (int layer : {0, 1}) {
        const Status s = run(p, planned.args(layer));
        ASSERT_TRUE(s.ok()) << s.message;
        ASSERT_TRUE(lightning_indexer(one_shot.d, one_shot.args(layer), RunOptions{be}).ok());
        EXPECT_TRUE(planned.out(layer).same_bytes(one_shot.out(layer))) << "layer " << layer << " seed " << seed;
      }
      EXPECT_FALSE(planned.out(0).same_bytes(planned.out(1))) << "the layers must differ for this test to mean anything";
    }
  }
}

TEST(LightningIndexerPlan, ARunRefusesAnotherBatchAndWritesNothing) {
  Step st;
  LightningIndexerPlan p;
  ASSERT_TRUE(plan(st.d, st.args(0), PlanOptions{}, &p).ok());
  // The same offsets at another address: not the batch the plan checked.
  Tensor copy = st.b.at("input_row_offsets");
  LightningIndexerArgs a = st.args(0);
  a.input_row_offsets = copy.view();
  const Tensor before = st.out(0);
  expect_refused(run(p, a), "lightning_indexer", "input_row_offsets", "the plan was made for");
  EXPECT_TRUE(st.out(0).same_bytes(before));
  // Another shape of page table (a view of fewer columns).
  a = st.args(0);
  a.k_cache.lookup_table.shape[1] -= 1;
  expect_refused(run(p, a), "lightning_indexer", "k_cache.lookup_table", "plan with a step_id");
  EXPECT_TRUE(st.out(0).same_bytes(before));
}

// The plan checked the metadata against T rows and num_blocks pages: a run with other sizes would
// read past the caller's buffers, and is refused.
TEST(LightningIndexerPlan, ARunRefusesOtherSizesThanThePlansChecksAssumed) {
  Step st;
  LightningIndexerPlan p;
  ASSERT_TRUE(plan(st.d, st.args(0), PlanOptions{}, &p).ok());
  const Tensor before = st.out(0);
  LightningIndexerArgs a = st.args(0);
  a.q.shape[0] -= 1;
  a.q_s.shape[0] -= 1;
  a.output_indices.shape[0] -= 1;
  expect_refused(run(p, a), "lightning_indexer", "q.shape[0]", "the plan was made for 5");
  a = st.args(0);
  a.k_cache.blocks.shape[0] -= 1;
  a.k_cache.scales.shape[0] -= 1;
  expect_refused(run(p, a), "lightning_indexer", "k_cache.blocks.shape[0]", "plan the new batch");
  EXPECT_TRUE(st.out(0).same_bytes(before));
}

TEST(LightningIndexerPlan, AStepIdNamesTheBatchInsteadOfItsAddresses) {
  Step st, ref;
  PlanOptions po;
  po.step_id = 7;
  LightningIndexerPlan p;
  ASSERT_TRUE(plan(st.d, st.args(0), po, &p).ok());
  Tensor offsets = st.b.at("input_row_offsets");
  LightningIndexerArgs a = st.args(0);
  a.input_row_offsets = offsets.view();  // same content, another buffer
  RunContext ctx;
  ctx.step_id = 8;
  const Tensor before = st.out(0);
  expect_refused(run(p, a, ctx), "lightning_indexer", "context.step_id", "step_id=7");
  EXPECT_TRUE(st.out(0).same_bytes(before));
  ctx.step_id = 7;
  ASSERT_TRUE(run(p, a, ctx).ok());
  ASSERT_TRUE(lightning_indexer(ref.d, ref.args(0)).ok());
  EXPECT_TRUE(st.out(0).same_bytes(ref.out(0)));
}

TEST(LightningIndexerPlan, AnEmptyPlanIsRefused) {
  Step st;
  const Tensor before = st.out(0);
  expect_refused(run(LightningIndexerPlan{}, st.args(0)), "lightning_indexer", "plan", "plan is empty");
  EXPECT_TRUE(st.out(0).same_bytes(before));
  EXPECT_EQ(LightningIndexerPlan{}.workspace_bytes(), 0u);
}

TEST(LightningIndexerPlan, PlanChecksTheMetadataContentOnce) {
  Step st;
  Tensor& lut = st.b.at("k_cache.lookup_table");
  lut.data<std::uint32_t>()[0] = static_cast<std::uint32_t>(st.b.at("k_cache.blocks").shape()[0]);
  LightningIndexerPlan p;
  const Status s = plan(st.d, st.args(0), PlanOptions{}, &p);
  expect_refused(s, "lightning_indexer", "k_cache.lookup_table[0, 0]", "must be < num_blocks");
  EXPECT_FALSE(p.valid()) << "a refused plan stays empty";
}

TEST(LightningIndexerPlan, TheWorkspaceIsTheCallersAndChecked) {
  Step st, ref;
  LightningIndexerPlan p;
  ASSERT_TRUE(plan(st.d, st.args(0), PlanOptions{}, &p).ok());
  const std::size_t need = p.workspace_bytes();
  ASSERT_GT(need, 0u) << "the cpu indexer keeps its score rows in the workspace";
  auto memory = std::make_unique<std::byte[]>(need + 128);
  std::byte* aligned = memory.get() + (64 - reinterpret_cast<std::uintptr_t>(memory.get()) % 64) % 64;
  const Tensor before = st.out(0);
  RunContext ctx;
  ctx.workspace = aligned;
  ctx.workspace_bytes = need - 1;
  expect_refused(run(p, st.args(0), ctx), "lightning_indexer", "context.workspace_bytes", "the plan needs " + std::to_string(need));
  ctx.workspace = aligned + 8;
  ctx.workspace_bytes = need;
  expect_refused(run(p, st.args(0), ctx), "lightning_indexer", "context.workspace", "64-byte aligned");
  EXPECT_TRUE(st.out(0).same_bytes(before));
  // Poisoned workspace: the run must not depend on what the caller's memory held.
  std::memset(aligned, 0xA5, need);
  ctx.workspace = aligned;
  const long fallbacks = cpu::workspace_fallbacks();
  ASSERT_TRUE(run(p, st.args(0), ctx).ok());
  EXPECT_EQ(cpu::workspace_fallbacks(), fallbacks);
  ASSERT_TRUE(lightning_indexer(ref.d, ref.args(0)).ok());
  EXPECT_TRUE(st.out(0).same_bytes(ref.out(0)));
}

TEST(LightningIndexerPlan, TheCandidateListSaysWhyEachBackendDeclined) {
  Step st;
  PlanOptions po;
  po.backends = {Backend::cuda, Backend::cpu};
  LightningIndexerPlan p;
  ASSERT_TRUE(plan(st.d, st.args(0), po, &p).ok());
  EXPECT_EQ(p.backend(), Backend::cpu);
  EXPECT_NE(p.decisions().find("cuda: declined (backend=cuda but the tensors are in host memory"), std::string::npos)
      << p.decisions();
  EXPECT_NE(p.decisions().find("cpu: chosen"), std::string::npos) << p.decisions();
  po.backends = {Backend::cuda};
  LightningIndexerPlan none;
  expect_refused(plan(st.d, st.args(0), po, &none), "lightning_indexer", "backend", "host memory");
  EXPECT_FALSE(none.valid());
}

TEST(LightningIndexerPlan, RunsFollowTheCallersArena) {
  Step st, ref;
  tbb::task_arena arena(1);
  PlanOptions po;
  po.arena = &arena;
  LightningIndexerPlan p;
  ASSERT_TRUE(plan(st.d, st.args(0), po, &p).ok());
  EXPECT_NE(p.implementation().find("1 thread (caller's arena)"), std::string::npos) << p.implementation();
  ASSERT_TRUE(run(p, st.args(0)).ok());
  ASSERT_TRUE(lightning_indexer(ref.d, ref.args(0)).ok());
  EXPECT_TRUE(st.out(0).same_bytes(ref.out(0)));
  // Inside the arena the back-end sees its concurrency, not the library's setting.
  int seen = 0;
  arena.execute([&] {
    cpu::ExecutionScope scope(&arena, nullptr, nullptr);
    seen = cpu::num_threads();
  });
  EXPECT_EQ(seen, 1);
}

// The remap's indices are per-layer data: a run checks them (host memory), the plan does not.
TEST(RemapIndicesPlan, ARunChecksTheIndicesOfEachLayer) {
  Step st;
  ASSERT_TRUE(lightning_indexer(st.d, st.args(0)).ok());
  Tensor rows = st.out(0);
  RemapIndicesArgs a;
  a.indices = st.out(0).view();
  a.input_row_offsets = st.b.at("input_row_offsets").view();
  a.lookup_table = st.b.at("k_cache.lookup_table").view();
  a.page_size = st.b.at("k_cache.blocks").shape()[3];
  a.num_blocks = st.b.at("k_cache.blocks").shape()[0];
  a.rows = rows.view();
  RemapIndicesPlan p;
  ASSERT_TRUE(plan(a, PlanOptions{}, &p).ok());
  ASSERT_TRUE(run(p, a).ok());
  Tensor expected = rows;
  ASSERT_TRUE(remap_indices_to_rows(a).ok());
  EXPECT_TRUE(rows.same_bytes(expected));
  st.out(0).data<std::int32_t>()[1] = -5;
  rows.poison();
  const Tensor before = rows;
  expect_refused(run(p, a), "remap_indices_to_rows", "indices[0, 1]", "=-5");
  EXPECT_TRUE(rows.same_bytes(before));
}

}  // namespace
}  // namespace mlakit
