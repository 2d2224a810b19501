#include "kiln/launch/private_network.h"

#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/comm/watchdog.h"

extern char** environ;

namespace kiln {

namespace {

constexpr const char* kMarker = "KILN_PRIVATE_NETWORK";

// The supervisor's child, for the signal handler that forwards SIGINT/SIGTERM to it (a handler
// can reach nothing else). Written once, before the handler is installed.
volatile std::sig_atomic_t g_child = 0;
void forward_signal(int sig) {
  if (g_child > 0) ::kill(static_cast<pid_t>(g_child), sig);
}

// What the child reports through its pipe when a step before exec fails.
struct ChildFailure {
  int step = 0;  // index into kSteps
  int error = 0;
};
constexpr const char* kSteps[] = {"unshare(CLONE_NEWNET)", "unshare(CLONE_NEWUSER | CLONE_NEWNET)",
                                  "/proc/self/setgroups",  "/proc/self/uid_map",
                                  "/proc/self/gid_map",    "bringing up lo",
                                  "exec /proc/self/exe"};

// Everything the child needs, built before fork: the parent may have threads, so the child
// must not allocate before exec.
struct ChildPlan {
  std::vector<std::string> args, env;
  std::vector<char*> argv, envp;
  std::string uid_map, gid_map;
};

// This process's own arguments, program name included, exactly as it was started.
std::vector<std::string> own_arguments() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string a;
  while (std::getline(f, a, '\0')) args.push_back(a);
  if (args.empty()) fail("private network: cannot read /proc/self/cmdline");
  return args;
}

constexpr const char* kBeatFd = "KILN_SUPERVISOR_FD";

ChildPlan plan_child(int beat_fd) {
  ChildPlan p;
  p.args = own_arguments();
  // The namespace's only interface is lo: an interface named for the host's network (eth0 in a
  // container's environment) would not be found there.
  p.env = {std::string(kMarker) + "=1", "KILN_SOCKET_IFNAME=lo", "NCCL_SOCKET_IFNAME=lo",
           fmt::format("{}={}", kBeatFd, beat_fd)};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.starts_with("KILN_SOCKET_IFNAME=") || kv.starts_with("NCCL_SOCKET_IFNAME=") ||
        kv.starts_with(std::string(kBeatFd) + "=")) {
      continue;
    }
    p.env.push_back(kv);
  }
  for (auto& a : p.args) p.argv.push_back(a.data());
  p.argv.push_back(nullptr);
  for (auto& e : p.env) p.envp.push_back(e.data());
  p.envp.push_back(nullptr);
  // This uid and gid map to themselves: files the group writes keep their owner.
  p.uid_map = std::to_string(::geteuid()) + " " + std::to_string(::geteuid()) + " 1";
  p.gid_map = std::to_string(::getegid()) + " " + std::to_string(::getegid()) + " 1";
  return p;
}

// Async-signal-safe: open, write, close.
bool write_proc_file(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

bool bring_up_loopback() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  struct ifreq ifr {};
  std::memcpy(ifr.ifr_name, "lo", 3);
  bool ok = ::ioctl(fd, SIOCGIFFLAGS, &ifr) == 0;
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
  ok = ok && ::ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
  ::close(fd);
  return ok;
}

[[noreturn]] void report_failure(int report_fd, int step) {
  const ChildFailure f{step, errno};
  (void)!::write(report_fd, &f, sizeof f);
  ::_exit(127);
}

// In the forked child: enter the namespaces and exec, or report the failing step and exit.
[[noreturn]] void become_private(ChildPlan& p, int report_fd, int beat_fd, pid_t parent) {
  auto report = [report_fd](int step) { report_failure(report_fd, step); };
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(128 + SIGKILL);
  // Root (in the host's user namespace) needs only the network namespace; anyone else makes a
  // user namespace of their own first, in which they may.
  if (::unshare(CLONE_NEWNET) != 0) {
    if (errno != EPERM) report(0);
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) report(1);
    if (!write_proc_file("/proc/self/setgroups", "deny")) report(2);
    if (!write_proc_file("/proc/self/uid_map", p.uid_map)) report(3);
    if (!write_proc_file("/proc/self/gid_map", p.gid_map)) report(4);
  }
  if (!bring_up_loopback()) report(5);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  // A process group of its own: Ctrl-C and `kill -- -PGID` signal the supervisor's group, and
  // the agent hears of them once, from the supervisor, not also directly (the second copy would
  // read as a second request and cut its graceful stop short).
  ::setpgid(0, 0);
  ::fcntl(beat_fd, F_SETFD, 0);  // the agent keeps its end of the heartbeat across exec
  ::execve("/proc/self/exe", p.argv.data(), p.envp.data());
  report_failure(report_fd, 6);
}

