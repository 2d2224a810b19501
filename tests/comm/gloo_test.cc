// Gloo communicator: every rank a thread, over one MemoryStore, on loopback. Inputs are multiples
// of 1/4 with small magnitude so f32 sums are exact in any order and compare with ==.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>

#include "common/rank_threads.h"
#include "kiln/base/error.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/transport.h"

namespace kiln {
namespace {

using std::chrono::milliseconds;
using Body = std::function<void(Communicator&, int)>;

// The data paths every test runs over: Gloo's tcp transport only (GlooOptions::same_host_shm
// off, as between hosts), shared memory for the bulk collectives (every rank is on this host),
// and kiln's authenticated transport (dist.authenticate_pairs on, TCP only).
enum class Path { kTcp, kShm, kAuth };

void use_path(Path path, GlooOptions& o) {
  o.same_host_shm = path == Path::kShm;
  if (path == Path::kAuth) {
    o.pair_token = "gloo-test-token-0123456789";
    o.authenticate = PairAuth::kOn;
  }
}

// Runs body(comm, rank) on `world` threads; any exception fails the test naming the rank.
void run_ranks(Path path, int world, const Body& body, milliseconds timeout = milliseconds(20000)) {
  auto store = std::make_shared<MemoryStore>();
  testing::run_rank_threads(world, [&](int r) {
    GlooOptions o;
    o.timeout = timeout;
    use_path(path, o);
    auto comm = make_gloo_communicator(store, r, world, o);
    body(*comm, r);
  });
}

class Gloo : public ::testing::TestWithParam<Path> {};
INSTANTIATE_TEST_SUITE_P(Paths, Gloo, ::testing::Values(Path::kTcp, Path::kShm, Path::kAuth),
                         [](const ::testing::TestParamInfo<Path>& p) {
                           return p.param == Path::kShm    ? "Shm"
                                  : p.param == Path::kAuth ? "Auth"
                                                           : "Tcp";
                         });

float value(int rank, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 101) - 50) / 4.0f;
}

std::vector<float> input(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(rank, i);
  return v;
}

float reduce_ref(int world, size_t i, ReduceOp op) {
  float acc = value(0, i);
  for (int r = 1; r < world; ++r)
    acc = op == ReduceOp::kMax ? std::max(acc, value(r, i)) : acc + value(r, i);
  return op == ReduceOp::kMean ? acc / static_cast<float>(world) : acc;
}

const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax};
const size_t kSizes[] = {1, 7, 1001};

TEST_P(Gloo, AllReduceF32) {
  for (int world = 1; world <= 4; ++world) {
    run_ranks(GetParam(), world, [&](Communicator& c, int rank) {
      EXPECT_EQ(c.rank(), rank);
      EXPECT_EQ(c.world_size(), world);
      for (ReduceOp op : kOps) {
        for (size_t n : kSizes) {
          auto x = input(rank, n);
          c.all_reduce(x.data(), n, op);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(x[i], reduce_ref(world, i, op))
                << "op " << int(op) << " n " << n << " i " << i;
          }
        }
      }
    });
  }
}

TEST_P(Gloo, AllGatherF32InAndOutOfPlace) {
  for (int world = 1; world <= 4; ++world) {
    run_ranks(GetParam(), world, [&](Communicator& c, int rank) {
      for (size_t n : kSizes) {
        const auto in = input(rank, n);
        std::vector<float> out(world * n, -1.0f);
        c.all_gather(out.data(), in.data(), n);
        std::vector<float> inplace(world * n, -1.0f);
        std::copy(in.begin(), in.end(), inplace.begin() + rank * n);
        c.all_gather(inplace.data(), inplace.data() + rank * n, n);
        for (int r = 0; r < world; ++r) {
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(out[r * n + i], value(r, i));
            ASSERT_EQ(inplace[r * n + i], value(r, i));
          }
        }
      }
    });
  }
}

// in (world * n): rank r's block b holds value(r, b * n + i); out (n) on rank b is block b reduced.
void check_reduce_scatter(Path path, int world, size_t n, bool in_place) {
  run_ranks(path, world, [&](Communicator& c, int rank) {
    for (ReduceOp op : kOps) {
      auto in = input(rank, world * n);
      std::vector<float> out(n, -1.0f);
      float* dst = in_place ? in.data() + rank * n : out.data();
      c.reduce_scatter(dst, in.data(), n, op);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(dst[i], reduce_ref(world, rank * n + i, op)) << "op " << int(op) << " i " << i;
      }
    }
  });
}

