// A stray or hostile local process cannot fail a single-node group's formation: the group runs
// in a network namespace of its own (src/kiln/launch/private_network.h). The hostile process
// here does what a watcher on a shared host can: it connects to every new listener on the
// host's loopback, sends 64 random bytes and hangs up, ahead of every connection the group makes
// (a seccomp filter holds each until the watcher has looked). On the host's network that fails
// Gloo's rendezvous (a pair takes the first connection as its peer); in the private network it
// reaches nothing.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "common/loopback.h"
#include "common/run_kiln.h"
#include "common/tiny_run.h"
#include "kiln/base/file.h"

namespace kiln {
namespace {

using testing::run_kiln;

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

bool bring_up_loopback() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq ifr{};
  std::strcpy(ifr.ifr_name, "lo");
  bool ok = fd >= 0 && ::ioctl(fd, SIOCGIFFLAGS, &ifr) == 0;
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
  ok = ok && ::ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

// The ports of the host's listening TCP sockets on 127.0.0.1 or any address (/proc/net/tcp).
std::set<int> loopback_listeners() {
  std::set<int> ports;
  std::ifstream f("/proc/net/tcp");
  std::string line;
  std::getline(f, line);  // the header
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string slot, local, remote, state;
    in >> slot >> local >> remote >> state;
    const std::string addr = local.substr(0, local.find(':'));
    if (state == "0A" && (addr == "0100007F" || addr == "00000000")) {
      ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

// Connects to every listener that appears after it started, sends 64 random bytes, hangs up.
// It polls the host's listeners, and, given the notification descriptor of a seccomp filter that
// traps connect(2) in the group's processes (trapped_kiln), it also looks before each of their
// connections goes ahead: then it always reaches a listener before the peer it waits for, since a
// listener is up before its address is published and a peer connects after reading it. Polling
// alone only races the peer, and under load lost often enough to fail the test once in nine runs.
class HostileWatcher {
 public:
  explicit HostileWatcher(int notify_fd = -1)
      : notify_fd_(notify_fd), seen_(loopback_listeners()), thread_([this] { run(); }) {}
  ~HostileWatcher() {
    stop_ = true;
    thread_.join();
  }
  int hits() const { return hits_; }

 private:
  void run() {
    std::mt19937 rng(7);
    while (!stop_) {
      const std::optional<uint64_t> held = notify_fd_ >= 0 ? next_connect() : std::nullopt;
      for (int port : loopback_listeners()) {
        if (!seen_.insert(port).second) continue;
        if (poke(port, rng)) ++hits_;
      }
      if (held) let_connect(*held);
      if (notify_fd_ < 0) std::this_thread::yield();
    }
  }
  // The id of a connect(2) the filter holds, waiting up to 20 ms for one.
  std::optional<uint64_t> next_connect() const {
    pollfd p{notify_fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0 || !(p.revents & POLLIN)) return std::nullopt;
    seccomp_notif req{};
    if (::ioctl(notify_fd_, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) return std::nullopt;
    return req.id;
  }
  void let_connect(uint64_t id) const {
    seccomp_notif_resp resp{};
    resp.id = id;
    resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    (void)::ioctl(notify_fd_, SECCOMP_IOCTL_NOTIF_SEND, &resp);  // ENOENT: the call was cut short
  }
  static bool poke(int port, std::mt19937& rng) {
    const int fd = testing::connect_loopback(port);
    if (fd < 0) return false;
    char junk[64];
    for (char& c : junk) c = static_cast<char>(rng());
    (void)!::send(fd, junk, sizeof junk, MSG_NOSIGNAL);
    ::close(fd);
    return true;
  }

  const int notify_fd_;
  std::set<int> seen_;
  std::atomic<bool> stop_{false};
  std::atomic<int> hits_{0};
  std::thread thread_;
};

// One byte over a unix socket with room for one descriptor beside it (SCM_RIGHTS): the message
// send_fd and receive_fd both pass. Not copyable: the header points into the object.
struct FdMessage {
  char byte = 0;
  iovec io{&byte, 1};
  alignas(cmsghdr) char buf[CMSG_SPACE(sizeof(int))]{};
  msghdr m{};
  FdMessage() {
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = buf;
    m.msg_controllen = sizeof buf;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

bool send_fd(int sock, int fd) {
  FdMessage f;
  cmsghdr* c = CMSG_FIRSTHDR(&f.m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return ::sendmsg(sock, &f.m, 0) == 1;
}
int receive_fd(int sock) {
  FdMessage f;
  if (::recvmsg(sock, &f.m, 0) != 1 || CMSG_FIRSTHDR(&f.m) == nullptr) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&f.m)), sizeof fd);
  return fd;
}

// Starts `kiln args` (output to `log`) with every connect(2) of it and its children held by a
// seccomp filter until the holder of *notify_fd lets it go on; its pid.
pid_t trapped_kiln(const std::string& args, const fs::path& log, int* notify_fd) {
  const std::string cmd =
      std::string(KILN_BINARY_DIR) + "/bin/kiln " + args + " > " + log.string() + " 2>&1";
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_connect, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(126);
    const long fd =
        ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (fd < 0 || !send_fd(sv[1], static_cast<int>(fd))) ::_exit(126);
    ::close(static_cast<int>(fd));
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(sv[1]);
  *notify_fd = pid > 0 ? receive_fd(sv[0]) : -1;
  ::close(sv[0]);
  return pid;
}

struct WatchedRun {
  int code;
  std::string out;
  int hits;
};

// Makes this process's network a fresh one with only its loopback (as root, or in a user
// namespace of its own), so that the watcher below attacks nothing but its own test's group
// while other tests run beside it.
bool enter_sealed_network() {
  if (::unshare(CLONE_NEWNET) == 0) return bring_up_loopback();
  const std::string uid = std::to_string(::geteuid()), gid = std::to_string(::getegid());
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) return false;
  std::ofstream("/proc/self/setgroups") << "deny";
  std::ofstream("/proc/self/uid_map") << uid + " " + uid + " 1";
  std::ofstream("/proc/self/gid_map") << gid + " " + gid + " 1";
  return bring_up_loopback();
}

// Trains `d`'s recipe with dist.private_network=`mode` while a HostileWatcher runs, both in a
// child process inside a sealed network (its "host"): the run's exit code, output and the
// listeners the watcher reached.
WatchedRun train_watched(const fs::path& d, const std::string& mode, const std::string& out) {
  const fs::path result = d / (out + ".result");
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!enter_sealed_network()) ::_exit(126);
    const fs::path log = d / (out + ".log");
    int notify_fd = -1;
    const pid_t kiln =
        trapped_kiln("train " + (d / "recipe.yaml").string() + " dist.private_network=" + mode +
                         " output.dir=" + (d / out).string(),
                     log, &notify_fd);
    if (kiln < 0 || notify_fd < 0) ::_exit(125);
    int hits = 0, status = 0;
    {
      HostileWatcher watcher(notify_fd);
      ::waitpid(kiln, &status, 0);
      hits = watcher.hits();
    }
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    write_file_atomic(result,
                      std::to_string(code) + " " + std::to_string(hits) + "\n" + read_file(log));
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ADD_FAILURE() << "the watched run could not be made (exit " << status << ")";
    return {-1, "", 0};
  }
  std::istringstream in(read_file(result));
  WatchedRun w{};
  in >> w.code >> w.hits;
  in.get();
  w.out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return w;
}

TEST(PrivateNetwork, AHostileWatcherFailsAGroupOnTheHostsLoopback) {
  // The watcher goes first at every connection (HostileWatcher), so it fails every group on the
  // host's network: at the rendezvous (its bytes read as an address, a refused connection) or at
  // the first collective (a pair connected to it). Twice, to show it is not luck.
  const fs::path d = testing::setup_tiny_run("kiln_privnet", "host", {.max_steps = 2});
  for (int i = 0; i < 2; ++i) {
    const WatchedRun r = train_watched(d, "off", "run" + std::to_string(i));
    std::fprintf(stderr, "host network, try %d: exit %d, watcher hit %d listener(s)\n", i, r.code,
                 r.hits);
    EXPECT_NE(r.code, 0) << "the watcher did not fail the group: " << r.out;
    EXPECT_GT(r.hits, 0) << r.out;
    EXPECT_TRUE(r.out.find("gloo rendezvous") != std::string::npos ||
                r.out.find("Connection closed by peer") != std::string::npos)
        << r.out;
  }
  fs::remove_all(d);
}

TEST(PrivateNetwork, AGroupFormsAndTrainsDespiteAHostileWatcher) {
  const fs::path d = testing::setup_tiny_run("kiln_privnet", "private", {.max_steps = 2});
  for (int i = 0; i < 3; ++i) {
    const WatchedRun r = train_watched(d, "auto", "run" + std::to_string(i));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, "trained 2 steps");
    EXPECT_EQ(r.out.find("no private network"), std::string::npos) << r.out;
    // Its listeners were never on the host's loopback for the watcher to find.
    EXPECT_EQ(r.hits, 0) << r.out;
  }
  fs::remove_all(d);
}

// Runs kiln with `args` under a seccomp filter that fails unshare(2) with EPERM, as a container
// without the privilege or a kernel without unprivileged user namespaces would.
testing::CmdResult run_kiln_without_unshare(const std::string& args) {
  const std::string log =
      (fs::temp_directory_path() / ("kiln_privnet_" + std::to_string(::getpid()) + ".log"))
          .string();
  const std::string cmd =
      std::string(KILN_BINARY_DIR) + "/bin/kiln " + args + " > " + log + " 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_unshare, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
      ::_exit(126);
    }
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  testing::CmdResult r{WIFEXITED(status) ? WEXITSTATUS(status) : 128, read_file(log)};
  fs::remove(log);
  return r;
}

