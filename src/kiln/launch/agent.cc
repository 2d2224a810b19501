#include "kiln/launch/agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <thread>

#include "kiln/base/error.h"
#include "kiln/base/json.h"
#include "kiln/base/log.h"
#include "kiln/base/stop_request.h"
#include "kiln/comm/tcp_store.h"
#include "kiln/comm/watchdog.h"
#include "kiln/kernels/device/host_cpu.h"
#include "kiln/launch/formation.h"
#include "kiln/launch/step_board.h"
#include "kiln/launch/store_token.h"
#include "kiln/launch/worker_output.h"

extern char** environ;

namespace kiln {

namespace {

// The agent's signal state (a handler may only touch lock-free atomics and volatile
// sig_atomic_t): the last signal, and how many stop requests arrived. One user action often
// delivers several copies of a signal: Ctrl-C and `kill -- -PGID` reach every process of the
// group, the private network's supervisor forwards its own copy, `timeout` and systemd signal
// the process and then its group. Copies within kSignalCopies of a request's first copy are that
// request; only a signal after that asks again (and cuts a graceful stop short).
constexpr int64_t kSignalCopiesNs = 2'000'000'000;
volatile std::sig_atomic_t g_signal = 0;
std::atomic<int64_t> g_requests{0};
std::atomic<int64_t> g_request_ns{0};  // when the latest request's first copy arrived
static_assert(std::atomic<int64_t>::is_always_lock_free);
void on_signal(int sig) {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  const int64_t now = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  const int64_t first = g_request_ns.load(std::memory_order_relaxed);
  if (g_requests.load(std::memory_order_relaxed) == 0 || now - first > kSignalCopiesNs) {
    g_request_ns.store(now, std::memory_order_relaxed);
    g_requests.fetch_add(1, std::memory_order_relaxed);
  }
  g_signal = sig;
}

struct Worker {
  explicit Worker(int r) : rank(r), out(r) {}
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1;  // stdout and stderr of the worker, merged
  WorkerOutput out;
  bool exited = false;
  int status = 0;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return fmt::format("signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  return "unknown status";
}

// Reads what `w` wrote (forwarded by WorkerOutput); false once its output has ended.
bool drain_fd(Worker& w) {
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(w.out_fd, buf, sizeof buf);
    if (n > 0) {
      w.out.append(std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n == 0) {
      ::close(w.out_fd);
      w.out_fd = -1;
      w.out.finish();
      return false;
    }
    if (errno == EINTR) continue;
    break;  // EAGAIN
  }
  return true;
}

pid_t spawn(const AgentSpec& s, int local_rank, int port, int attempt, int step_fd, int* out_fd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail("agent: pipe failed: {}", std::strerror(errno));
  const int rank = s.node_rank * s.nproc_per_node + local_rank;
  const int world = s.nnodes * s.nproc_per_node;
  const int threads = worker_threads(s.threads_per_worker, s.nproc_per_node);
  std::vector<std::string> env = {
      "KILN_WORKER=1",
      fmt::format("RANK={}", rank),
      fmt::format("WORLD_SIZE={}", world),
      fmt::format("LOCAL_RANK={}", local_rank),
      fmt::format("LOCAL_WORLD_SIZE={}", s.nproc_per_node),
      fmt::format("GROUP_RANK={}", s.node_rank),
      fmt::format("KILN_NNODES={}", s.nnodes),
      fmt::format("MASTER_ADDR={}", s.master_addr),
      fmt::format("MASTER_PORT={}", port),
      fmt::format("KILN_STORE_PORT={}", port),
      fmt::format("KILN_STORE_TOKEN={}", s.token),
      fmt::format("KILN_TOPOLOGY_SOURCE={}", s.topology_source),
      fmt::format("OMP_NUM_THREADS={}", threads),
      fmt::format("OPENBLAS_NUM_THREADS={}", threads),
      fmt::format("KILN_RESTART_ATTEMPT={}", attempt),
      fmt::format("KILN_STEP_FD={}", step_fd),
  };
  // Everything the child needs is built before fork: the agent may have threads (the store
  // server), so the child must not allocate between fork and exec.
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    bool overridden = false;
    for (const auto& o : env)
      overridden = overridden || o.compare(0, key.size() + 1, key + "=") == 0;
    if (!overridden) env.push_back(kv);
  }
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = {"kiln"};
  args.insert(args.end(), s.worker_args.begin(), s.worker_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  static const char kExecFailed[] = "kiln agent: cannot exec /proc/self/exe\n";

  const pid_t agent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) fail("agent: fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    // A worker dies with its agent (kill -9 included) instead of training on as an orphan. The
    // signal follows the thread that forked, the agent's main thread, which lives as long as the
    // agent; it survives exec. The agent may have died before prctl: then the parent is no
    // longer the agent.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != agent) ::_exit(128 + SIGKILL);
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::execve("/proc/self/exe", argv.data(), envp.data());
    (void)!::write(STDERR_FILENO, kExecFailed, sizeof kExecFailed - 1);
    ::_exit(127);
  }
  ::close(fds[1]);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  *out_fd = fds[0];
  return pid;
}

void signal_all(std::vector<Worker>& ws, int sig) {
  for (auto& w : ws) {
    if (!w.exited && w.pid > 0) ::kill(w.pid, sig);
  }
}

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Store keys the agents share (node 0's store), per attempt A:
//   kiln/agent/budget          node 0's failure.max_restarts: the one budget for every node
//   kiln/agent/A/failed        set by the first agent whose worker failed: every agent stops
//   kiln/agent/A/node/K        node K's record of the attempt (JSON: its first failure)
//   kiln/agent/A/stopped       count of agents whose workers are all down
//   kiln/agent/A/decision      node 0's verdict (JSON: restart or stop, with the history)
//   kiln/agent/A/done, /ack    success and final acknowledgements, so node 0 keeps the store
//                              up until every agent has read what it needs
std::string agent_key(int attempt, const std::string& what) {
  return fmt::format("kiln/agent/{}/{}", attempt, what);
}
std::string group_ns(int attempt) { return fmt::format("kiln/world-{}", attempt); }

int64_t wall_ms() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// How likely a failed worker is the cause rather than a casualty: a rank whose collective
// failed (its communicator marks "<group>/failed/<rank>") failed because of another; a signal
// (killed, aborted) is a cause more surely than an error exit.
int failure_score(Store& ctl, int attempt, int rank, int status) {
  bool casualty = false;
  try {
    casualty = ctl.check({fmt::format("world-{}/failed/{}", attempt, rank)});
  } catch (const std::exception&) {
  }
  return (casualty ? 0 : 2) + (WIFSIGNALED(status) ? 1 : 0);
}

struct AttemptRecord {
  int rc = 0;
  bool failed = false;  // a worker of this node failed on its own (not torn down by us)
  int rank = -1;
  int score = 0;  // failure_score()
  int64_t time_ms = 0;
  std::string failure;  // "rank 1 (pid 42) failed with signal 9 (Killed)"
  bool remote_stop = false;
  int signal = 0;
  bool stopped = false;  // every local worker exited with kExitStopped (graceful_stop)
  int64_t step = -1;     // the step the failed rank last began (StepBoard), -1: unknown
};

// Spawns and watches one attempt of the group. Returns when every local worker has exited:
// rc 0 when all succeeded; otherwise the group was torn down because a local worker failed,
// another node's did (kiln/agent/A/failed), or the agent got a signal.
AttemptRecord run_group(const AgentSpec& s, int port, int attempt, Store& ctl, StepBoard& steps) {
  AgentSpec a = s;
  if (attempt > 0) {
    a.worker_args.insert(a.worker_args.end(), s.restart_args.begin(), s.restart_args.end());
  }
  steps.reset();
  std::vector<Worker> ws;
  ws.reserve(s.nproc_per_node);
  for (int l = 0; l < s.nproc_per_node; ++l) {
    ws.emplace_back(s.node_rank * s.nproc_per_node + l);
    ws[l].pid = spawn(a, l, port, attempt, steps.fd(), &ws[l].out_fd);
  }

  AttemptRecord rec;
  bool tearing_down = false;
  auto teardown_deadline = Clock::time_point::max();
  auto next_remote_check = Clock::now();
  // A broken group is torn down, not asked to checkpoint: workers that honour SIGTERM as a stop
  // request (graceful_stop) would finish their step first, and a hung one never would.
  const int failure_signal = s.graceful_stop ? SIGKILL : SIGTERM;
  int stopped = 0;            // workers that exited with kExitStopped
  int succeeded = 0;          // workers that exited 0: the run completed
  int64_t requests_seen = 0;  // g_requests when the graceful stop began
  Worker* failed = nullptr;   // the local culprit, once known
  auto teardown = [&](int sig) {
    signal_all(ws, sig);
    tearing_down = true;
    teardown_deadline = Clock::now() + milliseconds(static_cast<int64_t>(s.grace_s * 1000));
  };
  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<Worker*> owners;
    for (auto& w : ws) {
      if (w.out_fd >= 0) {
        pfds.push_back({w.out_fd, POLLIN, 0});
        owners.push_back(&w);
      }
    }
    if (!pfds.empty()) ::poll(pfds.data(), pfds.size(), 100);
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) drain_fd(*owners[i]);
    }
    if (pfds.empty()) std::this_thread::sleep_for(milliseconds(50));

