#include "kiln/launch/agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/dist/tcp_store.h"

extern char** environ;

namespace kiln {

namespace {

volatile std::sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1;  // stdout and stderr of the worker, merged
  std::string partial;
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

// Writes complete lines of `w`'s output with a "[rank N] " prefix; keeps a partial tail.
void forward_output(Worker& w, bool flush_all) {
  size_t start = 0;
  for (;;) {
    size_t nl = w.partial.find('\n', start);
    if (nl == std::string::npos) break;
    std::string line = fmt::format("[rank {}] {}\n", w.rank, w.partial.substr(start, nl - start));
    (void)!::write(STDERR_FILENO, line.data(), line.size());
    start = nl + 1;
  }
  w.partial.erase(0, start);
  if (flush_all && !w.partial.empty()) {
    std::string line = fmt::format("[rank {}] {}\n", w.rank, w.partial);
    (void)!::write(STDERR_FILENO, line.data(), line.size());
    w.partial.clear();
  }
}

bool drain_fd(Worker& w) {
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(w.out_fd, buf, sizeof buf);
    if (n > 0) {
      w.partial.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      ::close(w.out_fd);
      w.out_fd = -1;
      forward_output(w, true);
      return false;
    }
    if (errno == EINTR) continue;
    break;  // EAGAIN
  }
  forward_output(w, false);
  return true;
}

pid_t spawn(const AgentSpec& s, int local_rank, int port, int attempt, int* out_fd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail("agent: pipe failed: {}", std::strerror(errno));
  const int rank = s.node_rank * s.nproc_per_node + local_rank;
  const int world = s.nnodes * s.nproc_per_node;
  int threads = s.threads_per_worker;
  if (threads <= 0) {
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / s.nproc_per_node);
  }
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

  pid_t pid = ::fork();
  if (pid < 0) fail("agent: fork failed: {}", std::strerror(errno));
  if (pid == 0) {
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

}  // namespace

std::string random_token() {
  unsigned char b[16] = {};
  std::ifstream f("/dev/urandom", std::ios::binary);
  f.read(reinterpret_cast<char*>(b), sizeof b);
  if (!f) fail("agent: cannot read /dev/urandom for the job token");
  std::string hex;
  for (unsigned char c : b) hex += fmt::format("{:02x}", c);
  return hex;
}

namespace {

// Spawns and watches one attempt of the group. Returns 0 when every worker succeeded; otherwise
// the group has been torn down, `failure` says why, and the exit status to report is returned.
int run_group(const AgentSpec& s, int port, int attempt, std::string* failure) {
  AgentSpec a = s;
  if (attempt > 0) {
    a.worker_args.insert(a.worker_args.end(), s.restart_args.begin(), s.restart_args.end());
  }
  std::vector<Worker> ws(s.nproc_per_node);
  for (int l = 0; l < s.nproc_per_node; ++l) {
    ws[l].rank = s.node_rank * s.nproc_per_node + l;
    ws[l].pid = spawn(a, l, port, attempt, &ws[l].out_fd);
  }

  int result = 0;
  bool tearing_down = false;
  auto teardown_deadline = std::chrono::steady_clock::time_point::max();
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
    if (pfds.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));

    if (g_signal != 0 && !tearing_down) {
      KILN_LOG_WARN("agent: received signal {}, stopping the workers", static_cast<int>(g_signal));
      signal_all(ws, g_signal);
      tearing_down = true;
      result = 128 + g_signal;
      *failure = fmt::format("stopped by signal {}", static_cast<int>(g_signal));
      teardown_deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(s.grace_s * 1000));
    }
    bool all_done = true;
    for (auto& w : ws) {
      if (w.exited) continue;
      int status = 0;
      pid_t r = ::waitpid(w.pid, &status, WNOHANG);
      if (r == w.pid) {
        w.exited = true;
        w.status = status;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && !tearing_down) {
          *failure = fmt::format("rank {} (pid {}) failed with {}", w.rank, w.pid,
                                 describe_status(status));
          KILN_LOG_WARN("agent: {}; stopping the group", *failure);
          signal_all(ws, SIGTERM);
          tearing_down = true;
          result = 1;
          teardown_deadline = std::chrono::steady_clock::now() +
                              std::chrono::milliseconds(static_cast<int64_t>(s.grace_s * 1000));
        }
      } else {
        all_done = false;
      }
    }
    if (tearing_down && std::chrono::steady_clock::now() > teardown_deadline) {
      signal_all(ws, SIGKILL);
      teardown_deadline = std::chrono::steady_clock::time_point::max();
    }
    if (all_done) {
      bool open = false;
      for (auto& w : ws) {
        if (w.out_fd >= 0) open = open || drain_fd(w);
      }
      if (!open) break;
    }
  }
  return result;
}

}  // namespace

int run_agent(const AgentSpec& s) {
  if (s.nproc_per_node < 1) fail("dist.nproc_per_node must be at least 1");
  std::unique_ptr<TcpStoreServer> server;
  int port = s.master_port;
  if (s.node_rank == 0) {
    server = std::make_unique<TcpStoreServer>(s.nnodes > 1 ? "0.0.0.0" : "127.0.0.1", s.master_port,
                                              s.token);
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

  // Restarts are this agent's own decision on one node; across nodes the orchestrator
  // (JobSet, PyTorchJob, Slurm --requeue) restarts the pod group and train.resume=auto resumes.
  const int max_restarts = s.nnodes == 1 ? s.max_restarts : 0;
  std::vector<std::string> history;
  for (int attempt = 0;; ++attempt) {
    std::string failure;
    const int rc = run_group(s, port, attempt, &failure);
    if (rc == 0) return 0;
    history.push_back(max_restarts > 0 ? fmt::format("attempt {}: {}", attempt + 1, failure)
                                       : failure);
    if (g_signal != 0 || attempt >= max_restarts) {
      std::string all;
      for (const auto& h : history) all += (all.empty() ? "" : "; ") + h;
      std::fprintf(stderr, "kiln: error: worker group failed%s: %s\n",
                   max_restarts > 0 ? fmt::format(" after {} restart(s)", attempt).c_str() : "",
                   all.c_str());
      return rc;
    }
    KILN_LOG_WARN("agent: restarting the group from the newest checkpoint ({} of {})", attempt + 1,
                  max_restarts);
  }
}

}  // namespace kiln
