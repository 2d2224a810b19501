#include "kiln/model/generate.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/base/error.h"
#include "kiln/model/decoder_layer.h"

namespace kiln {

Generator::Generator(const ModelConfig& config, UnitAccess& params, const Backend& backend,
                     const std::optional<LoraConfig>& lora)
    : config_(config),
      layout_(config, lora),
      params_(params),
      be_(backend),
      products_(make_product_kind(config_, layout_, backend)),
      units_(layout_, *products_, static_cast<int>(config_.num_hidden_layers)),
      rope_(config_, backend),
      x_(backend, 0),
      xn_(backend, 0),
      rstd_(backend, 0),
      q_(backend, 0),
      y_(backend, 0),
      tmp_(backend, 0),
      qkv_(backend, 0),
      gate_up_(backend, 0),
      h_(backend, 0),
      qk_pre_(backend, 0),
      rstd_qk_(backend, 0),
      product_buffers_(backend),
      ids_pos_(backend, 2 * kChunk),
      ids_pos_host_(2 * kChunk),
      xf_(backend, config_.hidden_size),
      rstd_last_(backend, 1),
      logits_(backend, config_.vocab_size),
      logits_host_(config_.vocab_size) {
  config_.validate("model config");
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    k_cache_.emplace_back(backend, 0);
    v_cache_.emplace_back(backend, 0);
  }
}

size_t Generator::cache_bytes() const {
  size_t n = 0;
  for (size_t l = 0; l < k_cache_.size(); ++l) n += k_cache_[l].size() + v_cache_[l].size();
  return n * sizeof(float);
}

void Generator::truncate(int n) {
  KILN_CHECK(n >= 0 && n <= length_, "truncate({}) with {} cached tokens", n, length_);
  length_ = n;  // rows past n are overwritten by the next tokens
}

void Generator::reserve(int tokens) {
  if (tokens <= capacity_) return;
  // Doubling keeps appends amortised O(1); the cap keeps a short chat from reserving the whole
  // context window (32768 positions are ~800 MB of cache for Qwen2.5-0.5B).
  const int max_pos = static_cast<int>(config_.max_position_embeddings);
  const int cap = std::min(max_pos, std::max({tokens, 2 * capacity_, 64}));
  const size_t row = static_cast<size_t>(config_.kv_dim());
  for (size_t l = 0; l < k_cache_.size(); ++l) {
    for (auto* cache : {&k_cache_[l], &v_cache_[l]}) {
      DeviceBuffer<float> grown(be_, static_cast<size_t>(cap) * row);
      if (length_ > 0)
        be_.copy_on_device(grown.data(), cache->data(), sizeof(float) * length_ * row);
      *cache = std::move(grown);
    }
  }
  // The tables training uses (RopeTables), so the rotations are bit-identical to training's.
  rope_.reserve(cap, cap);
  capacity_ = cap;
}

std::span<const float> Generator::step(int32_t token) { return prefill({&token, 1}); }

std::span<const float> Generator::prefill(std::span<const int32_t> ids) {
  const int64_t V = config_.vocab_size;
  if (ids.empty()) fail("generate: no tokens to run");
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= V) {
      fail("generate: token id {} is outside the model's vocabulary (size {})", ids[i], V);
    }
  }
  const int64_t total = length_ + static_cast<int64_t>(ids.size());
  if (total > config_.max_position_embeddings) {
    fail("generate: {} tokens exceed the model's max_position_embeddings ({})", total,
         config_.max_position_embeddings);
  }
  reserve(static_cast<int>(total));
  for (size_t i = 0; i < ids.size(); i += kChunk) {
    run_chunk(ids.data() + i, static_cast<int>(std::min<size_t>(kChunk, ids.size() - i)));
  }

  // Head, last position only: xf (1, C) = rmsnorm(x[n - 1]); logits (1, V) = xf W_head^T.
  const int n_last = static_cast<int>((ids.size() - 1) % kChunk) + 1;  // tokens in last chunk
  const int C = static_cast<int>(config_.hidden_size);
  const ConstDevPtr hw = params_.acquire(layout_.head_unit());
  be_.rmsnorm_forward(
      xf_.data(), rstd_last_.data(), x_.data() + static_cast<size_t>(n_last - 1) * C,
      hw.at(layout_.final_norm_offset()), 1, C, static_cast<float>(config_.rms_norm_eps));
  const ConstDevPtr wh = params_.acquire(layout_.lm_head_unit());
  be_.matmul_forward(logits_.data(), xf_.data(), wh, nullptr, 1, C, static_cast<int>(V));
  params_.release(layout_.lm_head_unit());
  params_.release(layout_.head_unit());
  be_.copy_to_host(logits_host_.data(), logits_.data(), logits_.bytes());
  be_.synchronize();
  return logits_host_.span();
}

