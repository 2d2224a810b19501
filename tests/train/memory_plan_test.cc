// The memory plan (a counting run of the real code): its arithmetic on a tiny config (worked out
// here by hand from the shapes), its activation figures against the model's own arena on the
// CPU backend, its FSDP pool figure against what a real 2-rank FSDP run's pool holds after two
// steps, for each strategy and dtype; the CPU's kernel scratch counted as backend memory; the
// CUDA plan's workspace against the CUDA backend's own sizing functions (host-only); and the
// 7B model on 64 ranks planned in well under a second; a GPU plan's CUDA context and NCCL
// buffers.
#include "kiln/train/memory_plan.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>

#include "common/small_model.h"
#include "common/test_backend.h"
#include "kiln/base/error.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/store.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/scratch_sizes.h"
#include "kiln/kernels/cuda/scratch_sizes.h"
#include "kiln/model/decoder.h"
#include "kiln/train/run_shape.h"

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
// The embedding (23 rows of 16) is padded to whole rows per rank: ceil(23 / S) rows each.
size_t pad_embed(size_t S) { return (23 + S - 1) / S * 16 * S; }
// Bytes per element of what a bf16 run gathers, and of a LoRA run's frozen base: 2 where the CPU
// computes products in bf16, 4 where they fall back to fp32 (no AVX512_BF16, or KILN_CPU_ISA caps
// it), which the plan must follow as the backend does.
size_t bf16_storage_bytes() { return cpu_activation_dtype(true) == DType::BF16 ? 2 : 4; }

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
  const size_t E = pad_embed(2), Ly = pad(kLayer, 2), H = pad(kHeadTied, 2);
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
                        p.comm_scratch + p.activations + p.workspace + p.other);
  // Beside the parts: the batch's staging (4 x 16 ids) and the RoPE tables, no more.
  EXPECT_LT(p.other, size_t{4096});

  // bf16 gathers half (where the CPU has bf16 products); recomputation keeps one layer; AdamW's
  // state halves again at 4 ranks.
  s.bf16 = true;
  s.step.recompute = true;
  const MemoryPlan b = plan_memory(c, s);
  EXPECT_EQ(b.gathered, bf16_storage_bytes() * (E + 2 * Ly + H));
  EXPECT_LT(b.activations, p.activations);
  EXPECT_EQ(b.activations, b.activations_recompute);
  EXPECT_EQ(p.activations, p.activations_full);
  s.world_size = s.shard_size = 4;
  EXPECT_EQ(plan_memory(c, s).params,
            4 * (pad_embed(4) + 4 * pad(kLayer, 4) + pad(kHeadTied, 4)) / 4);

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
            4 * (pad_embed(4) + 4 * pad(kLayer, 4) + pad(kHeadTied, 4)));
}

// LoRA: the base's shards in the compute dtype (bf16: 2 bytes where the CPU has bf16 products),
// gradients and AdamW state for the adapters only; the final save holds the adapters, not a unit of
// the base.
TEST(MemoryPlan, LoraKeepsTheFrozenBaseInItsDtypeWithoutGradientsOrState) {
  const ModelConfig c = plan_config();
  LoraConfig lora;
  lora.rank = 2;
  lora.targets = resolve_lora_targets({"all-linear"}, "test");
  const size_t A = static_cast<size_t>(lora_parameter_count(c, lora)) / 4;  // per layer
  MemorySettings s;
  s.world_size = s.shard_size = 2;
  s.strategy = ShardStrategy::kFullShard;
  s.micro_batch = 2;
  s.seq_len = 8;
  s.bf16 = true;
  s.lora = lora;
  const MemoryPlan p = plan_memory(c, s);
  const size_t E = pad_embed(2), Ly = pad(kLayer, 2), H = pad(kHeadTied, 2);
  const size_t Ad = pad(A, 2);
  EXPECT_EQ(p.params, bf16_storage_bytes() * (E + 4 * Ly + H) / 2 + 4 * 4 * Ad / 2);
  EXPECT_EQ(p.grads, 4 * 4 * Ad / 2);
  EXPECT_EQ(p.optimizer, 2 * p.grads);
  EXPECT_EQ(p.final_save, 4 * (4 * A + A));  // every adapter as PEFT tensors, and one unit read
  // Without LoRA the same run holds fp32 shards, gradients and state for everything.
  s.lora.reset();
  const MemoryPlan full = plan_memory(c, s);
  EXPECT_EQ(full.grads, 4 * (E + 4 * Ly + H) / 2);
  EXPECT_LT(p.params + p.grads + p.optimizer, (full.params + full.grads + full.optimizer) / 2);
}

