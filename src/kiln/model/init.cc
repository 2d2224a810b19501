#include "kiln/model/init.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace kiln {

namespace {
uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

constexpr size_t kBlock = 4096;  // values per PRNG stream within a tensor

SplitMix64 block_rng(uint64_t seed, const std::string& name, size_t block) {
  return {seed ^ hash_name(name) ^ (block * 0x632be59bd9b4e019ull)};
}

// N(0, std^2), Box-Muller: two normals per pair of uniforms.
void fill_normal(float* p, const ParamEntry& e, uint64_t seed, float std) {
  const size_t nblocks = (e.numel + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nblocks; ++b) {
    SplitMix64 rng = block_rng(seed, e.name, b);
    for (size_t i = b * kBlock, end = std::min(e.numel, i + kBlock); i < end; i += 2) {
      const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
      const double r = std::sqrt(-2.0 * std::log(u1));
      p[i] = static_cast<float>(std * r * std::cos(2 * M_PI * u2));
      if (i + 1 < end) p[i + 1] = static_cast<float>(std * r * std::sin(2 * M_PI * u2));
    }
  }
}

// U(-bound, bound).
void fill_uniform(float* p, const ParamEntry& e, uint64_t seed, double bound) {
  const size_t nblocks = (e.numel + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nblocks; ++b) {
    SplitMix64 rng = block_rng(seed, e.name, b);
    for (size_t i = b * kBlock, end = std::min(e.numel, i + kBlock); i < end; ++i)
      p[i] = static_cast<float>(bound * (2.0 * rng.uniform() - 1.0));
  }
}

void init_entry(float* p, const ParamEntry& e, uint64_t seed, float std) {
  if (ends_with(e.name, ".lora_A.weight")) {
    // PEFT: kaiming_uniform_(a=sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / fan_in)
    fill_uniform(p, e, seed, 1.0 / std::sqrt(static_cast<double>(e.shape[1])));
  } else if (ends_with(e.name, ".lora_B.weight")) {
    std::fill(p, p + e.numel, 0.0f);
  } else if (e.shape.size() == 1) {
    const bool is_norm = e.name.find("norm") != std::string::npos;
    std::fill(p, p + e.numel, is_norm ? 1.0f : 0.0f);
  } else {
    fill_normal(p, e, seed, std);
  }
}

void init_unit(ParamStore& store, const ParamLayout& layout, int u, uint64_t seed, float std) {
  std::vector<float> host(layout.units()[u].numel);  // built on the host, then uploaded
  init_unit_values(layout, u, seed, host.data(), std);
  store.load_unit(u, host.data());
}
}  // namespace

void init_unit_values(const ParamLayout& layout, int unit, uint64_t seed, float* out, float std) {
  for (const auto& e : layout.units()[unit].entries) init_entry(out + e.offset, e, seed, std);
}

void init_params(ParamStore& store, const ParamLayout& layout, uint64_t seed, float std) {
  for (int u = 0; u < layout.num_units(); ++u) init_unit(store, layout, u, seed, std);
}

void init_lora_params(ParamStore& store, const ParamLayout& layout, uint64_t seed) {
  if (!layout.has_lora()) return;
  for (int u = layout.lora_unit(0); u < layout.num_units(); ++u)
    init_unit(store, layout, u, seed, 0.0f);
}

}  // namespace kiln
