#include "kiln/base/error.h"
#include "kiln/model/unit_access.h"

namespace kiln {

ParamStore::ParamStore(const ParamLayout& layout, const Backend& backend, bool with_grads)
    : layout_(layout), be_(backend), dtype_(backend.activation_dtype()), pool_(backend) {
  for (const auto& u : layout.units()) {
    params_.emplace_back(be_, u.numel);
    grads_.emplace_back(be_, with_grads && u.trainable ? u.numel : 0);  // none when frozen
  }
  copies_.resize(params_.size());
}

ConstDevPtr ParamStore::acquire(int unit) {
  if (dtype_ == DType::F32) return params_[unit].data();
  Bf16Copy& c = copies_[unit];
  if (c.in_use++ == 0) {
    const size_t n = params_[unit].size();
    c.data = pool_.take(storage_floats(n, DType::BF16));
    be_.cast_to_bf16(c.data.data(), params_[unit].data(), n);
  }
  return {c.data.data(), DType::BF16};
}

void ParamStore::embed_rows(int unit, const int32_t* ids, int N, int C, float* out) {
  const DeviceBuffer<float>& t = params_[unit];
  be_.embedding_forward_part(out, ids, t.data(), 0, t.size(), N, C, dtype_ == DType::BF16);
}

void ParamStore::head_cross_entropy(int unit, double* loss_sum, float* dx, const float* x,
                                    const int32_t* targets, int N, int targeted, int C, int V,
                                    float scale) {
  const ConstDevPtr w = acquire(unit);
  be_.cross_entropy(loss_sum, dx, grads_[unit].data(), x, w, targets, N, targeted, C, V, scale);
  release(unit);
}

void ParamStore::release(int unit) {
  if (dtype_ == DType::F32) return;
  Bf16Copy& c = copies_[unit];
  KILN_CHECK(c.in_use > 0, "release of unit {} that was not acquired", unit);
  if (--c.in_use == 0) pool_.give(std::move(c.data));
}

void ParamStore::load_unit(int unit, const float* host) {
  be_.copy_to_device(params_[unit].data(), host, params_[unit].bytes());
  be_.synchronize();
}

void ParamStore::read_unit(int unit, float* host) const {
  be_.copy_to_host(host, params_[unit].data(), params_[unit].bytes());
  be_.synchronize();
}

void ParamStore::zero_grads() {
  for (auto& g : grads_) g.zero();
}

float* ParamStore::tensor(const std::string& hf_name) {
  auto [u, e] = layout_.find(hf_name);
  if (u < 0) fail("no parameter named {}", hf_name);
  return params_[u].data() + layout_.units()[u].entries[e].offset;
}

}  // namespace kiln
