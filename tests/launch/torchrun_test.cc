// `torchrun --no-python --nproc-per-node N kiln train RECIPE`: torchrun is not installed here, so
// the test starts the N processes itself with exactly the environment torchrun's local elastic
// agent gives each worker (torch/distributed/elastic/agent/server/local_elastic_agent.py), while
// holding a listening socket on MASTER_PORT as torchrun's own store does. Every rank must join
// (kiln's store one port above), train, and give the losses a kiln-launched run of the same
// world size gives.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>
#include <thread>
#include <vector>

#include "common/loopback.h"
#include "common/run_kiln.h"
#include "common/run_losses.h"
#include "common/tiny_run.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"

namespace kiln {
namespace {

// Listens on a free loopback port, as torchrun's TCPStore does on MASTER_PORT, chosen so that the
// port above it (kiln's store) is free too: an ephemeral port's neighbour may be another test's
// connection.
class AgentStoreSocket {
 public:
  AgentStoreSocket() {
    for (int attempt = 0; attempt < 50; ++attempt) {
      fd_ = testing::bind_loopback(0, 8, &port_);
      EXPECT_GE(fd_, 0);
      if (port_ < 65535 && testing::loopback_port_free(port_ + 1)) return;
      ::close(fd_);
    }
    ADD_FAILURE() << "no loopback port with a free neighbour";
  }
  ~AgentStoreSocket() { ::close(fd_); }
  AgentStoreSocket(const AgentStoreSocket&) = delete;
  AgentStoreSocket& operator=(const AgentStoreSocket&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// What torchrun sets for local rank `r` of `n` on a single node (group 0 of 1).
std::string torchrun_env(int r, int n, int master_port) {
  std::ostringstream e;
  e << "env LOCAL_RANK=" << r << " RANK=" << r << " GROUP_RANK=0 ROLE_RANK=" << r
    << " ROLE_NAME=default LOCAL_WORLD_SIZE=" << n << " WORLD_SIZE=" << n
    << " GROUP_WORLD_SIZE=1 ROLE_WORLD_SIZE=" << n
    << " MASTER_ADDR=127.0.0.1 MASTER_PORT=" << master_port
    << " TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0"
    << " TORCHELASTIC_RUN_ID=kiln-torchrun-test-" << ::getpid()
    << " TORCHELASTIC_USE_AGENT_STORE=True TORCH_NCCL_ASYNC_ERROR_HANDLING=1 OMP_NUM_THREADS=1";
  return e.str();
}

TEST(Torchrun, NoPythonLineTrainsLikeTheKilnLauncher) {
  const fs::path d = testing::setup_tiny_run("kiln_torchrun", "ok", {});
  const std::string recipe = (d / "recipe.yaml").string();
  const AgentStoreSocket agent_store;
  constexpr int kRanks = 2;
  std::vector<testing::CmdResult> res(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      // torchrun --no-python runs the command as given: `kiln train RECIPE`.
      res[r] = testing::run_kiln("train " + recipe + " output.dir=" + (d / "torchrun").string(),
                                 torchrun_env(r, kRanks, agent_store.port()));
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) ASSERT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].out;
  const Json meta = read_json_file(d / "torchrun/run_meta.json");
  EXPECT_EQ(meta.at("topology_source"), "torchrun");
  EXPECT_EQ(meta.at("launcher"), "external");
  EXPECT_EQ(meta.at("world_size"), kRanks);
  EXPECT_TRUE(fs::exists(d / "torchrun/final/model.safetensors"));

  // The same recipe through kiln's own launcher (dist.nproc_per_node: 2).
  const testing::CmdResult own =
      testing::run_kiln("train " + recipe + " output.dir=" + (d / "own").string());
  ASSERT_EQ(own.code, 0) << own.out;
  const std::vector<double> a = testing::run_losses(d / "torchrun");
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a, testing::run_losses(d / "own"));
  fs::remove_all(d);
}

// Ranks started with different recipes (another learning rate would train on with a diverging
// loss) fail once they have joined, every rank with the same line naming the key and both values.
TEST(Torchrun, RanksThatDisagreeFailNamingTheDifference) {
  const fs::path d = testing::setup_tiny_run("kiln_torchrun", "disagree", {});
  const AgentStoreSocket agent_store;
  std::vector<testing::CmdResult> res(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      res[r] = testing::run_kiln("train " + (d / "recipe.yaml").string() +
                                     " output.dir=" + (d / "run").string() +
                                     " optimizer.lr=" + (r == 0 ? "1e-3" : "2e-3"),
                                 torchrun_env(r, 2, agent_store.port()));
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(res[r].code, 1) << "rank " << r << ": " << res[r].out;
    EXPECT_NE(res[r].out.find("kiln: error: the ranks disagree on optimizer.lr: rank 0 has 0.001, "
                              "rank 1 has 0.002 (every rank must train the same recipe)"),
              std::string::npos)
        << "rank " << r << ": " << res[r].out;
  }
  EXPECT_FALSE(fs::exists(d / "run/final"));
  fs::remove_all(d);
}

}  // namespace
}  // namespace kiln
