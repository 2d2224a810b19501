#include "kiln/model/qwen2.h"

#include <algorithm>
#include <cmath>

#include "kiln/base/error.h"

namespace kiln {

Qwen2Model::Qwen2Model(const Qwen2Config& config, const Backend& backend)
    : config_(config), layout_(config), be_(backend) {
  config_.validate("model config");
}

size_t Qwen2Model::activation_bytes() const {
  return sizeof(float) * (res_.size() + acts_.size() + xf_.size() + rstdf_.size() + dxf_.size() +
                          dres_.size() + dxn_.size() + dq_.size() + dk_.size() + dv_.size() +
                          dy_.size() + dgate_.size() + dup_.size() + dh_.size());
}

void Qwen2Model::prepare(const Batch& batch, bool recompute, bool training) {
  const int B = batch.B, T = batch.T;
  const size_t N = static_cast<size_t>(B) * T;
  if (B <= 0 || T <= 0 || batch.input_ids.size() != N || batch.targets.size() != N ||
      batch.positions.size() != N || batch.doc_start.size() != N) {
    fail("batch arrays do not match B={} T={}", B, T);
  }
  const int64_t V = config_.vocab_size;
  int max_pos = 0;
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
    max_pos = std::max(max_pos, batch.positions[i]);
  }

  const int L = static_cast<int>(config_.num_hidden_layers);
  const size_t C = config_.hidden_size, I = config_.intermediate_size;
  const size_t Q = config_.q_dim(), KV = config_.kv_dim(), H = config_.num_attention_heads;
  const size_t per_layer = 2 * N * C + 2 * N + 2 * N * Q + 2 * N * KV + N * H + N * C + 3 * N * I;
  const int stored = recompute ? 1 : L;
  if (B != B_ || T != T_ || recompute != recompute_ || training != training_) {
    B_ = B;
    T_ = T;
    recompute_ = recompute;
    training_ = training;
    res_.resize((L + 1) * N * C);
    acts_.resize(stored * per_layer);
    layer_acts_.assign(L, LayerActs{});
    for (int l = 0; l < L; ++l) {
      float* p = acts_.data() + (recompute ? 0 : l) * per_layer;
      LayerActs& a = layer_acts_[l];
      auto take = [&p](size_t n) {
        float* r = p;
        p += n;
        return r;
      };
      a.xn1 = take(N * C);
      a.rstd1 = take(N);
      a.q = take(N * Q);
      a.k = take(N * KV);
      a.v = take(N * KV);
      a.y = take(N * Q);
      a.lse = take(N * H);
      a.xmid = take(N * C);
      a.xn2 = take(N * C);
      a.rstd2 = take(N);
      a.gate = take(N * I);
      a.up = take(N * I);
      a.h = take(N * I);
    }
    xf_.resize(N * C);
    rstdf_.resize(N);
    const size_t g = training ? 1 : 0;
    dxf_.resize(g * N * C);
    dres_.resize(g * N * C);
    dxn_.resize(g * N * C);
    dq_.resize(g * N * Q);
    dk_.resize(g * N * KV);
    dv_.resize(g * N * KV);
    dy_.resize(g * N * Q);
    dgate_.resize(g * N * I);
    dup_.resize(g * N * I);
    dh_.resize(g * N * I);
  }
  if (max_pos + 1 > rope_positions_) {
    // cos/sin (P, D/2) of pos * theta^(-2d/D), computed in double as a reference would
    const int D = static_cast<int>(config_.head_dim()), half = D / 2;
    rope_positions_ = std::max(max_pos + 1, 2 * rope_positions_);
    rope_cos_.resize(static_cast<size_t>(rope_positions_) * half);
    rope_sin_.resize(static_cast<size_t>(rope_positions_) * half);
    for (int p = 0; p < rope_positions_; ++p) {
      for (int d = 0; d < half; ++d) {
        const double inv_freq = std::pow(config_.rope_theta, -2.0 * d / D);
        const double ang = p * inv_freq;
        rope_cos_[static_cast<size_t>(p) * half + d] = static_cast<float>(std::cos(ang));
        rope_sin_[static_cast<size_t>(p) * half + d] = static_cast<float>(std::sin(ang));
      }
    }
  }
}

