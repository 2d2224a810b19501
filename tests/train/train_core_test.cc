// The training core (train_core.h), the one device half of a step that the trainer and the
// memory plan both run: on the CPU backend a step's figures are the step's (the loss sum is the
// forward's, the squared gradient norm is the update's before clipping, the clip bounds the
// update, the squared weights are the updated ones'); and the memory plan is that core's two
// steps on the counting backend with the settings the trainer reads from the same recipe.
#include "kiln/train/train_core.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/small_model.h"
#include "common/test_backend.h"
#include "kiln/comm/null_communicator.h"
#include "kiln/kernels/device/counting_backend.h"
#include "kiln/train/memory_plan.h"

namespace kiln {
namespace {

// Plain SGD (no momentum, no decay): the update is lr times the (clipped) gradient, exactly.
OptimizerSettings plain_sgd() {
  OptimizerSettings o;
  o.kind = OptimizerKind::kSgd;
  return o;
}

// A TrainCore of small_config on one rank of the CPU backend, its weights random.
struct CpuCore {
  explicit CpuCore(double grad_clip)
      : comm(make_local_communicator()),
        core(testing::small_config(), testing::cpu_fp32(), std::nullopt,
             {.strategy = ShardStrategy::kNoShard, .shard = *comm}, plain_sgd(),
             {.grad_clip = grad_clip}) {
    const ParamLayout& layout = core.model().layout();
    for (int u = 0; u < layout.num_units(); ++u) {
      const size_t n = layout.units()[u].numel;
      const std::vector<float> w = testing::random_vec(n, 100 + static_cast<uint32_t>(u), 0.3f);
      core.fsdp().load_shard(u, 0, w.data(), n);
    }
    // Two micro-batches of different contents: (2, 8) and a packed (2, 8).
    batches = {testing::grad_batch(2, 8, 23, false), testing::grad_batch(2, 8, 23, true)};
    for (Batch& b : batches) targets += static_cast<double>(b.num_targets());
  }
  // Every unit's weights, concatenated (one rank: the shards are the units).
  std::vector<float> weights() {
    std::vector<float> all;
    const auto ranges = core.fsdp().shard_ranges();
    for (int u = 0; u < core.fsdp().num_units(); ++u) {
      const float* p = core.fsdp().shard_params(u);
      all.insert(all.end(), p, p + ranges[u].size());
    }
    return all;
  }
  double sum(int i) {
    double v = 0;
    testing::cpu_fp32().copy_to_host(&v, core.sums() + i, sizeof(double));
    return v;
  }

