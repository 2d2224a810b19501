#include <cstring>

#include "kiln/base/error.h"
#include "kiln/comm/communicator.h"

namespace kiln {

namespace {

// World size 1: a gather or a reduce-scatter is a copy. Memory may be a device's: the copy
// runs on the producer's stream (after the op that wrote `in`), or at once for host buffers.
void copy(void* out, const void* in, size_t bytes, Stream* after) {
  if (out == in || bytes == 0) return;
  if (after == nullptr) {
    std::memmove(out, in, bytes);
    return;
  }
  after->wait_for([out, in, bytes] { std::memmove(out, in, bytes); });
}

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  TransportInfo transport_info() const override { return {.library = CommLibrary::kLocal}; }
  std::unique_ptr<Work> all_reduce_async(void*, size_t, DType, ReduceOp, Stream*) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> all_gather_async(void* out, const void* in, size_t n, DType t,
                                         Stream* after) override {
    copy(out, in, n * dtype_size(t), after);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> reduce_scatter_async(void* out, const void* in, size_t n, DType t, ReduceOp,
                                             Stream* after) override {
    copy(out, in, n * dtype_size(t), after);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> broadcast_async(void*, size_t, DType, int, Stream*) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> all_reduce_f64_async(double*, size_t, ReduceOp, Stream*) override {
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