    if (g_signal != 0 && !tearing_down && s.graceful_stop) {
      KILN_LOG_WARN(
          "agent: received signal {}: the workers finish their step, commit a checkpoint and stop "
          "(failure.sigterm_grace_s={})",
          static_cast<int>(g_signal), s.sigterm_grace_s);
      rec.signal = g_signal;
      rec.rc = 128 + g_signal;  // unless every worker stops in time (below)
      rec.failure = fmt::format(
          "node {} stopped by signal {} before every worker committed its stop checkpoint "
          "(failure.sigterm_grace_s)",
          s.node_rank, static_cast<int>(g_signal));
      requests_seen = g_requests.load();
      teardown(SIGTERM);
      teardown_deadline =
          Clock::now() + milliseconds(static_cast<int64_t>(s.sigterm_grace_s * 1000));
    } else if (rec.signal != 0 && s.graceful_stop && g_requests.load() > requests_seen &&
               teardown_deadline != Clock::time_point::max()) {
      KILN_LOG_WARN("agent: a second stop request: killing the workers now");
      teardown_deadline = Clock::now();
    }
    if (g_signal != 0 && !tearing_down) {
      KILN_LOG_WARN("agent: received signal {}, stopping the workers", static_cast<int>(g_signal));
      rec.signal = g_signal;
      rec.rc = 128 + g_signal;
      rec.failure =
          fmt::format("node {} stopped by signal {}", s.node_rank, static_cast<int>(g_signal));
      teardown(g_signal);
      try {
        ctl.set(agent_key(attempt, "failed"), to_bytes(rec.failure));
      } catch (const std::exception&) {
      }
    }
    // Another node's worker failed: stop ours too, so every node restarts together.
    if (s.nnodes > 1 && !tearing_down && Clock::now() >= next_remote_check) {
      next_remote_check = Clock::now() + milliseconds(250);
      std::string why;
      try {
        if (ctl.check({agent_key(attempt, "failed")})) {
          why = to_string(ctl.get(agent_key(attempt, "failed"), milliseconds(1000)));
        }
      } catch (const std::exception&) {
        // The store going away while workers finish is not this agent's failure to report.
      }
      if (!why.empty()) {
        KILN_LOG_WARN("agent: {}; stopping the workers of node {}", why, s.node_rank);
        rec.remote_stop = true;
        rec.rc = 1;
        teardown(failure_signal);
      }
    }
    bool all_done = true;
    Worker* culprit = nullptr;  // of the workers that failed in this sweep, the likeliest cause
    int culprit_score = -1;
    for (auto& w : ws) {
      if (w.exited) continue;
      int status = 0;
      pid_t r = ::waitpid(w.pid, &status, WNOHANG);
      if (r == w.pid) {
        w.exited = true;
        w.status = status;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        const bool stop =
            s.graceful_stop && WIFEXITED(status) && WEXITSTATUS(status) == kExitStopped;
        stopped += stop ? 1 : 0;
        succeeded += ok ? 1 : 0;
        const int score = failure_score(ctl, attempt, w.rank, status);
        // While the workers stop on request, one that exits with an error of its own (a stop
        // checkpoint it could not write) is the group's failure, not the grace period's; a
        // worker the teardown signalled is not.
        const bool own_error = !tearing_down || (rec.signal != 0 && s.graceful_stop &&
                                                 !rec.failed && WIFEXITED(status));
        if (!ok && !stop && own_error && score > culprit_score) {
          culprit = &w;
          culprit_score = score;
        }
      } else {
        all_done = false;
      }
    }
    if (culprit != nullptr) {
      failed = culprit;
      rec.failed = true;
      rec.rank = culprit->rank;
      rec.step = steps.get(culprit->rank - s.node_rank * s.nproc_per_node);
      rec.score = culprit_score;
      rec.time_ms = wall_ms();
      rec.rc = 1;
      rec.failure = fmt::format("rank {} (pid {}{}) failed with {}", culprit->rank, culprit->pid,
                                s.nnodes > 1 ? fmt::format(", node {}", s.node_rank) : "",
                                describe_status(culprit->status));
      KILN_LOG_WARN("agent: {}; stopping the group", rec.failure);
      try {
        if (!ctl.check({agent_key(attempt, "failed")})) {
          ctl.set(agent_key(attempt, "failed"), to_bytes(rec.failure));
        }
      } catch (const std::exception&) {
      }
      teardown(failure_signal);
    }
    if (tearing_down && Clock::now() > teardown_deadline) {
      signal_all(ws, SIGKILL);
      teardown_deadline = Clock::time_point::max();
    }
    if (all_done && stopped == s.nproc_per_node) {
      rec.stopped = true;
      rec.rc = kExitStopped;
    }
    // Every worker completed (a stop request that came after the last step, during the final
    // evaluation or save, changes nothing): the run succeeded.
    if (all_done && succeeded == s.nproc_per_node && !rec.failed && !rec.remote_stop) rec.rc = 0;
    if (all_done) {
      bool open = false;
      for (auto& w : ws) {
        if (w.out_fd >= 0) open = open || drain_fd(w);
      }
      if (!open) break;
    }
  }
  // Each worker's error once (the ranks that reported it listed), and the culprit's own message
  // on the failure line.
  std::vector<const WorkerOutput*> outs;
  for (const auto& w : ws) outs.push_back(&w.out);
  print_held_errors(outs);
  if (failed != nullptr && !failed->out.error().empty()) {
    rec.failure += ": " + failed->out.error();
  }
  return rec;
}