TEST_P(Gloo, ReduceScatterF32) {
  for (int world = 1; world <= 4; ++world) {
    for (size_t n : kSizes) check_reduce_scatter(GetParam(), world, n, false);
    check_reduce_scatter(GetParam(), world, 7, true);
  }
}

TEST_P(Gloo, ReduceScatterF32Big) {
  check_reduce_scatter(GetParam(), 2, 1 << 20, false);
  check_reduce_scatter(GetParam(), 3, (1 << 20) + 3, true);
}

TEST_P(Gloo, AllReduceF32Big) {
  run_ranks(GetParam(), 3, [&](Communicator& c, int rank) {
    const size_t n = (1 << 20) + 5;
    auto x = input(rank, n);
    c.all_reduce(x.data(), n, ReduceOp::kSum);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], reduce_ref(3, i, ReduceOp::kSum)) << i;
  });
}

TEST_P(Gloo, BroadcastF32EveryRoot) {
  for (int world = 1; world <= 4; ++world) {
    run_ranks(GetParam(), world, [&](Communicator& c, int rank) {
      for (int root = 0; root < world; ++root) {
        auto x = input(rank, 1001);
        c.broadcast(x.data(), x.size(), root);
        for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], value(root, i));
      }
    });
  }
}

std::vector<uint16_t> to_half(DType t, const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  convert_from_f32(t, x.data(), h.data(), x.size());
  return h;
}

float half_value(DType t, int rank, size_t i) {
  // Not representable in a few bits, so half rounding is exercised. Division only: a vectorised
  // sin() may differ from the scalar one by an ulp and round to another half value.
  const float v = static_cast<float>(static_cast<int>((i * 37 + rank * 101) % 1000) - 500) / 333.0f;
  const uint16_t h = t == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
  return t == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// Reductions of half types compute in f32 and round once per ring hop: error within
// world * ulp(|partial sums|), with ulp 2^-8 (bf16) or 2^-11 (f16) relative.
void check_half(Path path, DType t, int world) {
  const float eps = t == DType::BF16 ? 1.0f / 256 : 1.0f / 2048;
  run_ranks(path, world, [&](Communicator& c, int rank) {
    const size_t n = 1001;
    std::vector<float> mine(world * n), sum(world * n, 0.0f), mag(world * n, 0.0f);
    for (size_t i = 0; i < world * n; ++i) {
      mine[i] = half_value(t, rank, i);
      for (int r = 0; r < world; ++r) {
        sum[i] += half_value(t, r, i);
        mag[i] += std::fabs(half_value(t, r, i));
      }
    }
    auto tol = [&](size_t i) { return world * eps * mag[i] + 1e-6f; };
    auto back = [&](const std::vector<uint16_t>& h, size_t i) {
      return t == DType::BF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
    };
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
      const float div = op == ReduceOp::kMean ? static_cast<float>(world) : 1.0f;
      auto x = to_half(t, std::vector<float>(mine.begin(), mine.begin() + n));
      c.all_reduce_async(x.data(), n, t, op, nullptr)->wait_host();
      for (size_t i = 0; i < n; ++i) ASSERT_NEAR(back(x, i), sum[i] / div, tol(i) / div) << i;
      auto in = to_half(t, mine);
      std::vector<uint16_t> out(n);
      c.reduce_scatter_async(out.data(), in.data(), n, t, op, nullptr)->wait_host();
      for (size_t i = 0; i < n; ++i) {
        ASSERT_NEAR(back(out, i), sum[rank * n + i] / div, tol(rank * n + i) / div) << i;
      }
    }
    // Max and data movement are exact.
    auto x = to_half(t, std::vector<float>(mine.begin(), mine.begin() + n));
    c.all_reduce_async(x.data(), n, t, ReduceOp::kMax, nullptr)->wait_host();
    for (size_t i = 0; i < n; ++i) {
      float m = half_value(t, 0, i);
      for (int r = 1; r < world; ++r) m = std::max(m, half_value(t, r, i));
      ASSERT_EQ(back(x, i), m);
    }
    const auto in = to_half(t, std::vector<float>(mine.begin(), mine.begin() + n));
    std::vector<uint16_t> all(world * n);
    c.all_gather_async(all.data(), in.data(), n, t, nullptr)->wait_host();
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(back(all, r * n + i), half_value(t, r, i))
            << "world " << world << " r " << r << " i " << i;
    }
    auto b = to_half(t, std::vector<float>(mine.begin(), mine.begin() + n));
    c.broadcast_async(b.data(), n, t, world - 1, nullptr)->wait_host();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(back(b, i), half_value(t, world - 1, i));
  });
}

TEST_P(Gloo, BF16) {
  for (int world = 1; world <= 4; ++world) check_half(GetParam(), DType::BF16, world);
}

