#include "kiln/model/decoder.h"

#include <algorithm>
#include <cmath>

#include "kiln/base/error.h"
#include "kiln/model/vocab_parallel_loss.h"

namespace kiln {

Decoder::Decoder(const ModelConfig& config, const Backend& backend,
                 const std::optional<LoraConfig>& lora)
    : config_(config),
      layout_(config, lora),
      be_(backend),
      arena_(backend),
      act_dtype_(backend.activation_dtype()),
      loss_(backend, 1),
      rope_(config_, backend),
      products_(make_product_kind(config_, layout_, backend)),
      units_(layout_, *products_, static_cast<int>(config_.num_hidden_layers)) {
  config_.validate("model config");
}

namespace {

// Checks the batch on the host (ids inside the vocabulary, positions, document starts).
void validate_batch(const Batch& batch, int64_t V) {
  const int B = batch.B, T = batch.T;
  const size_t N = static_cast<size_t>(B) * T;
  if (B <= 0 || T <= 0 || batch.input_ids.size() != N || batch.targets.size() != N ||
      batch.positions.size() != N || batch.doc_start.size() != N) {
    fail("batch arrays do not match B={} T={}", B, T);
  }
  for (size_t i = 0; i < N; ++i) {
    if (batch.input_ids[i] < 0 || batch.input_ids[i] >= V) {
      fail("token id {} at position {} is outside the vocabulary (size {})", batch.input_ids[i], i,
           V);
    }
    const int32_t t = batch.targets[i];
    if (t != kIgnoreIndex && (t < 0 || t >= V)) {
      fail("target id {} at position {} is outside the vocabulary (size {})", t, i, V);
    }
    if (batch.positions[i] < 0) fail("negative position at {}", i);
    const int32_t ds = batch.doc_start[i];
    if (ds < 0 || ds > static_cast<int32_t>(i % T)) fail("doc_start {} at {} out of range", ds, i);
  }
}

// The rows with a target, for cross_entropy (it computes only those).
int targeted(const Batch& batch) { return static_cast<int>(batch.num_targets()); }

}  // namespace

void Decoder::plan_buffers(size_t N, bool recompute, bool training) {
  const int L = static_cast<int>(config_.num_hidden_layers);
  const size_t C = config_.hidden_size, I = config_.intermediate_size;
  const size_t Q = config_.q_dim(), KV = config_.kv_dim(), H = config_.num_attention_heads;
  const size_t KVH = config_.num_key_value_heads;
  layer_acts_.assign(L, LayerActs{});
  arena_.add(&res_, (L + 1) * N * C);
  for (int l = 0; l < (recompute ? 1 : L); ++l) {
    LayerActs& a = layer_acts_[l];
    arena_.add(&a.xn1, N * C, act_dtype_);
    arena_.add(&a.rstd1, N);
    arena_.add(&a.q, N * Q);
    arena_.add(&a.k, N * KV);
    arena_.add(&a.v, N * KV);
    arena_.add(&a.y, N * Q);
    arena_.add(&a.lse, N * H);
    arena_.add(&a.xmid, N * C);
    arena_.add(&a.xn2, N * C, act_dtype_);
    arena_.add(&a.rstd2, N);
    arena_.add(&a.gate_up, N * 2 * I);
    arena_.add(&a.h, N * I, act_dtype_);
    const size_t qk = config_.qk_norm ? 1 : 0;  // q/k norms: their inputs and reciprocal RMS
    arena_.add(&a.q_pre, qk * N * Q);
    arena_.add(&a.k_pre, qk * N * KV);
    arena_.add(&a.rstd_q, qk * N * H);
    arena_.add(&a.rstd_k, qk * N * KVH);
  }
  // The q/k/v product's output while a layer's forward splits it, and d(qkv) while its backward
  // assembles it: never both at once, so one buffer serves every layer.
  arena_.add(&qkv_, N * (Q + 2 * KV));
  arena_.add(&xf_, N * C);
  arena_.add(&rstdf_, N);
  const size_t g = training ? 1 : 0;
  arena_.add(&dxf_, g * N * C);
  arena_.add(&dres_, g * N * C);
  arena_.add(&dxn_, g * N * C);
  arena_.add(&dq_, g * N * Q);
  arena_.add(&dk_, g * N * KV);
  arena_.add(&dv_, g * N * KV);
  arena_.add(&dy_, g * N * Q);
  arena_.add(&dgate_up_, g * N * 2 * I);
  arena_.add(&dh_, g * N * I);
  arena_.add(&dk_pre_, (config_.qk_norm ? g : 0) * N * KV);  // d(k_pre); d(q_pre) reuses dy_
  // ids, targets, positions, doc_start, the rows with a target compacted (their indices, their
  // targets) and the sequences' bounds (TargetRows): one upload.
  arena_.add(&ids_, staged_ints());
  products_->plan(arena_, N, /*per_layer=*/!recompute, training);
  arena_.allocate();
  for (LayerActs& a : layer_acts_) a.qkv = qkv_;
  if (recompute) std::fill(layer_acts_.begin() + 1, layer_acts_.end(), layer_acts_[0]);
  targets_ = ids_ + N;
  pos_ = ids_ + 2 * N;
  doc_ = ids_ + 3 * N;
  staging_ = PinnedBuffer<int32_t>(be_, staged_ints());
  staging_free_.reset();
}

void Decoder::upload(const Batch& batch) {
  const size_t N = batch.input_ids.size();
  if (staging_free_) staging_free_->synchronize();  // the previous upload has left staging
  int32_t* st = staging_.data();
  std::copy(batch.input_ids.begin(), batch.input_ids.end(), st);
  std::copy(batch.targets.begin(), batch.targets.end(), st + N);
  std::copy(batch.positions.begin(), batch.positions.end(), st + 2 * N);
  std::copy(batch.doc_start.begin(), batch.doc_start.end(), st + 3 * N);
  // The rows with a target, in order, then padding (the last row, no target).
  seq_targets_.resize(static_cast<size_t>(batch.B));
  target_rows_ = compact_target_rows(batch.targets, batch.T, st + 4 * N, st + 5 * N, seq_targets_);
  row_sequence_bounds(batch.B, batch.T, st + 6 * N);
  be_.copy_to_device(ids_, st, staged_ints() * sizeof(int32_t));
  staging_free_ = be_.compute_stream().record();
}

void Decoder::prepare(const Batch& batch, bool recompute, bool training) {
  validate_batch(batch, config_.vocab_size);
  // A forward-only pass runs in a training arena of its shape (which holds all it needs): a
  // preference step's reference forward between its policy's passes replans nothing.
  const bool fits = batch.B == B_ && batch.T == T_ &&
                    (training ? training_ && recompute == recompute_ : training_ || recompute_);
  if (!fits) {
    B_ = batch.B;
    T_ = batch.T;
    recompute_ = recompute;
    training_ = training;
    plan_buffers(static_cast<size_t>(B_) * T_, recompute, training);
  }
  pass_trains_ = training;
  const int max_pos = *std::max_element(batch.positions.begin(), batch.positions.end());
  rope_.reserve(max_pos + 1);
  upload(batch);
}

double Decoder::read_loss() {
  double host = 0;
  be_.copy_to_host(&host, loss_.data(), sizeof host);
  be_.synchronize();
  return host;
}

namespace {
// Training's attention: causal within documents, keeping the log-sum-exp for backward.
class TrainingAttention final : public LayerAttention {
 public:
  TrainingAttention(const Backend& be, const int32_t* doc_start, AttnShape s)
      : be_(be), doc_start_(doc_start), s_(s) {}
  void attend(const DecoderActs& a) const override {
    be_.attention_forward(a.y, a.lse, a.q, a.k, a.v, doc_start_, s_);
  }