// Polls until the integer at `key` reaches `n`; false on timeout.
bool wait_count(Store& ctl, const std::string& key, int64_t n, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    try {
      if (ctl.add(key, 0) >= n) return true;
    } catch (const std::exception&) {
      return false;
    }
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(100));
  }
}

// What an attempt's failure was, for the history: the hang line when the workers reported a
// hang, else the likeliest cause (failure_score), earliest first, of any node, with the last step
// the failed rank (or, when it never said, any rank) began.
std::string describe_attempt(const AgentSpec& s, Store& ctl, int attempt,
                             const std::vector<Json>& records) {
  const int world = s.nnodes * s.nproc_per_node;
  if (auto hang = hang_summary(ctl, group_ns(attempt), world, milliseconds(2000))) {
    std::string out = *hang;
    if (!s.hang_dir.empty()) {
      out += fmt::format("; reports: {}/rank-*.txt{}", s.hang_dir,
                         s.nnodes > 1 ? " on each node" : "");
    }
    return out;
  }
  const Json* first = nullptr;
  for (const auto& r : records) {
    if (!r.value("failed", false)) continue;
    if (first == nullptr || r.value("score", 0) > first->value("score", 0) ||
        (r.value("score", 0) == first->value("score", 0) &&
         r.value("time_ms", int64_t{0}) < first->value("time_ms", int64_t{0}))) {
      first = &r;
    }
  }
  if (first == nullptr) {
    for (const auto& r : records) {
      if (!r.value("failure", "").empty()) return r.value("failure", "");
    }
    return "the group stopped";
  }
  std::string out = first->value("failure", "");
  int64_t step = first->value("step", int64_t{-1});
  if (step < 0) step = published_step(ctl, group_ns(attempt), first->value("rank", 0));
  if (step < 0) {
    for (int r = 0; r < world; ++r)
      step = std::max(step, published_step(ctl, group_ns(attempt), r));
  }
  if (step >= 0) out += fmt::format(", last step {}", step);
  return out;
}

}  // namespace

