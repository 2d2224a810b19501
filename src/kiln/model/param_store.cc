#include "kiln/base/error.h"
#include "kiln/model/unit_access.h"

namespace kiln {

ParamStore::ParamStore(const ParamLayout& layout, const Backend& backend, bool with_grads)
    : layout_(layout), be_(backend) {
  for (const auto& u : layout.units()) {
    params_.emplace_back(be_, u.numel);
    grads_.emplace_back(be_, with_grads ? u.numel : 0);
  }
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