TEST_P(Gloo, F16) { check_half(GetParam(), DType::F16, 3); }

TEST_P(Gloo, BarrierAndDoubleAllReduce) {
  run_ranks(GetParam(), 4, [&](Communicator& c, int rank) {
    c.barrier();
    double x[3] = {1.0 + rank, 0.1 * rank, -static_cast<double>(rank)};
    c.all_reduce(x, 3, ReduceOp::kSum);
    EXPECT_EQ(x[0], 10.0);
    EXPECT_NEAR(x[1], 0.6, 1e-12);
    EXPECT_EQ(x[2], -6.0);
    double m[1] = {static_cast<double>(rank)};
    c.all_reduce(m, 1, ReduceOp::kMax);
    EXPECT_EQ(m[0], 3.0);
    double a[1] = {static_cast<double>(rank)};
    c.all_reduce(a, 1, ReduceOp::kMean);
    EXPECT_EQ(a[0], 1.5);
    c.barrier();
  });
}

TEST_P(Gloo, AsyncOpsRunInIssueOrderAndWaitOutOfOrder) {
  const int world = 3;
  const size_t n = 100003;
  run_ranks(GetParam(), world, [&](Communicator& c, int rank) {
    auto a = input(rank, n);
    const auto g_in = input(rank, n);
    std::vector<float> g(world * n);
    const auto rs_in = input(rank, world * n);
    std::vector<float> rs(n);
    std::vector<float> b = input(rank, n);
    auto w1 = c.all_reduce_async(a.data(), n, DType::F32, ReduceOp::kSum, nullptr);
    auto w2 = c.all_gather_async(g.data(), g_in.data(), n, DType::F32, nullptr);
    auto w3 =
        c.reduce_scatter_async(rs.data(), rs_in.data(), n, DType::F32, ReduceOp::kSum, nullptr);
    auto w4 = c.broadcast_async(b.data(), n, DType::F32, 1, nullptr);
    // Same buffer twice: the second all-reduce must see the first's result (issue order).
    auto w5 = c.all_reduce_async(a.data(), n, DType::F32, ReduceOp::kMax, nullptr);
    w4->wait_host();
    w2->wait_host();
    w5->wait_host();
    w3->wait_host();
    w1->wait_host();
    w1->wait_host();  // waiting twice is harmless
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(a[i], reduce_ref(world, i, ReduceOp::kSum));
      ASSERT_EQ(b[i], value(1, i));
      ASSERT_EQ(rs[i], reduce_ref(world, rank * n + i, ReduceOp::kSum));
      for (int r = 0; r < world; ++r) ASSERT_EQ(g[r * n + i], value(r, i));
    }
  });
}

TEST_P(Gloo, SubGroups) {
  run_ranks(GetParam(), 4, [&](Communicator& c, int rank) {
    const char* transports[] = {"gloo-tcp lo 127.0.0.1", "gloo-tcp lo 127.0.0.1 shm",
                                "gloo-tcp+auth lo 127.0.0.1"};
    EXPECT_EQ(c.transport(), transports[static_cast<int>(GetParam())]);
    // What the group reports, field by field: a requirement reads these, not the text.
    const TransportInfo t = c.transport_info();
    EXPECT_EQ(t.library, CommLibrary::kGloo);
    EXPECT_EQ(t.shm_lane, GetParam() == Path::kShm);
    EXPECT_EQ(t.authenticated, GetParam() == Path::kAuth);
    EXPECT_FALSE(t.staged);
    EXPECT_TRUE(transport_satisfies(t, TransportKind::kGlooTcp));
    EXPECT_TRUE(transport_satisfies(t, TransportKind::kLoopback));
    EXPECT_FALSE(transport_satisfies(t, TransportKind::kSocket));
    // Hybrid sharding: intra-node {0,1},{2,3}, inter-node {0,2},{1,3}.
    const int node = rank / 2, local = rank % 2;
    auto intra = c.split(node == 0 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}, "intra");
    auto inter = c.split(local == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}, "inter");
    ASSERT_EQ(intra->rank(), local);
    ASSERT_EQ(intra->world_size(), 2);
    ASSERT_EQ(inter->rank(), node);
    const size_t n = 1001;
    auto x = input(rank, n);
    intra->all_reduce(x.data(), n, ReduceOp::kSum);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(x[i], value(2 * node, i) + value(2 * node + 1, i));
    }
    inter->all_reduce(x.data(), n, ReduceOp::kSum);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], reduce_ref(4, i, ReduceOp::kSum));
    std::vector<float> g(2 * n);
    const auto in = input(rank, n);
    intra->all_gather(g.data(), in.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(g[n + i], value(2 * node + 1, i));
    // Both sub-groups and the parent stay usable, interleaved.
    c.barrier();
    auto again = c.split(node == 0 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}, "intra");
    double one[1] = {1.0};
    again->all_reduce(one, 1, ReduceOp::kSum);
    EXPECT_EQ(one[0], 2.0);
    auto self = c.split({rank}, "self");
    x = input(rank, n);
    self->all_reduce(x.data(), n, ReduceOp::kSum);
    EXPECT_EQ(x[3], value(rank, 3));
  });
}