// A batch of rows x cols tokens of plan_config's vocabulary, each targeting the next.
Batch token_batch(int rows, int cols) {
  Batch b;
  b.resize(rows, cols);
  for (size_t i = 0; i < b.input_ids.size(); ++i) {
    b.input_ids[i] = static_cast<int32_t>(i % 23);
    b.positions[i] = static_cast<int32_t>(i % static_cast<size_t>(cols));
    b.targets[i] = static_cast<int32_t>((i + 1) % 23);
  }
  return b;
}

// For every family (Qwen3's q/k norms keep their inputs and reciprocal RMS per layer): the
// plan's arena under both recomputation settings is the real model's.
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
        model.forward_backward(token_batch(3, 5), store, 0.1f, recompute);
        MemorySettings s;
        s.micro_batch = 3;
        s.seq_len = 5;
        s.bf16 = bf16;
        s.step.recompute = !recompute;  // the other setting's arena comes from a second run
        const MemoryPlan p = plan_memory(c, s);
        EXPECT_EQ(recompute ? p.activations_recompute : p.activations_full,
                  model.activation_bytes())
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
    s.micro_batch = 2;  // the batch below: the split lookup's buffers follow its tokens
    s.seq_len = 4;
    s.gloo = false;
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
    const std::string what = std::string(name_of(kShardStrategyNames, pc.strategy)) +
                             (pc.bf16 ? " bf16" : "") + (pc.reduce_bf16 ? " reduce bf16" : "") +
                             (pc.tied ? " tied" : "");
    ASSERT_EQ(errors[0] + errors[1], "") << what;
    EXPECT_EQ(held[0], plan.gathered + plan.grad_buffers + plan.comm) << what;
  }
}

// The CPU's cross-entropy keeps its scratch in the backend's memory: memory_stats() grows by
// what cpu_ce_scratch_bytes() says, and the plan's workspace is that plus the GEMM library's
// allowance for the chunk's gradient.
TEST(MemoryPlan, CpuKernelScratchIsBackendMemory) {
  const ModelConfig c = plan_config();
  CpuBackend fresh;
  DeviceBuffer<double> loss(fresh, 1);
  DeviceBuffer<float> x(fresh, 12 * 16), dx(fresh, 12 * 16), w(fresh, 23 * 16), dw(fresh, 23 * 16);
  DeviceBuffer<int32_t> targets(fresh, 12);
  const size_t held = fresh.memory_stats().in_use;
  fresh.cross_entropy(loss.data(), dx.data(), dw.data(), x.data(), w.data(), targets.data(), 12, 12,
                      16, 23, 1.0f);
  const CpuCeScratchBytes want = cpu_ce_scratch_bytes(12, 12, 16, 23, false, true, DType::F32);
  EXPECT_EQ(fresh.memory_stats().in_use - held, want.total());

  // Attention's scratch (2 sequences of 6, plan_config's 4 heads of 4, 2 kv heads): the team's
  // per-thread heads and the backward's per-query-head dK and dV, for this process's team.
  const AttnShape as{2, 6, 4, 2, 4};
  DeviceBuffer<float> q(fresh, 12 * 16), kv(fresh, 12 * 8), y(fresh, 12 * 16),
      lse(fresh, 2 * 4 * 6);
  DeviceBuffer<float> dq(fresh, 12 * 16), dk(fresh, 12 * 8), dv(fresh, 12 * 8);
  const size_t before_attention = fresh.memory_stats().in_use;
  fresh.attention_forward(y.data(), lse.data(), q.data(), kv.data(), kv.data(), nullptr, as);
  fresh.attention_backward(dq.data(), dk.data(), dv.data(), y.data(), q.data(), kv.data(),
                           kv.data(), y.data(), lse.data(), nullptr, as);
  const CpuAttentionScratchBytes team_now =
      cpu_attention_scratch_bytes(2, 6, 4, 4, omp_get_max_threads(), true);
  EXPECT_EQ(fresh.memory_stats().in_use - before_attention, team_now.team + team_now.heads);

  MemorySettings s;
  s.micro_batch = 2;
  s.seq_len = 6;
  s.cpu_threads = 3;  // the planned worker's team, not this process's
  const MemoryPlan p = plan_memory(c, s);
  // The library packs the widest dout of a weight gradient: the head's chunk (12, 23) or the
  // gate/up product's (12, 2I = 48).
  const size_t pack = std::max(cpu_gemm_pack_bytes(12, 23), cpu_gemm_pack_bytes(12, 48));
  const CpuAttentionScratchBytes attention = cpu_attention_scratch_bytes(2, 6, 4, 4, 3, true);
  EXPECT_EQ(p.workspace,
            want.total() + pack + kCpuLibraryPagesBytes + attention.team + attention.heads);
}