void Qwen2Model::layer_forward(const float* w, const float* x_in, float* x_out, const LayerActs& a,
                               const Batch& batch, bool need_output) {
  const LayerOffsets& o = layout_.layer_offsets();
  const int N = batch.B * batch.T;
  const int C = static_cast<int>(config_.hidden_size),
            I = static_cast<int>(config_.intermediate_size);
  const int H = static_cast<int>(config_.num_attention_heads);
  const int KVH = static_cast<int>(config_.num_key_value_heads),
            D = static_cast<int>(config_.head_dim());
  const int Q = H * D, KV = KVH * D;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const size_t NC = static_cast<size_t>(N) * C;

  be_.rmsnorm_forward(a.xn1, a.rstd1, x_in, w + o.ln1, N, C, eps);
  be_.matmul_forward(a.q, a.xn1, w + o.wq, w + o.bq, N, C, Q);
  be_.matmul_forward(a.k, a.xn1, w + o.wk, w + o.bk, N, C, KV);
  be_.matmul_forward(a.v, a.xn1, w + o.wv, w + o.bv, N, C, KV);
  be_.rope_forward(a.q, batch.positions.data(), rope_cos_.data(), rope_sin_.data(), N, H, D);
  be_.rope_forward(a.k, batch.positions.data(), rope_cos_.data(), rope_sin_.data(), N, KVH, D);
  const AttnShape s{batch.B, batch.T, H, KVH, D};
  be_.attention_forward(a.y, a.lse, a.q, a.k, a.v, batch.doc_start.data(), s);
  be_.matmul_forward(a.xmid, a.y, w + o.wo, nullptr, N, Q, C);
  be_.add_rmsnorm_forward(a.xmid, a.xn2, a.rstd2, a.xmid, x_in, w + o.ln2, N, C, eps);
  be_.matmul_forward(a.gate, a.xn2, w + o.wg, nullptr, N, C, I);
  be_.matmul_forward(a.up, a.xn2, w + o.wu, nullptr, N, C, I);
  be_.swiglu_forward(a.h, a.gate, a.up, static_cast<size_t>(N) * I);
  if (need_output) {
    be_.matmul_forward(x_out, a.h, w + o.wd, nullptr, N, I, C);
    be_.add(x_out, x_out, a.xmid, NC);
  }
}

// On entry dres_ holds d(x_out); on exit d(x_in).
void Qwen2Model::layer_backward(const float* w, float* dw, const float* x_in, const LayerActs& a,
                                const Batch& batch) {
  const LayerOffsets& o = layout_.layer_offsets();
  const int N = batch.B * batch.T;
  const int C = static_cast<int>(config_.hidden_size),
            I = static_cast<int>(config_.intermediate_size);
  const int H = static_cast<int>(config_.num_attention_heads);
  const int KVH = static_cast<int>(config_.num_key_value_heads),
            D = static_cast<int>(config_.head_dim());
  const int Q = H * D, KV = KVH * D;
  const size_t NI = static_cast<size_t>(N) * I;
  float* dres = dres_.data();

  // MLP: x_out = xmid + h Wd^T
  be_.matmul_backward(dh_.data(), dw + o.wd, nullptr, dres, a.h, w + o.wd, N, I, C, false);
  be_.swiglu_backward(dgate_.data(), dup_.data(), dh_.data(), a.gate, a.up, NI);
  be_.matmul_backward(dxn_.data(), dw + o.wg, nullptr, dgate_.data(), a.xn2, w + o.wg, N, C, I,
                      false);
  be_.matmul_backward(dxn_.data(), dw + o.wu, nullptr, dup_.data(), a.xn2, w + o.wu, N, C, I, true);
  be_.rmsnorm_backward(dres, dw + o.ln2, dxn_.data(), a.xmid, w + o.ln2, a.rstd2, N, C, true);
  // Attention: xmid = x_in + y Wo^T
  be_.matmul_backward(dy_.data(), dw + o.wo, nullptr, dres, a.y, w + o.wo, N, Q, C, false);
  const AttnShape s{batch.B, batch.T, H, KVH, D};
  be_.attention_backward(dq_.data(), dk_.data(), dv_.data(), dy_.data(), a.q, a.k, a.v, a.y, a.lse,
                         batch.doc_start.data(), s);
  be_.rope_backward(dq_.data(), batch.positions.data(), rope_cos_.data(), rope_sin_.data(), N, H,
                    D);
  be_.rope_backward(dk_.data(), batch.positions.data(), rope_cos_.data(), rope_sin_.data(), N, KVH,
                    D);
  be_.matmul_backward(dxn_.data(), dw + o.wq, dw + o.bq, dq_.data(), a.xn1, w + o.wq, N, C, Q,
                      false);
  be_.matmul_backward(dxn_.data(), dw + o.wk, dw + o.bk, dk_.data(), a.xn1, w + o.wk, N, C, KV,
                      true);
  be_.matmul_backward(dxn_.data(), dw + o.wv, dw + o.bv, dv_.data(), a.xn1, w + o.wv, N, C, KV,
                      true);
  be_.rmsnorm_backward(dres, dw + o.ln1, dxn_.data(), x_in, w + o.ln1, a.rstd1, N, C, true);
}

