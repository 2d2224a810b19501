#include "kiln/base/error.h"
#include "kiln/kernels/device/cast_copy.h"
#include "kiln/model/unit_access.h"

namespace kiln {

ParamStore::ParamStore(const ParamLayout& layout, const Backend& backend, bool with_grads)
    : layout_(layout), be_(backend), dtype_(backend.activation_dtype()), pool_(backend) {
  for (const auto& u : layout.units()) {
    stored_.push_back(stored_dtype(u, dtype_));
    params_.emplace_back(be_, storage_floats(u.numel, stored_.back()));
    grads_.emplace_back(be_, with_grads && u.trainable ? u.numel : 0);  // none when frozen
  }
  copies_.resize(params_.size());
}

ConstDevPtr ParamStore::acquire(int unit) {
  if (!copies(unit)) return {params_[unit].data(), stored_[unit]};
  Bf16Copy& c = copies_[unit];
  if (c.in_use++ == 0) {
    const size_t n = layout_.units()[unit].numel;
    c.data = pool_.take(storage_floats(n, DType::BF16));
    be_.cast_to_bf16(c.data.data(), params_[unit].data(), n);
  }
  return {c.data.data(), DType::BF16};
}

ShardedTable ParamStore::acquire_table(int unit, int, TableUse use) {
  const ParamUnit& u = layout_.units()[unit];
  KILN_CHECK(u.row_width > 0 && (use == TableUse::kLookup || grads_[unit].size() > 0),
             "acquire_table: unit {} ({}) is not a trainable table", unit, u.name);
  const int V = static_cast<int>(u.numel / u.row_width);
  float* g = grads_[unit].size() > 0 ? grads_[unit].data() : nullptr;
  if (use == TableUse::kLookup) {
    // A table stored in fp32 is read in place (the lookup rounds it as acquire() would); one
    // stored in bf16 (frozen) as acquire() hands it out.
    const bool in_place = stored_[unit] == DType::F32;
    return whole_table(in_place ? ConstDevPtr(params_[unit].data()) : acquire(unit), nullptr, V);
  }
  if (use == TableUse::kLookupBackward) return whole_table(ConstDevPtr(nullptr, DType::F32), g, V);
  return whole_table(acquire(unit), g, V);
}

void ParamStore::release_table(int unit, TableUse use) {
  const bool acquired =
      use == TableUse::kHead || (use == TableUse::kLookup && stored_[unit] != DType::F32);
  if (acquired) release(unit);
}

void ParamStore::release(int unit) {
  if (!copies(unit)) return;
  Bf16Copy& c = copies_[unit];
  KILN_CHECK(c.in_use > 0, "release of unit {} that was not acquired", unit);
  if (--c.in_use == 0) pool_.give(std::move(c.data));
}

DeviceBuffer<float>& ParamStore::params(int unit) {
  KILN_CHECK(stored_[unit] == DType::F32, "params() of unit {} ({}), stored in {}: use load_unit",
             unit, layout_.units()[unit].name, dtype_name(stored_[unit]));
  return params_[unit];
}

const DeviceBuffer<float>& ParamStore::params(int unit) const {
  KILN_CHECK(stored_[unit] == DType::F32, "params() of unit {} ({}), stored in {}: use read_unit",
             unit, layout_.units()[unit].name, dtype_name(stored_[unit]));
  return params_[unit];
}

// A local CastCopy: a bf16 unit's staging lives for this call only (freed after the wait).
void ParamStore::load_unit(int unit, const float* host) {
  CastCopy copy(be_);
  copy.to_device(params_[unit].data(), stored_[unit], host, layout_.units()[unit].numel);
  be_.synchronize();
}

void ParamStore::read_unit(int unit, float* host) const {
  CastCopy copy(be_);
  copy.to_host(host, params_[unit].data(), stored_[unit], layout_.units()[unit].numel);
  be_.synchronize();
}

size_t ParamStore::param_bytes() const {
  size_t n = 0;
  for (const auto& p : params_) n += p.bytes();
  return n;
}

size_t ParamStore::grad_bytes() const {
  size_t n = 0;
  for (const auto& g : grads_) n += g.bytes();
  return n;
}

void ParamStore::zero_grads() {
  for (auto& g : grads_) g.zero();
}

float* ParamStore::tensor(const std::string& hf_name) {
  auto [u, e] = layout_.find(hf_name);
  if (u < 0) fail("no parameter named {}", hf_name);
  return params(u).data() + layout_.units()[u].entries[e].offset;
}

}  // namespace kiln