// The CUDA plan's workspace is what CudaBackend's own sizing functions give for the step
// (scratch_sizes.h, cross_entropy_plan.h): the cross-entropy's chunks (432 rows at Qwen's
// vocabulary, where the CPU takes 256), cuBLASLt's workspace, attention backward's scratch and
// the bf16 cast copies of fp32 operands, each rounded up to DeviceScratch's granule.
TEST(MemoryPlan, CudaPlanPartsAreTheCudaBackendsSizing) {
  ModelConfig c = testing::small_config(true);
  c.vocab_size = 151936;  // Qwen's vocabulary: the chunking differs from the CPU's
  MemorySettings s;
  s.micro_batch = 1;
  s.seq_len = 864;  // two full chunks of 432 rows
  s.on_cpu = false;
  s.gloo = false;
  for (bool bf16 : {false, true}) {
    s.bf16 = bf16;
    const MemoryPlan p = plan_memory(c, s);
    const int N = s.micro_batch * s.seq_len, C = c.hidden_size, V = c.vocab_size;
    const cuda::CePlan ce = cuda::ce_plan(N, V);
    ASSERT_EQ(ce.chunk_rows, 432) << "the CUDA chunking at V = 151936";
    ASSERT_NE(static_cast<size_t>(ce.chunk_rows), ce_chunk_rows(N, V)) << "CPU and CUDA differ";
    // One process under bf16 hands the model bf16 copies of the weights (ParamStore), so the
    // head's table arrives in bf16 and is used as it is.
    const cuda::CeScratchBytes b = cuda::ce_scratch_bytes(ce, C, V, bf16, true, false);
    size_t want = 0;
    for (size_t n : {b.rows, b.row_loss, b.xr, b.logits, b.dlogits_bf16, b.dxr, b.w_bf16}) {
      if (n > 0) want += cuda::scratch_capacity(n);
    }
    want += cuda::kLtWorkspaceBytes;
    const AttnShape shape{s.micro_batch, s.seq_len, static_cast<int>(c.num_attention_heads),
                          static_cast<int>(c.num_key_value_heads), static_cast<int>(c.head_dim())};
    want += cuda::scratch_capacity(cuda::attention_backward_scratch_bytes(shape));
    if (bf16) {
      // fp32 operands rounded for bf16 products: the gradients dout (cast_a; the widest is the
      // gate/up product's 2I columns), the attention output y as x of the o-projection's dw
      // (cast_c), and the bf16 biases widened for cuBLASLt's epilogue (bias_f32: q, k and v's).
      const size_t I = c.intermediate_size, Q = c.q_dim(), KV = c.kv_dim();
      want += cuda::scratch_capacity(sizeof(uint16_t) * N * 2 * I);
      want += cuda::scratch_capacity(sizeof(uint16_t) * N * Q);
      want += cuda::scratch_capacity(sizeof(float) * (Q + 2 * KV));
    }
    EXPECT_EQ(p.workspace, want) << (bf16 ? "bf16" : "fp32");
    // Device memory: kiln's, and the CUDA context (one process: no NCCL).
    EXPECT_EQ(p.peak, p.device_peak + p.cuda_context.bytes);
    EXPECT_TRUE(p.nccl_buffers.source.empty());
  }
}

