// A ScratchLender (model/sharded_table.h) straight from the backend, for tests that call the split
// table's uses without FSDP's pool: each take is a fresh buffer, each give drops it.
#pragma once

#include "kiln/model/sharded_table.h"

namespace kiln::testing {

class FreshScratch final : public ScratchLender {
 public:
  explicit FreshScratch(const Backend& be) : be_(be) {}
  DeviceBuffer<float> take(size_t n) override { return DeviceBuffer<float>(be_, n); }
  void give(DeviceBuffer<float>) override {}

 private:
  const Backend& be_;
};

}  // namespace kiln::testing
