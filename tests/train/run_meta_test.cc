// run_meta's exchange of every rank's transport: each rank's TransportInfo, whole, on every rank,
// however long its text (ranks as threads over Gloo).
#include "kiln/train/run_meta.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/rank_threads.h"
#include "kiln/base/json.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/store.h"

namespace kiln {
namespace {

// A Gloo group member that reports a transport of the test's choosing.
class Reporting final : public Communicator {
 public:
  Reporting(Communicator& inner, TransportInfo t) : inner_(inner), t_(std::move(t)) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  TransportInfo transport_info() const override { return t_; }
  std::unique_ptr<Work> all_reduce_async(void* data, size_t n, DType t, ReduceOp op,
                                         Stream* after) override {
    return inner_.all_reduce_async(data, n, t, op, after);
  }
  std::unique_ptr<Work> all_gather_async(void* out, const void* in, size_t n, DType t,
                                         Stream* after) override {
    return inner_.all_gather_async(out, in, n, t, after);
  }
  std::unique_ptr<Work> reduce_scatter_async(void* out, const void* in, size_t n, DType t,
                                             ReduceOp op, Stream* after) override {
    return inner_.reduce_scatter_async(out, in, n, t, op, after);
  }
  std::unique_ptr<Work> broadcast_async(void* data, size_t n, DType t, int root,
                                        Stream* after) override {
    return inner_.broadcast_async(data, n, t, root, after);
  }
  std::unique_ptr<Work> all_reduce_f64_async(double* data, size_t n, ReduceOp op,
                                             Stream* after) override {
    return inner_.all_reduce_f64_async(data, n, op, after);
  }
  void barrier() override { inner_.barrier(); }
  void all_reduce(double* data, size_t n, ReduceOp op) override { inner_.all_reduce(data, n, op); }
  std::unique_ptr<Communicator> split(const std::vector<int>& ranks,
                                      const std::string& name) override {
    return inner_.split(ranks, name);
  }

 private:
  Communicator& inner_;
  TransportInfo t_;
};

// Rank r's transport: different libraries, fields and lengths (rank 1's is longer than the
// 256-byte slot the exchange once had).
TransportInfo made_up(int rank) {
  TransportInfo t;
  if (rank == 0) {
    t = {.library = CommLibrary::kGloo, .net = "socket", .iface = "eth0", .address = "10.0.0.2"};
    t.authenticated = t.shm_lane = true;
  } else if (rank == 1) {
    t = {.library = CommLibrary::kNccl, .net = "efa", .plugin = "aws-ofi-nccl"};
    t.intra = {"p2p", "shm", "nvls"};
    t.note = std::string(300, 'n');
  } else {
    t = {.library = CommLibrary::kLocal};
  }
  return t;
}

TEST(RunMeta, GatherTransportsCarriesEveryRanksWholeTransport) {
  constexpr int kWorld = 3;
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::vector<TransportInfo>> seen(kWorld);
  testing::run_rank_threads(kWorld, [&](int r) {
    GlooOptions o;
    o.same_host_shm = false;
    auto gloo = make_gloo_communicator(store, r, kWorld, o);
    Reporting comm(*gloo, made_up(r));
    seen[r] = gather_transports(comm);
  });
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(seen[r].size(), size_t{kWorld}) << "rank " << r;
    for (int q = 0; q < kWorld; ++q) {
      EXPECT_TRUE(seen[r][q] == made_up(q))
          << "rank " << r << " sees rank " << q << "'s transport as "
          << transport_info_json(seen[r][q]).dump() << ", not "
          << transport_info_json(made_up(q)).dump();
    }
  }
}

}  // namespace
}  // namespace kiln