// A GPU plan adds, per device, the CUDA context and (with NCCL between ranks) NCCL's buffers,
// each with its source; a CPU plan and a GPU run through Gloo have no NCCL buffers.
TEST(MemoryPlan, GpuPlanAddsTheCudaContextAndNcclBuffers) {
  const ModelConfig c = plan_config();
  const EnvLookup env = [](const char* name) { return std::getenv(name); };
  MemorySettings s;
  s.world_size = s.shard_size = 4;
  s.strategy = ShardStrategy::kFullShard;
  const MemoryPlan cpu = plan_memory(c, s);
  EXPECT_EQ(cpu.cuda_context.bytes + cpu.nccl_buffers.bytes, 0u);
  EXPECT_FALSE(cpu.to_json().contains("cuda_context_bytes"));
  EXPECT_FALSE(cpu.to_json().contains("nccl_buffers_bytes"));
  EXPECT_EQ(cpu.summary().find("CUDA context"), std::string::npos);

  s.on_cpu = false;
  s.gloo = false;
  const MemoryPlan gpu = plan_memory(c, s);
  EXPECT_EQ(gpu.cuda_context.bytes, cuda_context_memory(env).bytes);
  EXPECT_GT(gpu.cuda_context.bytes, size_t{100} << 20);
  EXPECT_EQ(gpu.nccl_buffers.bytes, nccl_buffer_memory({4}, env).bytes);
  EXPECT_GT(gpu.nccl_buffers.bytes, 0u);
  EXPECT_EQ(gpu.peak, gpu.device_peak + gpu.cuda_context.bytes + gpu.nccl_buffers.bytes);
  const Json j = gpu.to_json();
  EXPECT_EQ(j.at("cuda_context_bytes").get<size_t>(), gpu.cuda_context.bytes);
  EXPECT_EQ(j.at("nccl_buffers_bytes").get<size_t>(), gpu.nccl_buffers.bytes);
  EXPECT_NE(j.at("cuda_context_source").get<std::string>().find("CUDA"), std::string::npos);
  EXPECT_NE(j.at("nccl_buffers_source").get<std::string>().find("channels"), std::string::npos);
  EXPECT_NE(gpu.summary().find("NCCL buffers"), std::string::npos) << gpu.summary();

  s.strategy = ShardStrategy::kHybridShard;  // 2 nodes of 2: world, node and cross-node groups
  s.world_size = 4;
  s.shard_size = 2;
  EXPECT_EQ(plan_memory(c, s).nccl_buffers.bytes, nccl_buffer_memory({4, 2, 2}, env).bytes);
  s.gloo = true;  // dist.communicator: gloo on GPUs
  EXPECT_TRUE(plan_memory(c, s).nccl_buffers.source.empty());
}

