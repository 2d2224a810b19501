#include "kiln/comm/null_communicator.h"

#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/comm/gloo_collectives.h"
#include "kiln/comm/shm_lane.h"

namespace kiln {

namespace {

class NullCommunicator final : public Communicator {
 public:
  NullCommunicator(int rank, int world_size, CommScratch scratch, ScratchSink sink)
      : rank_(rank), size_(world_size), kind_(scratch), sink_(std::move(sink)) {
    KILN_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank {} of {}", rank,
               world_size);
    if (kind_ == CommScratch::kShmLane && size_ > 1) hold(ShmLane::segment_bytes(size_));
  }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  TransportInfo transport_info() const override {
    return {.library = CommLibrary::kNone, .note = "memory plan"};
  }

  std::unique_ptr<Work> all_reduce_async(void*, size_t, DType, ReduceOp, Stream*) override {
    return done();
  }
  std::unique_ptr<Work> all_gather_async(void*, const void*, size_t, DType, Stream*) override {
    return done();
  }
  std::unique_ptr<Work> reduce_scatter_async(void*, const void*, size_t n, DType t, ReduceOp,
                                             Stream*) override {
    if (kind_ == CommScratch::kGloo) {
      hold(std::max(held_, gloo_detail::ring_reduce_scatter_scratch_bytes(size_, n, t)));
    }
    return done();
  }
  std::unique_ptr<Work> broadcast_async(void*, size_t, DType, int, Stream*) override {
    return done();
  }
  std::unique_ptr<Work> all_reduce_f64_async(double*, size_t, ReduceOp, Stream*) override {
    return done();
  }
  void barrier() override {}
  void all_reduce(double*, size_t, ReduceOp) override {}
  std::unique_ptr<Communicator> split(const std::vector<int>& ranks, const std::string&) override {
    const auto it = std::find(ranks.begin(), ranks.end(), rank_);
    KILN_CHECK(it != ranks.end(), "split: rank {} not in its group", rank_);
    return std::make_unique<NullCommunicator>(static_cast<int>(it - ranks.begin()),
                                              static_cast<int>(ranks.size()), kind_, sink_);
  }

 private:
  static std::unique_ptr<Work> done() { return std::make_unique<DoneWork>(); }
  void hold(size_t bytes) {
    if (bytes == held_) return;
    held_ = bytes;
    if (sink_) sink_(this, held_);
  }

  int rank_, size_;
  CommScratch kind_;
  ScratchSink sink_;
  size_t held_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_null_communicator(int rank, int world_size, CommScratch scratch,
                                                     ScratchSink sink) {
  return std::make_unique<NullCommunicator>(rank, world_size, scratch, std::move(sink));
}

}  // namespace kiln