int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Waits for the child, forwarding SIGINT/SIGTERM, and listens to its heartbeat on `beat_fd`;
// returns its status as a shell would, or 1 after killing a child that fell silent.
int supervise(pid_t child, int beat_fd) {
  using std::chrono::milliseconds;
  using Clock = std::chrono::steady_clock;
  g_child = child;
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  // As long as its workers wait for a store that stopped answering before they give up.
  const milliseconds limit = WatchdogOptions{}.store_lost_exit;
  bool heard = false;  // silence counts only once the agent has started beating
  milliseconds quiet{0};
  int status = 0;
  while (beat_fd >= 0) {
    const pid_t r = ::waitpid(child, &status, WNOHANG);
    if (r == child) {
      ::close(beat_fd);
      return exit_status(status);
    }
    pollfd p{beat_fd, POLLIN, 0};
    const auto t0 = Clock::now();
    const int n = ::poll(&p, 1, 250);
    const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
    if (n > 0) {
      char buf[64];
      const ssize_t k = ::read(beat_fd, buf, sizeof buf);
      if (k > 0) {
        heard = true;
        quiet = milliseconds(0);
      } else if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN)) {
        ::close(beat_fd);  // the agent is exiting: its status follows
        beat_fd = -1;
      }
      continue;
    }
    // A supervisor that was itself stopped (Ctrl-Z stops the whole group) counts no more than
    // one poll of the silence, so only the agent's own silence adds up.
    if (n == 0 && heard) quiet += std::min(took, milliseconds(500));
    if (heard && quiet >= limit) {
      ::kill(child, SIGKILL);  // its workers die with it (PR_SET_PDEATHSIG)
      while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
      std::fprintf(stderr,
                   "kiln: error: the node agent (pid %d) sent no heartbeat for %.1f s: frozen or "
                   "stopped (SIGSTOP?); killed it and its workers\n",
                   static_cast<int>(child), std::chrono::duration<double>(quiet).count());
      return 1;
    }
  }
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) fail("private network: waitpid failed: {}", std::strerror(errno));
  }
  return exit_status(status);
}

}  // namespace

bool in_private_network() {
  const char* v = std::getenv(kMarker);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

std::optional<int> run_in_private_network(PrivateNetwork mode) {
  int beat[2];  // [0] the supervisor's end, [1] the agent's
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, beat) != 0) {
    fail("private network: socketpair failed: {}", std::strerror(errno));
  }
  ChildPlan plan = plan_child(beat[1]);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail("private network: pipe failed: {}", std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) fail("private network: fork failed: {}", std::strerror(errno));
  if (child == 0) {
    ::close(fds[0]);
    ::close(beat[0]);
    become_private(plan, fds[1], beat[1], parent);
  }
  ::close(fds[1]);
  ::close(beat[1]);
  ChildFailure f;
  ssize_t n;
  do {
    n = ::read(fds[0], &f, sizeof f);  // 0 bytes: the exec succeeded and closed the pipe
  } while (n < 0 && errno == EINTR);
  ::close(fds[0]);
  if (n == 0) return supervise(child, beat[0]);
  ::close(beat[0]);
  ::waitpid(child, nullptr, 0);
  const std::string why = n == sizeof f
                              ? fmt::format("{}: {}", kSteps[f.step], std::strerror(f.error))
                              : std::string("the child exited before saying why");
  if (mode == PrivateNetwork::kOn) {
    fail("dist.private_network is on, but no private network can be made ({})", why);
  }
  KILN_LOG_WARN(
      "agent: no private network for the group ({}); its collectives listen on the host's "
      "loopback, where any local process can connect and fail the group's formation "
      "(docs/security.md). dist.private_network=off silences this",
      why);
  return std::nullopt;
}

std::unique_ptr<SupervisorHeartbeat> SupervisorHeartbeat::start() {
  const char* v = std::getenv(kBeatFd);
  if (v == nullptr) return nullptr;
  const int fd = std::atoi(v);
  if (fd < 0 || ::fcntl(fd, F_GETFD) < 0) return nullptr;
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // the workers this agent spawns do not beat for it
  return std::make_unique<SupervisorHeartbeat>(fd);
}

SupervisorHeartbeat::SupervisorHeartbeat(int fd) : fd_(fd) {
  thread_ = std::thread([this] {
    const char beat = 1;
    std::unique_lock<std::mutex> l(mu_);
    while (!stop_) {
      // A full socket (a supervisor that is itself stopped) is skipped, never waited on.
      (void)!::send(fd_, &beat, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      cv_.wait_for(l, std::chrono::milliseconds(250));
    }
  });
}

SupervisorHeartbeat::~SupervisorHeartbeat() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  ::close(fd_);
}

}  // namespace kiln
