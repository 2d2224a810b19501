#include "kiln/model/init.h"

#include <cmath>
#include <vector>

namespace kiln {

namespace {
uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

void init_params(ParamStore& store, const ParamLayout& layout, uint64_t seed, float std) {
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<float> host(layout.units()[u].numel);  // built on the host, then uploaded
    float* base = host.data();
    for (const auto& e : layout.units()[u].entries) {
      float* p = base + e.offset;
      if (e.shape.size() == 1) {
        const bool is_norm = e.name.find("norm") != std::string::npos;
        for (size_t i = 0; i < e.numel; ++i) p[i] = is_norm ? 1.0f : 0.0f;
        continue;
      }
      // Each tensor has its own stream (seed ^ name), so layouts and orders never shift values.
      const size_t nblocks = (e.numel + 4095) / 4096;
#pragma omp parallel for schedule(static)
      for (size_t b = 0; b < nblocks; ++b) {
        SplitMix64 rng{seed ^ hash_name(e.name) ^ (b * 0x632be59bd9b4e019ull)};
        for (size_t i = b * 4096, end = std::min(e.numel, i + 4096); i < end; i += 2) {
          // Box-Muller: two normals per pair of uniforms
          const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
          const double r = std::sqrt(-2.0 * std::log(u1));
          p[i] = static_cast<float>(std * r * std::cos(2 * M_PI * u2));
          if (i + 1 < end) p[i + 1] = static_cast<float>(std * r * std::sin(2 * M_PI * u2));
        }
      }
    }
    store.load_unit(u, host.data());
  }
}

}  // namespace kiln
