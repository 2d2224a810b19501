#include "kiln/kernels/cuda/gemm_lt_choice.h"

#include <functional>

#include "kiln/base/error.h"

namespace kiln::cuda {

size_t GemmKeyHash::operator()(const GemmKey& k) const {
  const GemmSpec& s = k.spec;
  size_t h = 0;
  const auto mix = [&h](uint64_t v) {
    h ^= std::hash<uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  mix(static_cast<uint64_t>(s.M));
  mix(static_cast<uint64_t>(s.N));
  mix(static_cast<uint64_t>(s.K));
  mix(static_cast<uint64_t>(s.lda));
  mix(static_cast<uint64_t>(s.ldb));
  mix(static_cast<uint64_t>(s.ldc));
  mix((s.trans_a ? 1u : 0u) | (s.trans_b ? 2u : 0u) | (s.bias ? 4u : 0u) |
      (s.accumulate ? 8u : 0u) | (static_cast<uint64_t>(s.inputs) << 4));
  mix(uint64_t{k.align_a} | uint64_t{k.align_b} << 16 | uint64_t{k.align_c} << 32 |
      uint64_t{k.align_bias} << 48);
  return h;
}

namespace {

// `ld` elements of `bytes` each, rounded up to whole kLtPaddedRowBytes.
int64_t padded_ld(int64_t ld, int64_t bytes) {
  const int64_t step = kLtPaddedRowBytes / bytes;
  return (ld + step - 1) / step * step;
}

}  // namespace

bool rows_are_padded(const GemmSpec& s) {
  const int64_t in = static_cast<int64_t>(dtype_size(s.inputs));
  return s.lda * in % kLtPaddedRowBytes == 0 && s.ldb * in % kLtPaddedRowBytes == 0 &&
         s.ldc * static_cast<int64_t>(sizeof(float)) % kLtPaddedRowBytes == 0;
}

GemmKey padded_key(const GemmKey& key) {
  GemmKey p = key;
  const int64_t in = static_cast<int64_t>(dtype_size(key.spec.inputs));
  p.spec.lda = padded_ld(key.spec.lda, in);
  p.spec.ldb = padded_ld(key.spec.ldb, in);
  p.spec.ldc = padded_ld(key.spec.ldc, static_cast<int64_t>(sizeof(float)));
  p.align_a = p.align_b = p.align_c = 256;
  return p;
}

LtChoice choose_lt_algorithms(const GemmKey& key, const LtHeuristic& heuristic) {
  LtChoice c{key, heuristic(key), false};
  if (!c.algos.empty()) return c;
  const GemmKey padded = padded_key(key);
  if (padded == key) {
    fail("cuBLASLt: no algorithm for {} (A, B, C aligned to {}, {}, {} bytes)", describe(key.spec),
         key.align_a, key.align_b, key.align_c);
  }
  c = {padded, heuristic(padded), true};
  if (c.algos.empty()) {
    fail("cuBLASLt: no algorithm for {} (A, B, C aligned to {}, {}, {} bytes), nor padded to {}",
         describe(key.spec), key.align_a, key.align_b, key.align_c, describe(padded.spec));
  }
  return c;
}

}  // namespace kiln::cuda
