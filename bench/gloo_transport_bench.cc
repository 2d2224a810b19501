// Gloo's tcp transport against kiln's authenticated one (gloo-tcp+auth): all-reduce and
// all-gather throughput over loopback, TCP only (GlooOptions::same_host_shm off), every rank a
// thread of this process. The two transports alternate round by round, so drift in the
// machine's load hits both alike; each figure is the median over rounds of one round's mean.
// Usage: gloo_transport_bench [rounds=5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/store.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  const char* op;
  size_t bytes;  // per rank: the all-reduce's buffer, the all-gather's contribution
  int world;
};

// Seconds per operation (mean over `iters`, after one warm-up) on rank 0 of a fresh group.
double time_case(const Case& c, bool authenticated, int iters) {
  auto store = std::make_shared<kiln::MemoryStore>();
  std::vector<double> secs(c.world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < c.world; ++r) {
    ranks.emplace_back([&, r] {
      kiln::GlooOptions o;
      o.same_host_shm = false;
      o.timeout = std::chrono::milliseconds(120000);
      if (authenticated) {
        o.pair_token = "gloo-transport-bench-token";
        o.authenticate = kiln::PairAuth::kOn;
      }
      auto comm = kiln::make_gloo_communicator(store, r, c.world, o);
      const size_t n = c.bytes / 4;
      std::vector<float> x(n, 1.0f), g(n * c.world);
      std::function<void()> op = [&] { comm->all_reduce(x.data(), n, kiln::ReduceOp::kSum); };
      if (std::string(c.op) == "all_gather") op = [&] { comm->all_gather(g.data(), x.data(), n); };
      op();
      comm->barrier();
      const auto start = Clock::now();
      for (int i = 0; i < iters; ++i) op();
      comm->barrier();
      secs[r] = std::chrono::duration<double>(Clock::now() - start).count() / iters;
    });
  }
  for (auto& t : ranks) t.join();
  return secs[0];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const std::vector<Case> cases = {
      {"all_reduce", 1 << 20, 2},  {"all_reduce", 64 << 20, 2}, {"all_gather", 1 << 20, 2},
      {"all_gather", 64 << 20, 2}, {"all_reduce", 1 << 20, 4},  {"all_reduce", 64 << 20, 4},
      {"all_gather", 1 << 20, 4},  {"all_gather", 64 << 20, 4},
  };
  std::printf("%-10s %6s %5s | %12s %12s | %12s %12s | %6s\n", "op", "size", "ranks", "tcp ms",
              "tcp GB/s", "auth ms", "auth GB/s", "auth/tcp");
  for (const Case& c : cases) {
    const int iters = c.bytes >= (8u << 20) ? 3 : 20;
    std::vector<double> tcp, auth;
    for (int r = 0; r < rounds; ++r) {
      // Alternate which goes first, too.
      if (r % 2 == 0) {
        tcp.push_back(time_case(c, false, iters));
        auth.push_back(time_case(c, true, iters));
      } else {
        auth.push_back(time_case(c, true, iters));
        tcp.push_back(time_case(c, false, iters));
      }
    }
    const double t = median(tcp), a = median(auth);
    const double gb = static_cast<double>(c.bytes) / 1e9;  // algorithm bandwidth: buffer / time
    std::printf("%-10s %5zuM %5d | %12.2f %12.2f | %12.2f %12.2f | %6.2f\n", c.op, c.bytes >> 20,
                c.world, t * 1e3, gb / t, a * 1e3, gb / a, a / t);
    std::fflush(stdout);
  }
  return 0;
}
