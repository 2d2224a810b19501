// The decoder of every family (Qwen2, Qwen3, Llama 3: config.h's options), with explicit forward
// and backward passes per layer (no autograd graph).
//
// Shapes (N = B*T tokens, C hidden, Q = heads*head_dim, KV = kv_heads*head_dim, I intermediate;
// head_dim from the config, so Q may differ from C):
//   embed:  ids (N) -> x (N, C)
//   layer:  xn1 = rmsnorm(x); q,k,v = xn1 W^T (+ b); [q,k = per-head rmsnorm(q,k)];
//           rope(q,k) (scaled frequencies: rope_table.h); y = attn(q,k,v) (N, Q);
//           x += y Wo^T; xn2 = rmsnorm(x); h = silu(xn2 Wg^T) * (xn2 Wu^T) (N, I); x += h Wd^T,
//           each "x W^T" a projection group of the layout's product kind (product_kind.h: the
//           plain product, or LoRA's s B A dropout(x) added to it, dropout only in
//           forward_backward, seeded by set_dropout_seed)
//   head:   xf = rmsnorm(x); loss = CE(xf W_head^T, targets), never holding the (N, V) logits:
//           forward() calls the backend's fused cross_entropy (chunked); forward_backward()
//           calls head_loss (vocab_parallel_loss.h) on the table UnitAccess lends: that
//           same op for ParamStore, and for Fsdp unless it splits the vocabulary, when each rank
//           computes the logits of its own rows of the head (vocabulary-parallel)
// Whether a unit gets a gradient is its own ParamUnit::trainable: the backward computes every
// input gradient, and the gradient of a trainable unit's weights only (a LoRA layout's base is
// frozen: no dW of a product, norm, embedding or head; only the adapter units get one).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "kiln/data/batch.h"
#include "kiln/kernels/device/device_buffer.h"
#include "kiln/kernels/ops.h"
#include "kiln/model/config.h"
#include "kiln/model/decoder_layer.h"
#include "kiln/model/layer_units.h"
#include "kiln/model/layout.h"
#include "kiln/model/preference_head.h"
#include "kiln/model/product_kind.h"
#include "kiln/model/rope_table.h"
#include "kiln/model/unit_access.h"

namespace kiln {

class Decoder {
 public:
  // lora: adapter units in layout() (lora_layout.h), the base's frozen, and the LoRA product
  // kind, with lora.dropout on the adapters' inputs in forward_backward (never in forward()).
  Decoder(const ModelConfig& config, const Backend& backend,
          const std::optional<LoraConfig>& lora = std::nullopt);

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }

  // Forward and backward over one micro-batch, enqueued on the backend's compute stream: adds
  // the sum of per-token losses over the batch's targets into *loss_sum (one device double) and
  // d(scale * loss_sum)/d(param) into the units' gradients. With `recompute`, each layer keeps
  // only its input and recomputes its activations in backward. The batch is uploaded through
  // pinned staging; the host may refill `batch` as soon as this returns.
  void forward_backward(const Batch& batch, UnitAccess& params, float scale, bool recompute,
                        double* loss_sum);
  // The same with a preference loss over the batch's pairs instead of the token cross-entropy
  // (preference_head.h: rows 2p and 2p + 1 a pair's chosen and rejected sequences): head.sums
  // += this rank's pairs' loss and metric sums, the gradients d(head.terms.scale * loss sum).
  void forward_backward(const Batch& batch, UnitAccess& params, const PreferenceHead& head,
                        bool recompute);
  // Forward only: adds the batch's loss sum into *loss_sum (device).
  void forward(const Batch& batch, UnitAccess& params, double* loss_sum);
  // Forward only: seq (B, 2) (device) += each row's (log-probability of its targets, their
  // count): a preference pair's sequence log-probabilities. base_only: a LoRA layout's adapters
  // left out (the base model: a LoRA run's reference).
  void sequence_logps(const Batch& batch, UnitAccess& params, double* seq, bool base_only);

  // The same, returning the loss sum to the host (waits for the device): for tests and one-off
  // evaluations, not for a training step.
  double forward_backward(const Batch& batch, UnitAccess& params, float scale, bool recompute);
  double forward(const Batch& batch, UnitAccess& params);

  // The seed of the products' dropout masks of the next forward_backward (LoRA's lora.dropout:
  // lora_ops.h; a kind without dropout ignores it). Each forward_backward then advances it (a
  // hash of it), so a caller that never sets it still draws fresh masks for every micro-batch
  // (from 0 when the Decoder is made); the trainer sets it before each micro-batch to
  // lora_micro_batch_seed(train.seed, step, micro-step, rank), so that a step's masks repeat on
  // resume. A recomputed forward draws its call's masks again.
  void set_dropout_seed(uint64_t seed) { dropout_seed_ = seed; }

  // Bytes of activation memory held for the last batch shape.
  size_t activation_bytes() const { return arena_.bytes(); }

  // The final norm's output xf (B*T, C) of the last forward, device memory: the LM head's
  // input, from which tests compute full-sequence logits (incremental decoding is checked
  // against them).
  const float* final_hidden() const { return xf_; }