// A rank whose communicator is gone: the others' next collective fails promptly (its sockets
// closed), naming it, and the communicator then refuses further work instead of hanging.
TEST_P(Gloo, DeadPeerIsNamed) {
  // As run_worker does: a write to the dead rank's closed socket must fail the collective, not
  // kill this whole test process with SIGPIPE (it did, now and then, under load).
  ::signal(SIGPIPE, SIG_IGN);
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::string> errors(3), after(3);
  std::vector<double> seconds(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions o;
      o.timeout = milliseconds(2000);
      use_path(GetParam(), o);
      auto c = make_gloo_communicator(store, r, 3, o);
      std::vector<float> x(1000, 1.0f);
      c->all_reduce(x.data(), x.size(), ReduceOp::kSum);
      if (r == 2) return;  // rank 2 dies: its communicator is destroyed
      const auto start = std::chrono::steady_clock::now();
      try {
        c->all_reduce(x.data(), x.size(), ReduceOp::kSum);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
      seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      try {
        c->barrier();
      } catch (const Error& e) {
        after[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("gloo all_reduce #2 (group world, rank " + std::to_string(r) +
                             " of 3) failed after"),
              std::string::npos)
        << errors[r];
    EXPECT_NE(errors[r].find("rank 2 did not arrive (last seen at #1)"), std::string::npos)
        << errors[r];
    EXPECT_LT(seconds[r], 4.0);
    EXPECT_NE(after[r].find("barrier #3"), std::string::npos) << after[r];
    EXPECT_NE(after[r].find("not run"), std::string::npos) << after[r];
  }
}

// A rank that is alive but never calls: the others time out and name it.
TEST_P(Gloo, HungPeerTimesOut) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::string> errors(3);
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions o;
      o.timeout = milliseconds(1500);
      use_path(GetParam(), o);
      auto c = make_gloo_communicator(store, r, 3, o);
      std::vector<float> g(3 * 10);
      std::vector<float> x(10, 1.0f);
      c->all_gather(g.data(), x.data(), 10);
      if (r == 1) {
        while (finished < 2) std::this_thread::sleep_for(milliseconds(10));
        return;
      }
      try {
        c->all_gather(g.data(), x.data(), 10);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
      ++finished;
    });
  }
  for (auto& t : threads) t.join();
  for (int r : {0, 2}) {
    EXPECT_NE(errors[r].find("gloo all_gather #2"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("rank 1 did not arrive (last seen at #1)"), std::string::npos)
        << errors[r];
  }
}

TEST_P(Gloo, RendezvousTimeoutNamesTheGroup) {
  GlooOptions o;
  o.timeout = milliseconds(300);
  use_path(GetParam(), o);
  o.group_name = "job7";
  try {
    make_gloo_communicator(std::make_shared<MemoryStore>(), 0, 2, o);
    FAIL() << "rank 1 never joined";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("gloo rendezvous of group job7 (rank 0 of 2) failed"), std::string::npos) << m;
    EXPECT_NE(m.find("job7/host/1"), std::string::npos) << m;
  }
}

TEST_P(Gloo, DISABLED_Bandwidth64MiB) {
  const size_t n = (64 << 20) / 4;
  run_ranks(GetParam(), 2, [&](Communicator& c, int rank) {
    std::vector<float> x(n, 1.0f), g(2 * n);
    auto time = [&](const char* what, const std::function<void()>& f) {
      f();
      c.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < 5; ++i) f();
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 5;
      if (rank == 0)
        std::printf("%s 64 MiB, 2 ranks: %.1f ms, algbw %.2f GB/s\n", what, s * 1e3,
                    (n * 4.0) / s / 1e9);
    };
    time("all_reduce", [&] { c.all_reduce(x.data(), n, ReduceOp::kSum); });
    time("all_gather", [&] { c.all_gather(g.data(), x.data(), n / 2); });
    time("reduce_scatter", [&] { c.reduce_scatter(x.data(), g.data(), n / 2, ReduceOp::kSum); });
  });
}

}  // namespace
}  // namespace kiln