int run_agent(const AgentSpec& s) {
  if (s.nproc_per_node < 1 || s.nproc_per_node > 1024) {
    fail("dist.nproc_per_node is {}; it must be in [1, 1024]", s.nproc_per_node);
  }
  std::unique_ptr<TcpStoreServer> server;
  int port = s.master_port;
  if (s.node_rank == 0) {
    // Beyond loopback only when another host must reach it (launch() then required the
    // operator's KILN_STORE_TOKEN).
    const bool remote = s.nnodes > 1 && !is_loopback_address(s.master_addr);
    server =
        std::make_unique<TcpStoreServer>(remote ? "0.0.0.0" : "127.0.0.1", s.master_port, s.token);
    port = server->port();
  } else if (port <= 0) {
    fail("--master-port is required on node {} (the store runs on node 0)", s.node_rank);
  }
  KILN_LOG_INFO("agent: node {}/{} starting {} worker(s); store {}:{}", s.node_rank, s.nnodes,
                s.nproc_per_node, s.master_addr, port);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  // The agents' own connection to the store: failure notices, the budget, the decision. Node 0
  // may start late (wait_limit to connect); requests are small, so a store that stops answering
  // (a cut link) is an error after 10 s rather than a blocked agent.
  const auto wait_limit =
      std::max(milliseconds(30000), milliseconds(static_cast<int64_t>(s.timeout_s * 2000)));
  // How long node 0 waits for every agent to stop its workers (SIGTERM, the grace period,
  // SIGKILL) and record the attempt; the others wait that long plus a margin for the decision.
  const auto agree_limit = milliseconds(static_cast<int64_t>((s.grace_s + 5) * 1000));
  TcpStoreOptions so;
  so.io_timeout = milliseconds(10000);
  TcpStore ctl(s.node_rank == 0 ? "127.0.0.1" : s.master_addr, port, s.token, wait_limit, so);

  int max_restarts = s.max_restarts;
  if (s.node_rank == 0) {
    ctl.set("kiln/agent/budget", to_bytes(std::to_string(s.max_restarts)));
  } else {
    max_restarts = std::stoi(to_string(ctl.get("kiln/agent/budget", wait_limit)));
    if (max_restarts != s.max_restarts) {
      KILN_LOG_WARN("agent: node 0's failure.max_restarts={} holds for every node (this node: {})",
                    max_restarts, s.max_restarts);
    }
  }
  // Before any worker starts: every node runs the same shape and recipe (formation.h).
  if (s.nnodes > 1) {
    NodeShape shape{s.node_rank, s.nnodes, s.nproc_per_node, s.identity};
    const std::string differ = agree_on_formation(ctl, shape, wait_limit);
    if (!differ.empty()) {
      std::fprintf(stderr, "kiln: error: %s\n", differ.c_str());
      return 1;
    }
  }
  StepBoard steps = StepBoard::create(s.nproc_per_node);
  std::vector<std::string> history;
  for (int attempt = 0;; ++attempt) {
    const AttemptRecord rec = run_group(s, port, attempt, ctl, steps);
    bool failed_elsewhere = false;
    if (rec.rc == 0 || rec.stopped) {
      try {
        failed_elsewhere = s.nnodes > 1 && ctl.check({agent_key(attempt, "failed")});
      } catch (const std::exception&) {
      }
    }
    if ((rec.rc == 0 || rec.stopped) && !failed_elsewhere) {
      try {
        ctl.add(agent_key(attempt, "done"), 1);
      } catch (const std::exception&) {
        // Node 0 already finished and took the store with it: nothing left to tell.
      }
      // Node 0 serves the store: it stays until every agent has finished with it.
      if (s.node_rank == 0)
        wait_count(ctl, agent_key(attempt, "done"), s.nnodes, milliseconds(10000));
      return rec.stopped ? kExitStopped : 0;
    }
    // Every agent records its attempt, then node 0 decides for all.
    const Json mine{{"node", s.node_rank},    {"failed", rec.failed},   {"rank", rec.rank},
                    {"time_ms", rec.time_ms}, {"failure", rec.failure}, {"signal", rec.signal},
                    {"score", rec.score},     {"step", rec.step}};
    Json decision;
    int answered = s.nnodes;
    if (s.node_rank == 0) {
      ctl.set(agent_key(attempt, "node/0"), to_bytes(mine.dump()));
      ctl.add(agent_key(attempt, "stopped"), 1);
      const bool all = wait_count(ctl, agent_key(attempt, "stopped"), s.nnodes, agree_limit);
      std::vector<Json> records;
      std::vector<int> silent;
      bool signalled = rec.signal != 0;
      for (int n = 0; n < s.nnodes; ++n) {
        const std::string key = agent_key(attempt, fmt::format("node/{}", n));
        if (!ctl.check({key})) {
          silent.push_back(n);
          continue;
        }
        records.push_back(parse_json(to_string(ctl.get(key, milliseconds(1000))), key));
        signalled = signalled || records.back().value("signal", 0) != 0;
      }
      answered = s.nnodes - static_cast<int>(silent.size());
      std::string what = describe_attempt(s, ctl, attempt, records);
      if (!all) {
        std::string nodes;
        for (int n : silent) nodes += (nodes.empty() ? "" : ", ") + std::to_string(n);
        what += fmt::format("; the agent of node {} did not answer", nodes);
      }
      history.push_back(max_restarts > 0 ? fmt::format("attempt {}: {}", attempt + 1, what) : what);
      const bool restart = all && !signalled && attempt < max_restarts;
      decision =
          Json{{"restart", restart}, {"history", history}, {"hang", what.starts_with("hang: ")}};
      ctl.set(agent_key(attempt, "decision"), to_bytes(decision.dump()));
    } else {
      const std::string key = agent_key(attempt, "decision");
      try {
        ctl.set(agent_key(attempt, fmt::format("node/{}", s.node_rank)), to_bytes(mine.dump()));
        ctl.add(agent_key(attempt, "stopped"), 1);
        decision = parse_json(to_string(ctl.get(key, agree_limit + milliseconds(10000))), key);
      } catch (const std::exception& e) {
        std::fprintf(stderr,
                     "kiln: error: worker group failed: %s; no restart decision from node 0: %s\n",
                     rec.failure.empty() ? "stopped" : rec.failure.c_str(), e.what());
        return rec.rc != 0 ? rec.rc : 1;
      }
      history = decision["history"].get<std::vector<std::string>>();
    }
    if (decision.value("restart", false)) {
      KILN_LOG_WARN("agent: restarting the group from the newest checkpoint ({} of {}): {}",
                    attempt + 1, max_restarts, history.back());
      continue;
    }
    try {
      ctl.add(agent_key(attempt, "ack"), 1);
    } catch (const std::exception&) {
      // Node 0 is gone already; the verdict is printed below all the same.
    }
    const std::string last = history.back();
    const size_t colon = max_restarts > 0 ? last.find(": ") : std::string::npos;
    const std::string last_what = colon == std::string::npos ? last : last.substr(colon + 2);
    if (decision.value("hang", false)) {
      std::string earlier;
      for (size_t i = 0; i + 1 < history.size(); ++i)
        earlier += (earlier.empty() ? "" : "; ") + history[i];
      std::fprintf(stderr, "kiln: error: %s%s\n", last_what.c_str(),
                   earlier.empty()
                       ? ""
                       : fmt::format(" (after {} restart(s); {})", attempt, earlier).c_str());
    } else {
      std::string all;
      for (const auto& h : history) all += (all.empty() ? "" : "; ") + h;
      std::fprintf(stderr, "kiln: error: worker group failed%s: %s\n",
                   max_restarts > 0 ? fmt::format(" after {} restart(s)", attempt).c_str() : "",
                   all.c_str());
    }
    if (s.node_rank == 0) wait_count(ctl, agent_key(attempt, "ack"), answered, milliseconds(10000));
    return rec.rc != 0 ? rec.rc : 1;
  }
}

}  // namespace kiln