 private:
  // One layer's saved activations: pieces of the arena; xn1, xn2 and h in the backend's
  // activation_dtype() (bf16 under train.dtype bf16).
  using LayerActs = DecoderActs;

  void prepare(const Batch& batch, bool recompute, bool training);
  void plan_buffers(size_t N, bool recompute, bool training);
  void upload(const Batch& batch);
  double read_loss();
  // Layer l's product for this pass, on its units' parameters p (LayerUnits::acquire).
  const LayerProduct& bind_product(int l, const LayerParams& p, int N, bool base_only = false);
  // w, dw: the layer unit's parameters and gradient (null: frozen, or no backward).
  void layer_forward(ConstDevPtr w, const float* x_in, float* x_out, const LayerActs& a,
                     const Batch& batch, const LayerProduct& product);
  void layer_backward(ConstDevPtr w, float* dw, const float* x_in, const LayerActs& a,
                      const Batch& batch, const LayerProduct& product);
  bool trains(int unit) const { return layout_.units()[unit].trainable; }
  // What a training pass's head optimises: the token cross-entropy (scale, loss_sum), or, with
  // `preference`, a preference loss.
  struct HeadObjective {
    float scale = 0;
    double* loss_sum = nullptr;
    const PreferenceHead* preference = nullptr;
  };
  void train_pass(const Batch& batch, UnitAccess& params, const HeadObjective& objective,
                  bool recompute);
  // The final norm and the LM head's loss and dx; each one's gradient when its unit trains.
  void head_backward(const Batch& batch, UnitAccess& params, const HeadObjective& objective);
  // The LM head's loss of the objective on the table lent (dx into dxf_).
  void head_objective(const Batch& batch, const ShardedTable& table,
                      const HeadObjective& objective);
  // `table` with a lender for the preference head's buffers: its own (a split table's, FSDP's
  // pool), else the decoder's pool.
  ShardedTable with_head_scratch(ShardedTable table);
  std::pair<float*, float*> qk_norm_backward(ConstDevPtr w, float* dw, const LayerActs& a, int N);
  // Embedding and every layer's forward: fills res_ (and the saved activations).
  // training: the embedding rows come from table_lookup (sharded_table.h) on the table
  // UnitAccess lends (every rank's N alike).
  void forward_trunk(const Batch& batch, UnitAccess& params, bool training, bool base_only = false);
  // The final norm's forward into xf_ on the head unit (acquired, released by the caller).
  void final_norm(const Batch& batch, ConstDevPtr head_unit);

  ModelConfig config_;
  ParamLayout layout_;
  const Backend& be_;

  // Device buffers, carved from one arena sized per batch shape; no allocation once warm.
  DeviceArena arena_;
  DType act_dtype_;  // storage of the GEMM-only activations
  int B_ = 0, T_ = 0;
  bool recompute_ = false, training_ = false;  // what the arena is planned for
  bool pass_trains_ = false;                   // whether the current pass trains (dropout)
  float* res_ = nullptr;                       // (L+1, N, C) residual stream at each layer boundary
  std::vector<LayerActs>
      layer_acts_;  // saved activations per layer (all alias one when recomputing)
  float *xf_ = nullptr, *rstdf_ = nullptr, *dxf_ = nullptr;  // final norm
  float *dres_ = nullptr, *dxn_ = nullptr, *dq_ = nullptr, *dk_ = nullptr, *dv_ = nullptr,
        *dy_ = nullptr, *dgate_up_ = nullptr, *dh_ = nullptr,
        *dk_pre_ = nullptr;  // backward scratch (dk_pre_: qk_norm only)
  float* qkv_ = nullptr;     // (N, Q + 2 KV): every layer's DecoderActs::qkv
  // The batch on the device: ids, targets, positions, doc_start, each (N), then its rows with a
  // target compacted (indices, targets: TargetRows, target_rows_ of them), its sequences' bounds
  // (B, 2), and its staging.
  size_t staged_ints() const {
    return 6 * static_cast<size_t>(B_) * T_ + 2 * static_cast<size_t>(B_);
  }
  int32_t *ids_ = nullptr, *targets_ = nullptr, *pos_ = nullptr, *doc_ = nullptr;
  int target_rows_ = 0;
  std::vector<int> seq_targets_;  // (B) host: each sequence's rows with a target
  TargetRows target_rows() const {
    const size_t N = static_cast<size_t>(B_) * T_;
    return {ids_ + 4 * N, ids_ + 5 * N, target_rows_, ids_ + 6 * N, seq_targets_};
  }
  PinnedBuffer<int32_t> staging_;        // (staged_ints())
  std::shared_ptr<Event> staging_free_;  // the last upload out of staging_ has run
  DeviceBuffer<double> loss_;            // the convenience forms' loss sum
  // The preference head's buffers for a whole table (a split one's come from FSDP's pool).
  PooledScratch head_scratch_{be_};
  RopeTables rope_;
  std::unique_ptr<ProductKind> products_;  // the layout's kind; its buffers are in arena_
  LayerUnits units_;                       // each layer's units, the product's after its own
  uint64_t dropout_seed_ = 0;              // set_dropout_seed; advanced by each forward_backward
};

}  // namespace kiln