 private:
  const Backend& be_;
  const int32_t* doc_start_;
  AttnShape s_;
};
}  // namespace

const LayerProduct& Decoder::bind_product(int l, const LayerParams& p, int N, bool base_only) {
  return products_->bind(l, p, {N, pass_trains_, dropout_seed_, base_only});
}

// x_out null: recomputation (the activations only).
void Decoder::layer_forward(ConstDevPtr w, const float* x_in, float* x_out, const LayerActs& a,
                            const Batch& batch, const LayerProduct& product) {
  const AttnShape s{batch.B, batch.T, static_cast<int>(config_.num_attention_heads),
                    static_cast<int>(config_.num_key_value_heads),
                    static_cast<int>(config_.head_dim())};
  const TrainingAttention attention(be_, doc_, s);
  decoder_layer_forward(be_, config_, layout_.layer_offsets(), w, x_in, x_out, a,
                        {batch.B * batch.T, pos_, act_dtype_}, rope_, attention, product);
}

// Qwen3's q/k norms, q = rmsnorm(q_pre) over (N*H, D) rows and k over (N*KVH, D), from d(q) in
// dq_ and d(k) in dk_: d(q_pre) (N, Q) into dy_ (free once attention_backward has run), d(k_pre)
// (N, KV) into dk_pre_; the shared weights' gradients (D) +=. Returns {d(q_pre), d(k_pre)}.
std::pair<float*, float*> Decoder::qk_norm_backward(ConstDevPtr w, float* dw, const LayerActs& a,
                                                    int N) {
  const LayerOffsets& o = layout_.layer_offsets();
  const int H = static_cast<int>(config_.num_attention_heads);
  const int KVH = static_cast<int>(config_.num_key_value_heads),
            D = static_cast<int>(config_.head_dim());
  be_.rmsnorm_backward(dk_pre_, layer_grad(dw, o.k_norm), dk_, a.k_pre, w.at(o.k_norm), a.rstd_k,
                       N * KVH, D, false);
  be_.rmsnorm_backward(dy_, layer_grad(dw, o.q_norm), dq_, a.q_pre, w.at(o.q_norm), a.rstd_q, N * H,
                       D, false);
  return {dy_, dk_pre_};
}

// On entry dres_ holds d(x_out); on exit d(x_in). The layer's steps in reverse; each projection
// group's backward writes its input's gradient (and its parameters' gradients) through the
// product; the norms' gradients go to dw.
void Decoder::layer_backward(ConstDevPtr w, float* dw, const float* x_in, const LayerActs& a,
                             const Batch& batch, const LayerProduct& product) {
  const LayerOffsets& o = layout_.layer_offsets();
  const int N = batch.B * batch.T;
  const int C = static_cast<int>(config_.hidden_size),
            I = static_cast<int>(config_.intermediate_size);
  const int H = static_cast<int>(config_.num_attention_heads);
  const int KVH = static_cast<int>(config_.num_key_value_heads),
            D = static_cast<int>(config_.head_dim());
  const int Q = H * D, KV = KVH * D;
  float* dres = dres_;
  const ConstDevPtr xn1{a.xn1, act_dtype_}, xn2{a.xn2, act_dtype_}, h{a.h, act_dtype_};

  // MLP: x_out = xmid + kDown(h); gate_up = kGateUp(xn2)
  product.backward(ProjectionGroup::kDown, h, dres, dh_);  // dh (N, I)
  be_.swiglu_backward(dgate_up_, dh_, a.gate_up, N, I);
  product.backward(ProjectionGroup::kGateUp, xn2, dgate_up_, dxn_);  // d(xn2) (N, C)
  be_.rmsnorm_backward(dres, layer_grad(dw, o.ln2), dxn_, a.xmid, w.at(o.ln2), a.rstd2, N, C, true);
  // Attention: xmid = x_in + kO(y)
  product.backward(ProjectionGroup::kO, a.y, dres, dy_);  // dy (N, Q)
  const AttnShape s{batch.B, batch.T, H, KVH, D};
  be_.attention_backward(dq_, dk_, dv_, dy_, a.q, a.k, a.v, a.y, a.lse, doc_, s);
  be_.rope_backward(dq_, pos_, rope_.cos(), rope_.sin(), N, H, D);
  be_.rope_backward(dk_, pos_, rope_.cos(), rope_.sin(), N, KVH, D);
  // d(q) (N, Q), d(k) (N, KV) before RoPE; with q/k norms, d(q_pre), d(k_pre)
  const auto [dq, dk] = config_.qk_norm ? qk_norm_backward(w, dw, a, N) : std::pair{dq_, dk_};
  // a.qkv: d(qkv) (N, Q + 2 KV), assembled for the fused q/k/v product
  copy_qkv_columns(be_, a.qkv, dq, dk, dv_, N, Q, KV, /*to_qkv=*/true);
  product.backward(ProjectionGroup::kQkv, xn1, a.qkv, dxn_);  // d(xn1) (N, C)
  be_.rmsnorm_backward(dres, layer_grad(dw, o.ln1), dxn_, x_in, w.at(o.ln1), a.rstd1, N, C, true);
}

void Decoder::forward_trunk(const Batch& batch, UnitAccess& params, bool training, bool base_only) {
  const int N = batch.B * batch.T;
  const int C = static_cast<int>(config_.hidden_size);
  const size_t NC = static_cast<size_t>(N) * C;
  const int L = static_cast<int>(config_.num_hidden_layers);
  if (training) {
    // Every rank's training batch is (micro_batch_size, seq_len): the same N, as a split
    // table's lookup asks.
    const int e = layout_.embed_unit();
    table_lookup(be_, params.acquire_table(e, N, TableUse::kLookup), ids_, N, C, res_);
    params.release_table(e, TableUse::kLookup);
  } else {
    // Evaluation batches differ between ranks (the last ones are short).
    const ConstDevPtr w = params.acquire(layout_.embed_unit());
    be_.embedding_forward(res_, ids_, w, N, C);
    params.release(layout_.embed_unit());
  }
  for (int l = 0; l < L; ++l) {
    const LayerParams p = units_.acquire(l, params, /*grads=*/false);
    layer_forward(p.w[0], res_ + l * NC, res_ + (l + 1) * NC, layer_acts_[l], batch,
                  bind_product(l, p, N, base_only));
    units_.release(l, params, /*grads=*/false);
  }
}

void Decoder::final_norm(const Batch& batch, ConstDevPtr head_unit) {
  const int N = batch.B * batch.T;
  const int C = static_cast<int>(config_.hidden_size);
  const int L = static_cast<int>(config_.num_hidden_layers);
  be_.rmsnorm_forward(xf_, rstdf_, res_ + L * static_cast<size_t>(N) * C,
                      head_unit.at(layout_.final_norm_offset()), N, C,
                      static_cast<float>(config_.rms_norm_eps));
}

void Decoder::forward(const Batch& batch, UnitAccess& params, double* loss_sum) {
  prepare(batch, /*recompute=*/true, /*training=*/false);
  forward_trunk(batch, params, /*training=*/false);
  const int N = batch.B * batch.T;
  const int C = static_cast<int>(config_.hidden_size), V = static_cast<int>(config_.vocab_size);
  final_norm(batch, params.acquire(layout_.head_unit()));
  const ConstDevPtr wh = params.acquire(layout_.lm_head_unit());
  be_.cross_entropy(loss_sum, nullptr, nullptr, xf_, wh, targets_, N, targeted(batch), C, V, 0.0f);
  params.release(layout_.lm_head_unit());
  params.release(layout_.head_unit());
}

void Decoder::sequence_logps(const Batch& batch, UnitAccess& params, double* seq, bool base_only) {
  prepare(batch, /*recompute=*/true, /*training=*/false);
  forward_trunk(batch, params, /*training=*/false, base_only);
  const int C = static_cast<int>(config_.hidden_size), V = static_cast<int>(config_.vocab_size);
  final_norm(batch, params.acquire(layout_.head_unit()));
  const ConstDevPtr wh = params.acquire(layout_.lm_head_unit());
  head_sequence_logps(be_, with_head_scratch(whole_table(wh, nullptr, V)), seq, xf_, targets_,
                      target_rows(), batch.B, batch.T, C, V);
  params.release(layout_.lm_head_unit());
  params.release(layout_.head_unit());
}

double Decoder::forward(const Batch& batch, UnitAccess& params) {
  loss_.zero();
  forward(batch, params, loss_.data());
  return read_loss();
}

double Decoder::forward_backward(const Batch& batch, UnitAccess& params, float scale,
                                 bool recompute) {
  loss_.zero();
  forward_backward(batch, params, scale, recompute, loss_.data());
  return read_loss();
}

ShardedTable Decoder::with_head_scratch(ShardedTable table) {
  if (table.scratch == nullptr) table.scratch = &head_scratch_;
  return table;
}

void Decoder::head_objective(const Batch& batch, const ShardedTable& table,
                             const HeadObjective& objective) {
  const int N = batch.B * batch.T;
  const int C = static_cast<int>(config_.hidden_size), V = static_cast<int>(config_.vocab_size);
  if (objective.preference != nullptr) {
    preference_head_loss(be_, with_head_scratch(table), *objective.preference, dxf_, xf_, targets_,
                         target_rows(), batch.B, batch.T, C, V);
  } else {
    head_loss(be_, table, objective.loss_sum, dxf_, xf_, targets_, N, targeted(batch), C, V,
              objective.scale);
  }
}

void Decoder::head_backward(const Batch& batch, UnitAccess& params,
                            const HeadObjective& objective) {
  const int N = batch.B * batch.T;
  const int C = static_cast<int>(config_.hidden_size), V = static_cast<int>(config_.vocab_size);
  const size_t NC = static_cast<size_t>(N) * C;
  const float* x = res_ + config_.num_hidden_layers * NC;
  const int hu = layout_.head_unit();
  const ConstDevPtr hw = params.acquire(hu);
  // Asked for before the head's loss: FSDP's pool then holds this buffer beside the loss's.
  float* norm_dw = trains(hu) ? params.grad(hu) + layout_.final_norm_offset() : nullptr;
  const ConstDevPtr norm_w = hw.at(layout_.final_norm_offset());
  be_.rmsnorm_forward(xf_, rstdf_, x, norm_w, N, C, static_cast<float>(config_.rms_norm_eps));
  if (!trains(layout_.lm_head_unit())) {
    // The LM head's loss and dx only (no dw), on the gathered table.
    const ConstDevPtr wh = params.acquire(layout_.lm_head_unit());
    head_objective(batch, whole_table(wh, nullptr, V), objective);
    params.release(layout_.lm_head_unit());
  } else {
    // The LM head's gradient (a tied head's part of the table's) is complete at release_table:
    // FSDP reduces it while the layers' backward runs, or has split the vocabulary among the
    // ranks; a tied table's lookup rows follow in the lookup's backward.
    const int lm = layout_.lm_head_unit();
    head_objective(batch, params.acquire_table(lm, N, TableUse::kHead), objective);
    params.release_table(lm, TableUse::kHead);
  }
  be_.rmsnorm_backward(dres_, norm_dw, dxf_, x, norm_w, rstdf_, N, C, false);
  params.release(hu);
  if (trains(hu)) params.grad_done(hu);
}

void Decoder::forward_backward(const Batch& batch, UnitAccess& params, float scale, bool recompute,
                               double* loss_sum) {
  train_pass(batch, params, {.scale = scale, .loss_sum = loss_sum}, recompute);
}

void Decoder::forward_backward(const Batch& batch, UnitAccess& params, const PreferenceHead& head,
                               bool recompute) {
  train_pass(batch, params, {.preference = &head}, recompute);
}

void Decoder::train_pass(const Batch& batch, UnitAccess& params, const HeadObjective& objective,
                         bool recompute) {
  prepare(batch, recompute, /*training=*/true);
  forward_trunk(batch, params, /*training=*/true);
  const int N = batch.B * batch.T;
  const int C = static_cast<int>(config_.hidden_size);
  const int L = static_cast<int>(config_.num_hidden_layers);
  const size_t NC = static_cast<size_t>(N) * C;
  head_backward(batch, params, objective);
  for (int l = L - 1; l >= 0; --l) {
    const LayerParams p = units_.acquire(l, params, /*grads=*/true);  // p.w[0]: the layer's unit
    const LayerProduct& product = bind_product(l, p, N);
    if (recompute) layer_forward(p.w[0], res_ + l * NC, nullptr, layer_acts_[l], batch, product);
    layer_backward(p.w[0], p.dw[0], res_ + l * NC, layer_acts_[l], batch, product);
    units_.release(l, params, /*grads=*/true);
  }
  if (trains(layout_.embed_unit())) {
    const int e = layout_.embed_unit();
    table_lookup_backward(be_, params.acquire_table(e, N, TableUse::kLookupBackward), ids_, dres_,
                          N, C);
    params.release_table(e, TableUse::kLookupBackward);
  }
  dropout_seed_ = next_dropout_seed(dropout_seed_);
}

}  // namespace kiln