// NCCL's buffers: per channel and ring peer, one buffer per protocol at NCCL's defaults, or as
// NCCL_BUFFSIZE, NCCL_LL_BUFFSIZE, NCCL_LL128_BUFFSIZE and NCCL_MAX_NCHANNELS say.
TEST(GpuRuntimeMemory, NcclBuffersPerChannelAndPeerFollowTheEnvironment) {
  std::map<std::string, std::string> vars;
  const EnvLookup env = [&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  const size_t per_connection = (size_t{4} << 20) + (size_t{512} << 10) + (size_t{4800} << 10);
  EXPECT_EQ(nccl_buffer_memory({2}, env).bytes, 32 * 1 * per_connection);  // one peer
  EXPECT_EQ(nccl_buffer_memory({8}, env).bytes, 32 * 2 * per_connection);  // previous and next
  EXPECT_EQ(nccl_buffer_memory({8, 4, 2}, env).bytes, 32 * 5 * per_connection);
  EXPECT_EQ(nccl_buffer_memory({1}, env).bytes, 0u);
  EXPECT_NE(nccl_buffer_memory({8}, env).source.find("32 channels"), std::string::npos);

  vars = {{"NCCL_BUFFSIZE", "1048576"}, {"NCCL_MAX_NCHANNELS", "4"}};
  const RuntimeMemoryPart set = nccl_buffer_memory({8}, env);
  EXPECT_EQ(set.bytes, 4 * 2 * (per_connection - (size_t{3} << 20)));
  EXPECT_NE(set.source.find("NCCL_BUFFSIZE=1048576"), std::string::npos) << set.source;
  EXPECT_NE(set.source.find("NCCL_MAX_NCHANNELS=4"), std::string::npos) << set.source;
  vars = {{"NCCL_BUFFSIZE", "4M"}};  // not a number NCCL reads: its default stays
  const RuntimeMemoryPart bad = nccl_buffer_memory({8}, env);
  EXPECT_EQ(bad.bytes, 32 * 2 * per_connection);
  EXPECT_NE(bad.source.find("ignored"), std::string::npos) << bad.source;

  vars.clear();
  EXPECT_EQ(cuda_context_memory(env).bytes, size_t{512} << 20);
  EXPECT_EQ(cuda_context_memory(env).source.find("EAGER"), std::string::npos);
  vars = {{"CUDA_MODULE_LOADING", "EAGER"}};
  EXPECT_NE(cuda_context_memory(env).source.find("EAGER"), std::string::npos);
}

// The plan runs the model without touching memory per element: the 7B model on 64 ranks (and
// the micro-batch search `kiln plan` makes) takes milliseconds, not the minutes a real step would.
TEST(MemoryPlan, SevenBillionOnSixtyFourRanksInMilliseconds) {
  MemorySettings s;
  s.world_size = s.shard_size = 64;
  s.strategy = ShardStrategy::kFullShard;
  s.bf16 = true;
  s.micro_batch = 4;
  s.seq_len = 4096;
  s.on_cpu = false;
  const auto t0 = std::chrono::steady_clock::now();
  const MemoryPlan p = plan_memory(preset_config("qwen2.5-7b"), s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 2.0);
  EXPECT_GT(p.params, size_t{7'000'000'000} * 4 / 64 * 9 / 10);
  EXPECT_GT(p.peak, p.params + p.grads + p.optimizer);
}

// The trainer and the plan read one derivation of the run's shape: one process shards nothing
// and reduces in fp32; hybrid_shard shards over a node, no_shard over one rank, the rest over
// the world.
TEST(MemoryPlan, RunShapeIsOneDerivationForTheTrainerAndThePlan) {
  Recipe r;
  r.dist.strategy = ShardStrategy::kHybridShard;
  r.dist.reduce_dtype = DType::BF16;
  const RunShape one = run_shape(r, 1, 1);
  EXPECT_EQ(one.strategy, ShardStrategy::kNoShard);
  EXPECT_EQ(one.shard_size, 1);
  EXPECT_EQ(one.reduce_dtype, DType::F32);
  const std::map<ShardStrategy, int> shard_size = {{ShardStrategy::kHybridShard, 4},
                                                   {ShardStrategy::kNoShard, 1},
                                                   {ShardStrategy::kFullShard, 8},
                                                   {ShardStrategy::kShardGradOp, 8}};
  for (const auto& [strategy, size] : shard_size) {
    r.dist.strategy = strategy;
    const RunShape shape = run_shape(r, 8, 4);
    EXPECT_EQ(shape.strategy, strategy);
    EXPECT_EQ(shape.shard_size, size) << name_of(kShardStrategyNames, strategy);
    EXPECT_EQ(shape.reduce_dtype, DType::BF16);
    const MemorySettings s = memory_settings(r, 8, 4, /*on_cpu=*/true);
    EXPECT_EQ(s.strategy, shape.strategy);
    EXPECT_EQ(s.shard_size, shape.shard_size);
    EXPECT_TRUE(s.reduce_bf16);
  }
  EXPECT_FALSE(memory_settings(r, 1, 1, true).reduce_bf16);
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

// A size past 2^64 bytes is refused in one line naming the flag, not wrapped around to a small
// budget.
TEST(MemoryPlan, SizesPastSixtyFourBitsAreRefused) {
  EXPECT_EQ(parse_memory_size("16777215TiB", "x"), size_t{16777215} << 40);
  for (const char* huge : {"99999999999999999999GiB", "16777216TiB", "18446744073709551616"}) {
    try {
      const size_t got = parse_memory_size(huge, "--memory-per-device");
      ADD_FAILURE() << "accepted " << huge << " as " << got;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                fmt::format("--memory-per-device: '{}' is more than a 64-bit byte count holds (at "
                            "most 16 EiB)",
                            huge));
    }
  }
}

}  // namespace
}  // namespace kiln
