// The memory plan: its arithmetic on a tiny config (worked out here by hand from the shapes), its
// activation figure against the model's own arena, and its FSDP pool figure against what a real
// 2-rank FSDP run's pool holds after two steps, for each strategy and dtype.
#include "kiln/train/memory_plan.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/small_model.h"
#include "common/test_backend.h"
#include "kiln/base/error.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/store.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/model/decoder.h"

namespace kiln {
namespace {

// 4 layers, so three layer gradients can be in flight at once.
ModelConfig plan_config(bool tied = true) {
  ModelConfig c = testing::small_config(tied);
  c.num_hidden_layers = 4;
  return c;
}

// Floats per unit of plan_config: C = 16, I = 24, 4 heads of 4, 2 kv heads (kv dim 8), V = 23.
constexpr size_t kEmbed = 23 * 16;
constexpr size_t kLayer = 16 + (16 * 16 + 16) + 2 * (8 * 16 + 8) + 16 * 16 + 16 + 3 * 24 * 16;
constexpr size_t kHeadTied = 16;

size_t pad(size_t n, size_t S) { return (n + S - 1) / S * S; }

TEST(MemoryPlan, ArithmeticOfATinyConfig) {
  const ModelConfig c = plan_config();
  ASSERT_EQ(ParamLayout(c).units()[1].numel, kLayer);
  MemorySettings s;
  s.world_size = s.shard_size = 2;
  s.strategy = ShardStrategy::kFullShard;
  s.micro_batch = 2;
  s.seq_len = 8;
  s.baseline = 1000;
  const MemoryPlan p = plan_memory(c, s);
  const size_t E = pad(kEmbed, 2), Ly = pad(kLayer, 2), H = pad(kHeadTied, 2);
  EXPECT_EQ(p.params, 4 * (E + 4 * Ly + H) / 2);
  EXPECT_EQ(p.grads, p.params);
  EXPECT_EQ(p.optimizer, 2 * p.params);  // m and v of rank 0's (unpadded) part
  // Gathered: embed, two layers (in use + prefetched), head; gradients: embed, three layers,
  // head; and each gradient's reduced shard.
  EXPECT_EQ(p.gathered, 4 * (E + 2 * Ly + H));
  EXPECT_EQ(p.grad_buffers, 4 * (E + 3 * Ly + H));
  EXPECT_EQ(p.comm, 4 * (E + 3 * Ly + H) / 2);
  EXPECT_EQ(p.comm_scratch, 4 * Ly / 2);  // Gloo's partial sums: one largest shard at two ranks
  EXPECT_EQ(p.largest_unit, "layers.0");
  EXPECT_EQ(p.largest_gathered, 4 * Ly);
  EXPECT_EQ(p.final_save, 4 * kLayer);
  EXPECT_EQ(p.peak, 1000 + p.params + p.grads + p.optimizer + p.gathered + p.grad_buffers + p.comm +
                        p.comm_scratch + p.activations + p.workspace);

  // bf16 gathers half; recomputation keeps one layer; AdamW's state halves again at 4 ranks.
  s.bf16 = true;
  s.recompute = true;
  const MemoryPlan b = plan_memory(c, s);
  EXPECT_EQ(b.gathered, 2 * (E + 2 * Ly + H));
  EXPECT_LT(b.activations, p.activations);
  EXPECT_EQ(b.activations, b.activations_recompute);
  EXPECT_EQ(p.activations, p.activations_full);
  s.world_size = s.shard_size = 4;
  EXPECT_EQ(plan_memory(c, s).params,
            4 * (pad(kEmbed, 4) + 4 * pad(kLayer, 4) + pad(kHeadTied, 4)) / 4);

  // One process: no gathering in fp32, the whole model's state, no pool at all.
  MemorySettings one;
  one.micro_batch = 2;
  one.seq_len = 8;
  const MemoryPlan q = plan_memory(c, one);
  EXPECT_EQ(q.params, 4 * (kEmbed + 4 * kLayer + kHeadTied));
  EXPECT_EQ(q.gathered + q.grad_buffers + q.comm, 0u);
  // shard_grad_op keeps every gathered unit until backward ends.
  s.strategy = ShardStrategy::kShardGradOp;
  s.bf16 = false;
  EXPECT_EQ(plan_memory(c, s).gathered,
            4 * (pad(kEmbed, 4) + 4 * pad(kLayer, 4) + pad(kHeadTied, 4)));
}

// For every family: Qwen3's q/k norms keep their inputs and reciprocal RMS per layer.
TEST(MemoryPlan, ActivationsAreTheModelsArena) {
  for (const ModelFamily f : {ModelFamily::kQwen2, ModelFamily::kQwen3, ModelFamily::kLlama}) {
    for (bool bf16 : {false, true}) {
      for (bool recompute : {false, true}) {
        const Backend& be = bf16 ? testing::cpu_bf16() : testing::cpu_fp32();
        const ModelConfig c =
            f == ModelFamily::kQwen2 ? plan_config() : testing::small_family_config(f, true);
        Decoder model(c, be);
        ParamStore store(model.layout(), be);
        testing::randomize(store, model.layout(), 3);
        Batch b;
        b.resize(3, 5);
        for (size_t i = 0; i < b.input_ids.size(); ++i) {
          b.input_ids[i] = static_cast<int32_t>(i % 23);
          b.positions[i] = static_cast<int32_t>(i % 5);
          b.targets[i] = static_cast<int32_t>((i + 1) % 23);
        }
        model.forward_backward(b, store, 0.1f, recompute);
        // bf16 storage only where the backend uses it (not where bf16 products fall back to
        // fp32), as the trainer plans it.
        const bool bf16_storage = be.activation_dtype() == DType::BF16;
        EXPECT_EQ(bf16_storage, bf16 && gemm_bf16_native());
        EXPECT_EQ(activation_arena_bytes(c, 15, recompute, bf16_storage), model.activation_bytes())
            << model_type_name(f) << " bf16 " << bf16 << " recompute " << recompute;
      }
    }
  }
}

struct PoolCase {
  ShardStrategy strategy;
  bool bf16, reduce_bf16, tied;
};

// Two ranks as threads train two steps through a real Fsdp; its pool must hold what the plan says.
TEST(MemoryPlan, PoolIsWhatFsdpHolds) {
  const std::vector<PoolCase> cases = {{ShardStrategy::kFullShard, false, false, true},
                                       {ShardStrategy::kFullShard, true, false, true},
                                       {ShardStrategy::kFullShard, true, true, false},
                                       {ShardStrategy::kShardGradOp, true, false, true},
                                       {ShardStrategy::kNoShard, true, false, true},
                                       {ShardStrategy::kNoShard, false, true, true}};
  for (const PoolCase& pc : cases) {
    const ModelConfig c = plan_config(pc.tied);
    MemorySettings s;
    s.world_size = 2;
    s.shard_size = pc.strategy == ShardStrategy::kNoShard ? 1 : 2;
    s.strategy = pc.strategy;
    // Gathered in bf16 only where the backend stores bf16 (the trainer's plan asks it so).
    s.bf16 =
        (pc.bf16 ? testing::cpu_bf16() : testing::cpu_fp32()).activation_dtype() == DType::BF16;
    s.reduce_bf16 = pc.reduce_bf16;
    s.micro_batch = 2;  // the batch below: embed_rows' buffers follow its tokens
    s.seq_len = 4;
    const MemoryPlan plan = plan_memory(c, s);
    auto store = std::make_shared<MemoryStore>();
    std::vector<size_t> held(2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        try {
          auto comm = make_gloo_communicator(store, r, 2, GlooOptions{});
          const Backend& be = pc.bf16 ? testing::cpu_bf16() : testing::cpu_fp32();
          Decoder model(c, be);
          Fsdp fsdp(model.layout(), be, pc.strategy, *comm, nullptr, true,
                    pc.reduce_bf16 ? DType::BF16 : DType::F32);
          Batch b;
          b.resize(2, 4);
          for (size_t i = 0; i < b.input_ids.size(); ++i) {
            b.input_ids[i] = static_cast<int32_t>((i * 5 + r) % 23);
            b.positions[i] = static_cast<int32_t>(i % 4);
            b.targets[i] = static_cast<int32_t>((i + 3) % 23);
          }
          for (int step = 0; step < 2; ++step) {
            fsdp.zero_grads();
            model.forward_backward(b, fsdp, 0.1f, false);
            fsdp.finish_backward();
          }
          be.synchronize();
          held[r] = fsdp.pool_bytes();
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
    for (auto& t : ranks) t.join();
    const std::string what = std::string(strategy_name(pc.strategy)) + (pc.bf16 ? " bf16" : "") +
                             (pc.reduce_bf16 ? " reduce bf16" : "") + (pc.tied ? " tied" : "");
    ASSERT_EQ(errors[0] + errors[1], "") << what;
    EXPECT_EQ(held[0], plan.gathered + plan.grad_buffers + plan.comm) << what;
  }
}

TEST(MemoryPlan, SizesParseAndBadOnesNameTheField) {
  EXPECT_EQ(parse_memory_size("24GiB", "--memory-per-device"), size_t{24} << 30);
  EXPECT_EQ(parse_memory_size("1.5GB", "x"), size_t{1500000000});
  EXPECT_EQ(parse_memory_size("512MiB", "x"), size_t{512} << 20);
  EXPECT_EQ(parse_memory_size("4096", "x"), size_t{4096});
  for (const char* bad : {"", "GiB", "-1GiB", "24 GiB", "24Gb", "0", "1.2.3MB"}) {
    try {
      parse_memory_size(bad, "--memory-per-device");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--memory-per-device"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln
