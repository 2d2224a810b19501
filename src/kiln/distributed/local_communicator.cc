#include <cstring>

#include "kiln/base/error.h"
#include "kiln/distributed/communicator.h"

namespace kiln {

namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
};

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string transport() const override { return "local"; }
  std::unique_ptr<Work> all_reduce_async(void*, size_t, DType, ReduceOp) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> all_gather_async(void* out, const void* in, size_t n, DType t) override {
    if (out != in) std::memmove(out, in, n * dtype_size(t));
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> reduce_scatter_async(void* out, const void* in, size_t n, DType t,
                                             ReduceOp) override {
    if (out != in) std::memmove(out, in, n * dtype_size(t));
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> broadcast_async(void*, size_t, DType, int) override {
    return std::make_unique<DoneWork>();
  }
  void barrier() override {}
  void all_reduce(double*, size_t, ReduceOp) override {}
  std::unique_ptr<Communicator> split(const std::vector<int>& ranks, const std::string&) override {
    KILN_CHECK(ranks.size() == 1 && ranks[0] == 0);
    return std::make_unique<LocalCommunicator>();
  }
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator() {
  return std::make_unique<LocalCommunicator>();
}

}  // namespace kiln