  std::unique_ptr<Communicator> comm;
  TrainCore core;
  std::vector<Batch> batches;
  double targets = 0;
};

double sq_norm(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return s;
}

// ||w0 - w1||^2 / lr^2: the squared norm of the gradient the update applied.
double applied_sq(const std::vector<float>& w0, const std::vector<float>& w1, double lr) {
  double s = 0;
  for (size_t i = 0; i < w0.size(); ++i) {
    const double d = (static_cast<double>(w0[i]) - w1[i]) / lr;
    s += d * d;
  }
  return s;
}

TEST(TrainCore, AStepsFiguresAreItsForwardNormUpdateAndWeights) {
  CpuCore c(/*grad_clip=*/0);
  c.core.zero_loss();
  for (const Batch& b : c.batches) c.core.evaluate(b);
  const double forward_loss = c.sum(TrainCore::kLossSum);
  const std::vector<float> w0 = c.weights();
  const double lr = 0.01;
  c.core.step(c.batches, c.targets, 0, lr);
  const std::vector<float> w1 = c.weights();
  EXPECT_NEAR(c.sum(TrainCore::kLossSum), forward_loss, 1e-9 * std::fabs(forward_loss));
  const double grad_sq = c.sum(TrainCore::kGradSq);
  ASSERT_GT(grad_sq, 0);
  EXPECT_NEAR(applied_sq(w0, w1, lr), grad_sq, 1e-3 * grad_sq);
  EXPECT_NEAR(c.sum(TrainCore::kParamSq), sq_norm(w1), 1e-9 * sq_norm(w1));
}

// With train.grad_clip below the norm, the update applies a gradient of norm grad_clip; the
// reported norm is the one before clipping.
TEST(TrainCore, TheStepClipsToGradClip) {
  CpuCore free(/*grad_clip=*/0);
  free.core.step(free.batches, free.targets, 0, 0.01);
  const double norm = std::sqrt(free.sum(TrainCore::kGradSq));
  CpuCore clipped(/*grad_clip=*/norm / 4);
  const std::vector<float> w0 = clipped.weights();
  clipped.core.step(clipped.batches, clipped.targets, 0, 0.01);
  EXPECT_NEAR(std::sqrt(clipped.sum(TrainCore::kGradSq)), norm, 1e-9 * norm);
  EXPECT_NEAR(std::sqrt(applied_sq(w0, clipped.weights(), 0.01)), norm / 4, 1e-3 * norm);
}

// No target in the step: no forward, zero gradients, the weights stay.
TEST(TrainCore, AStepWithoutTargetsChangesNothing) {
  CpuCore c(/*grad_clip=*/1.0);
  const std::vector<float> w0 = c.weights();
  c.core.step(c.batches, 0, 0, 0.01);
  EXPECT_EQ(c.sum(TrainCore::kLossSum), 0.0);
  EXPECT_EQ(c.sum(TrainCore::kGradSq), 0.0);
  EXPECT_EQ(c.weights(), w0);
}

// The memory plan reads the step's settings as the trainer does, from the one derivation.
TEST(TrainCore, ThePlanReadsTheTrainersStepSettings) {
  Recipe r;
  r.train.activation_checkpointing = true;
  r.train.grad_clip = 0.25;
  r.train.seed = 9;
  const StepSettings s = step_settings(r, 0);
  EXPECT_TRUE(s.recompute);
  EXPECT_EQ(s.grad_clip, 0.25);
  EXPECT_EQ(s.seed, 9u);
  EXPECT_EQ(memory_settings(r, 4, 4, /*on_cpu=*/false).step, s);
}

// The plan's device memory is two steps of the core on the counting backend, nothing else: a
// TrainCore stepped twice here over the planned micro-batches holds the plan's peak, activations
// and pool. Two micro-batches per step: under shard_grad_op the first keeps whole-unit gradients
// (Fsdp::set_sync_grads), so a plan that stepped otherwise would hold another pool.
TEST(TrainCore, ThePlanIsTwoStepsOfTheCore) {
  ModelConfig c = testing::small_config();
  c.num_hidden_layers = 4;
  for (ShardStrategy strategy : {ShardStrategy::kFullShard, ShardStrategy::kShardGradOp}) {
    MemorySettings s;
    s.world_size = s.shard_size = 4;
    s.strategy = strategy;
    s.micro_batch = 2;
    s.seq_len = 8;
    s.grad_accum = 2;
    s.step.grad_clip = 1.0;
    s.on_cpu = false;
    s.gloo = false;
    const MemoryPlan plan = plan_memory(c, s);

    CountingBackend be(Device::kCuda, ComputeDType::kFp32);
    auto comm = make_null_communicator(0, 4, CommScratch::kNone);
    TrainCore core(c, be, std::nullopt, {.strategy = strategy, .shard = *comm}, s.optimizer,
                   s.step);
    Batch b;  // every token a target, as the plan plans it
    b.resize(s.micro_batch, s.seq_len);
    for (size_t i = 0; i < b.targets.size(); ++i) {
      b.positions[i] = static_cast<int32_t>(i % static_cast<size_t>(s.seq_len));
      b.targets[i] = 0;
    }
    const std::vector<Batch> micro(2, b);
    for (int step = 0; step < 2; ++step) core.step(micro, 2.0 * b.targets.size(), step, 1e-5);
    const std::string what(name_of(kShardStrategyNames, strategy));
    EXPECT_EQ(plan.device_peak, be.memory_stats().peak) << what;
    EXPECT_EQ(plan.activations, core.model().activation_bytes()) << what;
    EXPECT_EQ(plan.gathered + plan.grad_buffers + plan.comm, core.fsdp().pool_parts().total())
        << what;
  }
}

}  // namespace
}  // namespace kiln
