#include "kiln/model/generate.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/base/error.h"

namespace kiln {

Generator::Generator(const Qwen2Config& config, UnitAccess& params, const Backend& backend)
    : config_(config),
      layout_(config),
      params_(params),
      be_(backend),
      rope_(config_, backend),
      x_(backend, 0),
      xn_(backend, 0),
      rstd_(backend, 0),
      q_(backend, 0),
      y_(backend, 0),
      tmp_(backend, 0),
      gate_(backend, 0),
      up_(backend, 0),
      h_(backend, 0),
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
  const bool tied = config_.tie_word_embeddings;
  const float* hw = params_.acquire(layout_.head_unit());
  be_.rmsnorm_forward(
      xf_.data(), rstd_last_.data(), x_.data() + static_cast<size_t>(n_last - 1) * C,
      hw + layout_.final_norm_offset(), 1, C, static_cast<float>(config_.rms_norm_eps));
  const float* wh = tied ? params_.acquire(layout_.embed_unit()) : hw + layout_.lm_head_offset();
  be_.matmul_forward(logits_.data(), xf_.data(), wh, nullptr, 1, C, static_cast<int>(V));
  if (tied) params_.release(layout_.embed_unit());
  params_.release(layout_.head_unit());
  be_.copy_to_host(logits_host_.data(), logits_.data(), logits_.bytes());
  be_.synchronize();
  return logits_host_.span();
}

void Generator::run_chunk(const int32_t* ids, int n) {
  const size_t C = config_.hidden_size, Q = config_.q_dim(), I = config_.intermediate_size;
  if (x_.size() < n * C) {
    x_.resize(n * C);
    xn_.resize(n * C);
    tmp_.resize(n * C);
    rstd_.resize(n);
    q_.resize(n * Q);
    y_.resize(n * Q);
    gate_.resize(n * I);
    up_.resize(n * I);
    h_.resize(n * I);
  }
  // ids and positions (2, n) through the host copy: the previous chunk's upload has run (every
  // chunk's layers read them before the next chunk starts, and prefill ends with a synchronize).
  be_.synchronize();
  std::copy(ids, ids + n, ids_pos_host_.begin());
  for (int i = 0; i < n; ++i) ids_pos_host_[kChunk + i] = length_ + i;
  be_.copy_to_device(ids_pos_.data(), ids_pos_host_.data(), ids_pos_.bytes());

  const float* we = params_.acquire(layout_.embed_unit());
  be_.embedding_forward(x_.data(), ids_pos_.data(), we, n, static_cast<int>(C));
  params_.release(layout_.embed_unit());
  for (int l = 0; l < static_cast<int>(config_.num_hidden_layers); ++l) {
    const float* w = params_.acquire(layout_.layer_unit(l));
    layer(l, w, n);
    params_.release(layout_.layer_unit(l));
  }
  length_ += n;
}

void Generator::layer(int l, const float* w, int n) {
  const LayerOffsets& o = layout_.layer_offsets();
  const int C = static_cast<int>(config_.hidden_size),
            I = static_cast<int>(config_.intermediate_size);
  const int H = static_cast<int>(config_.num_attention_heads);
  const int KVH = static_cast<int>(config_.num_key_value_heads),
            D = static_cast<int>(config_.head_dim());
  const int Q = H * D, KV = KVH * D;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const size_t nC = static_cast<size_t>(n) * C;
  // This chunk's rows of the cache: (n, KV) at row length_.
  float* k = k_cache_[l].data() + static_cast<size_t>(length_) * KV;
  float* v = v_cache_[l].data() + static_cast<size_t>(length_) * KV;

  be_.rmsnorm_forward(xn_.data(), rstd_.data(), x_.data(), w + o.ln1, n, C, eps);
  be_.matmul_forward(q_.data(), xn_.data(), w + o.wq, w + o.bq, n, C, Q);
  be_.matmul_forward(k, xn_.data(), w + o.wk, w + o.bk, n, C, KV);
  be_.matmul_forward(v, xn_.data(), w + o.wv, w + o.bv, n, C, KV);
  be_.rope_forward(q_.data(), ids_pos_.data() + kChunk, rope_.cos(), rope_.sin(), n, H, D);
  be_.rope_forward(k, ids_pos_.data() + kChunk, rope_.cos(), rope_.sin(), n, KVH, D);
  be_.attention_decode(y_.data(), q_.data(), k_cache_[l].data(), v_cache_[l].data(), n, length_, H,
                       KVH, D);
  // x = y Wo^T + x, in that order, as the training forward adds
  be_.matmul_forward(tmp_.data(), y_.data(), w + o.wo, nullptr, n, Q, C);
  be_.add(x_.data(), tmp_.data(), x_.data(), nC);
  be_.rmsnorm_forward(xn_.data(), rstd_.data(), x_.data(), w + o.ln2, n, C, eps);
  be_.matmul_forward(gate_.data(), xn_.data(), w + o.wg, nullptr, n, C, I);
  be_.matmul_forward(up_.data(), xn_.data(), w + o.wu, nullptr, n, C, I);
  be_.swiglu_forward(h_.data(), gate_.data(), up_.data(), static_cast<size_t>(n) * I);
  be_.matmul_forward(tmp_.data(), h_.data(), w + o.wd, nullptr, n, I, C);
  be_.add(x_.data(), tmp_.data(), x_.data(), nC);
}

}  // namespace kiln
