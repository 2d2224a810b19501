#include "kiln/base/error.h"
#include "kiln/model/unit_access.h"

namespace kiln {

ParamStore::ParamStore(const ParamLayout& layout, bool with_grads) : layout_(layout) {
  for (const auto& u : layout.units()) {
    params_.emplace_back(u.numel);
    grads_.emplace_back(with_grads ? u.numel : 0);
  }
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
