// Every FSDP strategy in process (ranks as threads over Gloo) against world size 1: full_shard,
// shard_grad_op and no_shard on 2 and 3 ranks, hybrid_shard on two "nodes" of two ranks and of
// one, each with one micro-step and with two (gradient accumulation: sync off, then on). Each
// rank trains its own rows; the ranks' loss sums add up to the single rank's over all rows, and
// each rank's gradient shard is that slice of the single rank's gradients, for a tied and an
// untied model. The binary's runs of the same (launch/dist_equivalence_test.cc) allow 1e-5 on the
// losses; so does this. With LoRA the base is frozen (stored in the compute dtype: bf16 under bf16,
// gathered as it is, or under no_shard handed out as it is) and only the adapters' gradient shards
// exist; they match world size 1 alike, in fp32 and in bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/rank_threads.h"
#include "common/small_model.h"
#include "common/test_backend.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/store.h"
#include "kiln/fsdp/fsdp.h"
#include "kiln/model/decoder.h"

namespace kiln {
namespace {

constexpr int kT = 10;  // tokens per row

// Row `row` of the whole batch: ids and targets spread over the vocabulary, every fourth target
// ignored.
void fill_row(Batch& b, int b_row, int row, int V) {
  for (int t = 0; t < kT; ++t) {
    const size_t i = static_cast<size_t>(b_row) * kT + t;
    b.input_ids[i] = (t * 7 + row * 11 + 3) % V;
    b.positions[i] = t;
    b.targets[i] = t % 4 == 3 ? kIgnoreIndex : (t * 5 + row * 13 + 1) % V;
  }
}

// Rows [first, first + n).
Batch rows(int first, int n, int V) {
  Batch b;
  b.resize(n, kT);
  for (int r = 0; r < n; ++r) fill_row(b, r, first + r, V);
  return b;
}

// The groups of one rank: the shard group, and under hybrid_shard the replica group (ranks
// r / per_node form a node, as WorkerContext::make_groups splits them).
struct Groups {
  std::unique_ptr<Communicator> world, shard_owned, replica;
  Communicator* shard = nullptr;
};

Groups make_groups(const std::shared_ptr<Store>& store, int rank, int world, int nodes) {
  Groups g;
  g.world = make_gloo_communicator(store, rank, world, GlooOptions{});
  g.shard = g.world.get();
  if (nodes == 0) return g;
  const int per_node = world / nodes, node = rank / per_node, local = rank % per_node;
  std::vector<int> intra, inter;
  for (int l = 0; l < per_node; ++l) intra.push_back(node * per_node + l);
  for (int n = 0; n < nodes; ++n) inter.push_back(n * per_node + local);
  g.shard_owned = g.world->split(intra, "intra");
  g.replica = g.world->split(inter, "inter");
  g.shard = g.shard_owned.get();
  return g;
}

struct RankResult {
  double loss = 0;
  std::vector<ShardRange> ranges;
  std::vector<std::vector<float>> grads;  // per unit: this rank's gradient shard
};

// One step of `world` ranks (`nodes` > 0: hybrid_shard over that many nodes) in `accum`
// micro-steps of `n` rows; rank r's micro-step m trains rows from (m * world + r) * n.
std::vector<RankResult> run_step(const ModelConfig& c, const ParamStore& init,
                                 ShardStrategy strategy, int world, int nodes, int accum, int n,
                                 float scale, const std::optional<LoraConfig>& lora,
                                 const Backend& be) {
  const int V = static_cast<int>(c.vocab_size);
  auto store = std::make_shared<MemoryStore>();
  std::vector<RankResult> out(world);
  testing::run_rank_threads(world, [&](int r) {
    Groups g = make_groups(store, r, world, nodes);
    Decoder model(c, be, lora);
    Fsdp fsdp(model.layout(), be, strategy, *g.shard, g.replica.get());
    RankResult& res = out[r];
    res.ranges = fsdp.shard_ranges();
    for (int u = 0; u < fsdp.num_units(); ++u) {
      fsdp.zero_shard(u);
      fsdp.load_shard(u, 0, init.params(u).data() + res.ranges[u].begin, res.ranges[u].size());
    }
    fsdp.zero_grads();
    for (int m = 0; m < accum; ++m) {
      fsdp.set_sync_grads(m + 1 == accum);
      res.loss += model.forward_backward(rows((m * world + r) * n, n, V), fsdp, scale, false);
    }
    fsdp.finish_backward();
    be.synchronize();
    for (int u = 0; u < fsdp.num_units(); ++u) {
      if (!fsdp.trainable(u)) {
        res.grads.emplace_back();
        continue;
      }
      const float* gr = fsdp.shard_grads(u);
      res.grads.emplace_back(gr, gr + res.ranges[u].size());
    }
  });
  return out;
}

// Each rank's gradient shard is the single rank's gradients at its range; the losses add up.
// tol: the gradients' relative error allowed (2e-5 in fp32).
void expect_matches_one_rank(ShardStrategy strategy, int world, int nodes, int accum, bool tied,
                             const std::optional<LoraConfig>& lora = std::nullopt,
                             const Backend& be = testing::cpu_fp32(), double tol = 2e-5) {
  SCOPED_TRACE(std::string(name_of(kShardStrategyNames, strategy)) + ", world " +
               std::to_string(world) + ", nodes " + std::to_string(nodes) + ", accumulation " +
               std::to_string(accum) + (tied ? ", tied" : ", untied") + (lora ? ", lora" : "") +
               ", " + std::string(be.name()));
  const ModelConfig c = testing::small_config(tied);
  const ParamLayout layout(c, lora);
  ParamStore init(layout, testing::cpu_fp32(), /*with_grads=*/false);
  testing::randomize(init, layout, 7);  // B non-zero too: A's gradients are not zero
  const int rows_total = world * accum;
  const float scale =
      1.0f / static_cast<float>(rows(0, rows_total, static_cast<int>(c.vocab_size)).num_targets());
  // World size 1: one micro-step over every row.
  const std::vector<RankResult> one =
      run_step(c, init, ShardStrategy::kFullShard, 1, 0, 1, rows_total, scale, lora, be);
  const std::vector<RankResult> many =
      run_step(c, init, strategy, world, nodes, accum, 1, scale, lora, be);
  size_t compared = 0;
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(many.size(), static_cast<size_t>(world));
  double sum = 0;
  for (int r = 0; r < world; ++r) {
    sum += many[r].loss;
    for (size_t u = 0; u < many[r].grads.size(); ++u) {
      EXPECT_EQ(layout.units()[u].trainable, !one[0].grads[u].empty()) << "unit " << u;
      if (!layout.units()[u].trainable) continue;  // frozen: no gradient anywhere
      const ShardRange& range = many[r].ranges[u];
      EXPECT_LT(testing::rel_err(many[r].grads[u].data(), one[0].grads[u].data() + range.begin,
                                 range.size()),
                tol)
          << "rank " << r << " unit " << u;
      compared += range.size();
    }
  }
  EXPECT_GE(compared, layout.trainable_numel());  // every trainable element, on some rank
  EXPECT_NEAR(sum, one[0].loss,
              (be.activation_dtype() == DType::F32 ? 1e-5 : 1e-3) * std::fabs(one[0].loss));
}

TEST(FsdpStrategies, EachMatchesOneRank) {
  for (bool tied : {true, false}) {
    for (ShardStrategy s :
         {ShardStrategy::kFullShard, ShardStrategy::kShardGradOp, ShardStrategy::kNoShard}) {
      for (int world : {2, 3}) {
        for (int accum : {1, 2}) expect_matches_one_rank(s, world, 0, accum, tied);
      }
    }
  }
}

TEST(FsdpStrategies, HybridShardMatchesOneRank) {
  for (bool tied : {true, false}) {
    for (int accum : {1, 2}) {
      expect_matches_one_rank(ShardStrategy::kHybridShard, 4, 2, accum, tied);  // 2 nodes of 2
      expect_matches_one_rank(ShardStrategy::kHybridShard, 2, 2, accum, tied);  // 2 nodes of 1
    }
  }
}

// LoRA: only the adapters have gradients, under every strategy, the frozen base stored and
// gathered in fp32, and in bf16 (bf16 rounds the products differently for 1 row and for all:
// 1e-2).
TEST(FsdpStrategies, LoraAdaptersMatchOneRank) {
  LoraConfig lora;
  lora.rank = 2;
  lora.alpha = 4;
  lora.targets = resolve_lora_targets({"all-linear"}, "test");
  for (const Backend* be : {&testing::cpu_fp32(), &testing::cpu_bf16()}) {
    const double tol = be == &testing::cpu_fp32() ? 2e-5 : 1e-2;
    for (bool tied : {true, false}) {
      for (ShardStrategy s :
           {ShardStrategy::kFullShard, ShardStrategy::kShardGradOp, ShardStrategy::kNoShard}) {
        expect_matches_one_rank(s, 2, 0, 2, tied, lora, *be, tol);
      }
      expect_matches_one_rank(ShardStrategy::kHybridShard, 4, 2, 1, tied, lora, *be, tol);
    }
  }
}

// load_shard of a frozen unit stored in bf16, in pieces at odd offsets (as the trainer loads in
// 16 MiB pieces): the shard holds exactly the whole unit rounded to bf16 (what ParamStore keeps),
// on each of 2 ranks, and the model computes from it what it computes over ParamStore.
TEST(FsdpStrategies, FrozenBf16ShardsLoadInPiecesAsTheWholeUnitRounded) {
  const Backend& be = testing::cpu_bf16();
  if (be.activation_dtype() != DType::BF16) {
    GTEST_SKIP() << "no native bf16 products on this CPU: nothing is stored in bf16";
  }
  LoraConfig lora;
  lora.rank = 2;
  lora.alpha = 4;
  lora.targets = resolve_lora_targets({"all-linear"}, "test");
  const ModelConfig c = testing::small_config(false);
  const ParamLayout layout(c, lora);
  ParamStore init(layout, testing::cpu_fp32(), false), whole(layout, be, false);
  testing::randomize(init, layout, 7);
  testing::randomize(whole, layout, 7);
  const Batch batch = rows(0, 2, static_cast<int>(c.vocab_size));
  Decoder one(c, be, lora);
  const double want = one.forward(batch, whole);
  auto store = std::make_shared<MemoryStore>();
  std::vector<double> losses(2);
  testing::run_rank_threads(2, [&](int r) {
    Groups g = make_groups(store, r, 2, 0);
    Decoder model(c, be, lora);
    Fsdp fsdp(model.layout(), be, ShardStrategy::kNoShard, *g.shard, nullptr);
    const auto ranges = fsdp.shard_ranges();
    for (int u = 0; u < fsdp.num_units(); ++u) {
      fsdp.zero_shard(u);
      const float* src = init.params(u).data() + ranges[u].begin;
      const size_t n = ranges[u].size(), cut1 = n / 3, cut2 = n / 3 + n / 5 + 1;
      fsdp.load_shard(u, 0, src, cut1);
      fsdp.load_shard(u, cut1, src + cut1, cut2 - cut1);
      fsdp.load_shard(u, cut2, src + cut2, n - cut2);
    }
    for (int u = 0; u < fsdp.num_units(); ++u) {
      if (fsdp.trainable(u)) continue;
      // no_shard hands a frozen shard in the gather dtype out as it is: the stored bf16 values.
      const ConstDevPtr got = fsdp.acquire(u);
      const ConstDevPtr ref = whole.acquire(u);
      EXPECT_EQ(got.dtype, DType::BF16);
      EXPECT_EQ(std::memcmp(got.data, ref.data, layout.units()[u].numel * 2), 0) << "unit " << u;
      whole.release(u);
      fsdp.release(u);
    }
    fsdp.finish_forward();
    losses[r] = model.forward(batch, fsdp);
  });
  EXPECT_EQ(losses[0], want);
  EXPECT_EQ(losses[1], want);
}

}  // namespace
}  // namespace kiln