void Qwen2Model::forward_trunk(const Batch& batch, UnitAccess& params) {
  const int N = batch.B * batch.T;
  const int C = static_cast<int>(config_.hidden_size);
  const size_t NC = static_cast<size_t>(N) * C;
  const int L = static_cast<int>(config_.num_hidden_layers);
  {
    const float* w = params.acquire(layout_.embed_unit());
    be_.embedding_forward(res_.data(), batch.input_ids.data(), w, N, C);
    params.release(layout_.embed_unit());
  }
  for (int l = 0; l < L; ++l) {
    const float* w = params.acquire(layout_.layer_unit(l));
    layer_forward(w, res_.data() + l * NC, res_.data() + (l + 1) * NC, layer_acts_[l], batch, true);
    params.release(layout_.layer_unit(l));
  }
}

double Qwen2Model::forward(const Batch& batch, UnitAccess& params) {
  prepare(batch, /*recompute=*/true, /*training=*/false);
  forward_trunk(batch, params);
  const int N = batch.B * batch.T;
  const int C = static_cast<int>(config_.hidden_size), V = static_cast<int>(config_.vocab_size);
  const int L = static_cast<int>(config_.num_hidden_layers);
  const float* hw = params.acquire(layout_.head_unit());
  be_.rmsnorm_forward(xf_.data(), rstdf_.data(), res_.data() + L * static_cast<size_t>(N) * C,
                      hw + layout_.final_norm_offset(), N, C,
                      static_cast<float>(config_.rms_norm_eps));
  const float* wh = config_.tie_word_embeddings ? params.acquire(layout_.embed_unit())
                                                : hw + layout_.lm_head_offset();
  const double loss =
      be_.cross_entropy(nullptr, nullptr, xf_.data(), wh, batch.targets.data(), N, C, V, 0.0f);
  if (config_.tie_word_embeddings) params.release(layout_.embed_unit());
  params.release(layout_.head_unit());
  return loss;
}

double Qwen2Model::forward_backward(const Batch& batch, UnitAccess& params, float scale,
                                    bool recompute) {
  prepare(batch, recompute, /*training=*/true);
  forward_trunk(batch, params);
  const int N = batch.B * batch.T;
  const int C = static_cast<int>(config_.hidden_size), V = static_cast<int>(config_.vocab_size);
  const int L = static_cast<int>(config_.num_hidden_layers);
  const size_t NC = static_cast<size_t>(N) * C;
  const bool tied = config_.tie_word_embeddings;

  // Head: final norm, fused LM head + loss + its backward.
  double loss;
  {
    const int hu = layout_.head_unit();
    const float* hw = params.acquire(hu);
    float* hg = params.grad(hu);
    be_.rmsnorm_forward(xf_.data(), rstdf_.data(), res_.data() + L * NC,
                        hw + layout_.final_norm_offset(), N, C,
                        static_cast<float>(config_.rms_norm_eps));
    const float* wh = tied ? params.acquire(layout_.embed_unit()) : hw + layout_.lm_head_offset();
    float* gh = tied ? params.grad(layout_.embed_unit()) : hg + layout_.lm_head_offset();
    loss = be_.cross_entropy(dxf_.data(), gh, xf_.data(), wh, batch.targets.data(), N, C, V, scale);
    if (tied) params.release(layout_.embed_unit());
    be_.rmsnorm_backward(dres_.data(), hg + layout_.final_norm_offset(), dxf_.data(),
                         res_.data() + L * NC, hw + layout_.final_norm_offset(), rstdf_.data(), N,
                         C, false);
    params.release(hu);
    params.grad_done(hu);
  }
  for (int l = L - 1; l >= 0; --l) {
    const int u = layout_.layer_unit(l);
    const float* w = params.acquire(u);
    if (recompute) layer_forward(w, res_.data() + l * NC, nullptr, layer_acts_[l], batch, false);
    layer_backward(w, params.grad(u), res_.data() + l * NC, layer_acts_[l], batch);
    params.release(u);
    params.grad_done(u);
  }
  {
    const int eu = layout_.embed_unit();
    be_.embedding_backward(params.grad(eu), dres_.data(), batch.input_ids.data(), N, C);
    params.grad_done(eu);
  }
  return loss;
}

}  // namespace kiln