void Generator::run_chunk(const int32_t* ids, int n) {
  const size_t C = config_.hidden_size, Q = config_.q_dim(), I = config_.intermediate_size;
  const size_t KV = config_.kv_dim();
  if (x_.size() < n * C) {
    x_.resize(n * C);
    xn_.resize(n * C);
    tmp_.resize(n * C);
    rstd_.resize(n);
    q_.resize(n * Q);
    y_.resize(n * Q);
    qkv_.resize(n * (Q + 2 * KV));
    gate_up_.resize(n * 2 * I);
    h_.resize(n * I);
    if (config_.qk_norm) {
      qk_pre_.resize(n * (Q + KV));
      rstd_qk_.resize(
          n * static_cast<size_t>(config_.num_attention_heads + config_.num_key_value_heads));
    }
    products_->plan(product_buffers_, n, /*per_layer=*/false, /*training=*/false);
    product_buffers_.allocate();
  }
  // ids and positions (2, n) through the host copy: the previous chunk's upload has run (every
  // chunk's layers read them before the next chunk starts, and prefill ends with a synchronize).
  be_.synchronize();
  std::copy(ids, ids + n, ids_pos_host_.begin());
  for (int i = 0; i < n; ++i) ids_pos_host_[kChunk + i] = length_ + i;
  be_.copy_to_device(ids_pos_.data(), ids_pos_host_.data(), ids_pos_.bytes());

  const ConstDevPtr we = params_.acquire(layout_.embed_unit());
  be_.embedding_forward(x_.data(), ids_pos_.data(), we, n, static_cast<int>(C));
  params_.release(layout_.embed_unit());
  for (int l = 0; l < static_cast<int>(config_.num_hidden_layers); ++l) {
    const LayerParams p = units_.acquire(l, params_, /*grads=*/false);
    layer(l, p.w[0], products_->bind(l, p, {n, /*training=*/false, 0}), n);
    units_.release(l, params_, /*grads=*/false);
  }
  length_ += n;
}

namespace {
// Decoding's attention: the chunk's queries over every cached key (the chunk's own rows
// already written by the layer's k and v products).
class CacheAttention final : public LayerAttention {
 public:
  CacheAttention(const Backend& be, const float* k_cache, const float* v_cache, int n, int past,
                 const ModelConfig& c)
      : be_(be), k_(k_cache), v_(v_cache), n_(n), past_(past), c_(c) {}
  void attend(const DecoderActs& a) const override {
    be_.attention_decode(a.y, a.q, k_, v_, n_, past_, static_cast<int>(c_.num_attention_heads),
                         static_cast<int>(c_.num_key_value_heads), static_cast<int>(c_.head_dim()));
  }

 private:
  const Backend& be_;
  const float *k_, *v_;
  int n_, past_;
  const ModelConfig& c_;
};
}  // namespace

// x_ (n, C) through layer l in place, by the training forward's decoder_layer_forward.
void Generator::layer(int l, ConstDevPtr w, const LayerProduct& product, int n) {
  const size_t KV = static_cast<size_t>(config_.kv_dim());
  DecoderActs a{};
  a.xn1 = a.xn2 = xn_.data();  // xn1 is done with once q, k and v are computed
  a.h = h_.data();
  a.rstd1 = a.rstd2 = rstd_.data();
  a.qkv = qkv_.data();
  a.q = q_.data();
  a.k = k_cache_[l].data() + static_cast<size_t>(length_) * KV;  // this chunk's cache rows
  a.v = v_cache_[l].data() + static_cast<size_t>(length_) * KV;
  a.y = y_.data();
  a.lse = nullptr;
  a.xmid = tmp_.data();
  a.gate_up = gate_up_.data();
  if (config_.qk_norm) {
    a.q_pre = qk_pre_.data();
    a.k_pre = a.q_pre + static_cast<size_t>(n) * config_.q_dim();
    a.rstd_q = rstd_qk_.data();
    a.rstd_k = a.rstd_q + static_cast<size_t>(n) * config_.num_attention_heads;
  }
  const CacheAttention attention(be_, k_cache_[l].data(), v_cache_[l].data(), n, length_, config_);
  const LayerGeometry geometry{n, ids_pos_.data() + kChunk, DType::F32};
  decoder_layer_forward(be_, config_, layout_.layer_offsets(), w, x_.data(), x_.data(), a, geometry,
                        rope_, attention, product);
}

}  // namespace kiln
