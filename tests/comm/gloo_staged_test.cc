// Gloo on device buffers, staged through pinned host memory (GlooOptions::staging_backend), run
// here with the CPU stream emulation (KILN_ASYNC_CPU's backend) as the "device": every copy and
// op runs later on a stream thread, so a staging step out of order (Gloo reading the input
// before the device-to-host copy ran, the caller reading the output before the copy back) shows
// as a wrong result. Every rank is a thread with its own backend, over one MemoryStore.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "common/rank_threads.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/kernels/cpu/async_cpu_backend.h"

namespace kiln {
namespace {

using Body = std::function<void(Communicator&, const Backend&, int)>;

void run_ranks(int world, const Body& body) {
  auto store = std::make_shared<MemoryStore>();
  testing::run_rank_threads(world, [&](int r) {
    auto backend = make_async_cpu_backend(false);
    GlooOptions o;
    o.timeout = std::chrono::milliseconds(20000);
    o.staging_backend = backend.get();
    auto comm = make_gloo_communicator(store, r, world, o);
    body(*comm, *backend, r);
  });
}

float value(int rank, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 101) - 50) / 4.0f;
}

// A device buffer of n floats holding value(rank, i), written on the compute stream: the
// collective must wait for this write (its `after`).
struct DevFloats {
  DevFloats(const Backend& be, size_t n) : be(be), n(n), p(static_cast<float*>(be.alloc(n * 4))) {}
  ~DevFloats() { be.free(p); }
  void fill(int rank, size_t offset = 0, size_t count = 0) {
    host.assign(count ? count : n, 0);
    for (size_t i = 0; i < host.size(); ++i) host[i] = value(rank, i);
    be.copy_to_device(p + offset, host.data(), host.size() * 4);
  }
  std::vector<float> read() {
    std::vector<float> out(n);
    be.copy_to_host(out.data(), p, n * 4);
    be.synchronize();
    return out;
  }
  const Backend& be;
  size_t n;
  float* p;
  std::vector<float> host;
};

TEST(GlooStaged, AllReduceSumMeanMax) {
  constexpr size_t n = 1001;
  run_ranks(3, [&](Communicator& c, const Backend& be, int rank) {
    EXPECT_NE(c.transport().find(" staged"), std::string::npos) << c.transport();
    EXPECT_TRUE(c.transport_info().staged);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
      DevFloats x(be, n);
      x.fill(rank);
      Stream& s = be.compute_stream();
      c.all_reduce_async(x.p, n, DType::F32, op, &s)->wait(s);
      const std::vector<float> got = x.read();
      for (size_t i = 0; i < n; ++i) {
        float want = value(0, i);
        for (int r = 1; r < 3; ++r) {
          want = op == ReduceOp::kMax ? std::max(want, value(r, i)) : want + value(r, i);
        }
        if (op == ReduceOp::kMean) want /= 3;
        ASSERT_EQ(got[i], want) << "op " << int(op) << " i " << i;
      }
    }
  });
}

TEST(GlooStaged, AllGatherInPlaceAndNot) {
  constexpr size_t n = 333;
  run_ranks(2, [&](Communicator& c, const Backend& be, int rank) {
    Stream& s = be.compute_stream();
    DevFloats in(be, n), out(be, 2 * n), inplace(be, 2 * n);
    in.fill(rank);
    inplace.fill(rank, rank * n, n);
    c.all_gather_async(out.p, in.p, n, DType::F32, &s)->wait(s);
    c.all_gather_async(inplace.p, inplace.p + rank * n, n, DType::F32, &s)->wait_host();
    const std::vector<float> a = out.read(), b = inplace.read();
    for (int r = 0; r < 2; ++r) {
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(a[r * n + i], value(r, i)) << r << " " << i;
        ASSERT_EQ(b[r * n + i], value(r, i)) << r << " " << i;
      }
    }
  });
}

TEST(GlooStaged, ReduceScatterBroadcastAndF64OnAnotherStream) {
  constexpr size_t n = 257;
  run_ranks(2, [&](Communicator& c, const Backend& be, int rank) {
    Stream& s = be.compute_stream();
    // The caller's stream is not the staging backend's: the copies must still follow it, and
    // work on it after wait(other) must see the result.
    std::unique_ptr<Stream> other = be.create_stream();
    DevFloats in(be, 2 * n), out(be, n), bc(be, n);
    in.fill(rank);
    bc.fill(rank);
    other->wait(s.record());
    c.reduce_scatter_async(out.p, in.p, n, DType::F32, ReduceOp::kSum, other.get())->wait(*other);
    c.broadcast_async(bc.p, n, DType::F32, 1, &s)->wait(s);
    s.wait(other->record());
    const std::vector<float> rs = out.read(), b = bc.read();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(rs[i], value(0, rank * n + i) + value(1, rank * n + i)) << i;
      ASSERT_EQ(b[i], value(1, i)) << i;
    }
    auto* d = static_cast<double*>(be.alloc(2 * sizeof(double)));
    const double host[2] = {rank + 0.5, 10.0 * rank};
    be.copy_to_device(d, host, sizeof host);
    c.all_reduce_f64_async(d, 2, ReduceOp::kSum, &s)->wait(s);
    double got[2] = {};
    be.copy_to_host(got, d, sizeof got);
    be.synchronize();
    EXPECT_EQ(got[0], 2.0);
    EXPECT_EQ(got[1], 10.0);
    be.free(d);
    // Host buffers (after null) are still host memory with a staging backend.
    double h[1] = {1.0 + rank};
    c.all_reduce(h, 1, ReduceOp::kMax);
    EXPECT_EQ(h[0], 2.0);
    c.barrier();
  });
}

TEST(GlooStaged, ManyOpsInFlight) {
  // Several staged ops outstanding at once, waited in reverse: each keeps its own pinned copy.
  constexpr size_t n = 64;
  constexpr int kOps = 8;
  run_ranks(2, [&](Communicator& c, const Backend& be, int rank) {
    Stream& s = be.compute_stream();
    std::vector<std::unique_ptr<DevFloats>> xs;
    std::vector<std::unique_ptr<Work>> works;
    for (int k = 0; k < kOps; ++k) {
      xs.push_back(std::make_unique<DevFloats>(be, n));
      xs.back()->fill(rank + k);
      works.push_back(c.all_reduce_async(xs.back()->p, n, DType::F32, ReduceOp::kSum, &s));
    }
    for (int k = kOps - 1; k >= 0; --k) works[k]->wait(s);
    for (int k = 0; k < kOps; ++k) {
      const std::vector<float> got = xs[k]->read();
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], value(k, i) + value(1 + k, i)) << k;
    }
  });
}

TEST(GlooStaged, SubGroupsStageToo) {
  // hybrid_shard's groups: split() keeps the staging backend (and its pinned pool).
  constexpr size_t n = 100;
  run_ranks(4, [&](Communicator& c, const Backend& be, int rank) {
    const std::vector<int> mine = rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    auto sub = c.split(mine, "intra");
    EXPECT_NE(sub->transport().find(" staged"), std::string::npos);
    DevFloats x(be, n);
    x.fill(rank);
    Stream& s = be.compute_stream();
    sub->all_reduce_async(x.p, n, DType::F32, ReduceOp::kSum, &s)->wait(s);
    const std::vector<float> got = x.read();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], value(mine[0], i) + value(mine[1], i)) << i;
  });
}

}  // namespace
}  // namespace kiln
