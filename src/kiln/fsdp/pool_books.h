// What FSDP's pool holds, by the use each buffer was taken for. The pool (DevicePool) keeps every
// buffer it made and reuses one only of the same size, so what it holds is, per size, the most
// buffers of that size alive at once. Buffers of different uses can share a size (under bf16 at
// two ranks a gathered unit is exactly as large as a reduced shard): a size's bytes go to the
// uses in order (gathered units, gradient buffers, communication buffers), each up to its own
// most alive at once, so the parts add up to what the pool holds. The memory plan reads the parts
// of the real Fsdp it runs (train/memory_plan.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>

#include "kiln/base/error.h"

namespace kiln {

enum class PoolUse {
  kGathered,  // gathered units (all-gather outputs)
  kGrads,     // whole-unit gradients and their reduce-dtype copies (reduce-scatter inputs)
  kComm,  // reduced shards, widened copies, the row lookups' buffers, the split head's bf16 rows
          // and the vocabulary-parallel loss's buffers (lent through Fsdp::acquire_table)
};

struct PoolParts {
  size_t gathered = 0, grads = 0, comm = 0;
  size_t total() const { return gathered + grads + comm; }
};

class PoolBooks {
 public:
  // A buffer of n floats taken for `use` (std::map finds existing sizes without allocating).
  void take(size_t n, PoolUse use) {
    Count& c = counts_[n];
    c.most = std::max(c.most, ++c.live);
    const auto i = static_cast<size_t>(use);
    c.use_most[i] = std::max(c.use_most[i], ++c.use_live[i]);
  }
  void give(size_t n, PoolUse use) {
    auto it = counts_.find(n);
    const auto i = static_cast<size_t>(use);
    KILN_CHECK(it != counts_.end() && it->second.use_live[i] > 0, "give of a buffer not taken");
    --it->second.live;
    --it->second.use_live[i];
  }
  // A fresh pool: it holds only what is alive now.
  void renew() {
    for (auto& [n, c] : counts_) {
      c.most = c.live;
      for (size_t i = 0; i < 3; ++i) c.use_most[i] = c.use_live[i];
    }
  }
  PoolParts parts() const {
    PoolParts p;
    size_t* out[3] = {&p.gathered, &p.grads, &p.comm};
    for (const auto& [n, c] : counts_) {
      size_t left = c.most;
      for (size_t i = 0; i < 3; ++i) {
        const size_t mine = std::min(left, c.use_most[i]);
        *out[i] += mine * n * sizeof(float);
        left -= mine;
      }
    }
    return p;
  }
  size_t bytes() const { return parts().total(); }

 private:
  struct Count {
    size_t live = 0, most = 0;
    size_t use_live[3] = {0, 0, 0}, use_most[3] = {0, 0, 0};
  };
  std::map<size_t, Count> counts_;
};

}  // namespace kiln