TEST(PrivateNetwork, AutoWarnsAndTrainsOnTheHostsNetworkWhenNoneCanBeMade) {
  const fs::path d = testing::setup_tiny_run("kiln_privnet", "denied", {.max_steps = 2});
  const auto r = run_kiln_without_unshare("train " + (d / "recipe.yaml").string());
  ASSERT_NE(r.code, 126) << "could not install the seccomp filter";
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out,
             "agent: no private network for the group (unshare(CLONE_NEWUSER | "
             "CLONE_NEWNET): Operation not permitted)");
  EXPECT_HAS(r.out, "trained 2 steps");
  fs::remove_all(d);
}

TEST(PrivateNetwork, OnRefusesToStartWhenNoneCanBeMade) {
  const fs::path d = testing::setup_tiny_run("kiln_privnet", "required", {.max_steps = 2});
  const auto r = run_kiln_without_unshare("train " + (d / "recipe.yaml").string() +
                                          " dist.private_network=on");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out,
             "kiln: error: dist.private_network is on, but no private network can be "
             "made (unshare(CLONE_NEWUSER | CLONE_NEWNET): Operation not permitted)");
  EXPECT_FALSE(fs::exists(d / "run/metrics.jsonl"));
  fs::remove_all(d);
}

TEST(PrivateNetwork, ABadValueIsAnErrorNamingTheKey) {
  const fs::path d = testing::setup_tiny_run("kiln_privnet", "bad", {.max_steps = 2});
  const auto r = run_kiln("train " + (d / "recipe.yaml").string() + " dist.private_network=yes");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "dist.private_network");
  fs::remove_all(d);
}

}  // namespace
}  // namespace kiln
