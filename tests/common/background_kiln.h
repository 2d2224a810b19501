// A kiln process started in the background (fork + exec of the built binary), with its output in
// a file, so a test can signal it, watch its workers and wait for it.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kiln::testing {

class BackgroundKiln {
 public:
  // Runs `bin/kiln args...` with its stdout and stderr in `log`; `env`: extra NAME=VALUE pairs.
  // `own_group`: in a process group of its own (as a shell starts a job), so that signal_group()
  // reaches it and everything it started, and not the test.
  BackgroundKiln(const std::vector<std::string>& args, const std::filesystem::path& log,
                 const std::vector<std::string>& env = {}, bool own_group = false)
      : log_(log) {
    std::vector<std::string> argv_s = {std::string(KILN_BINARY_DIR) + "/bin/kiln"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s = env;  // the extras win: a later duplicate is ignored
    for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string log_s = log.string();
    pid_ = ::fork();
    if (pid_ > 0 && own_group) ::setpgid(pid_, pid_);  // either side may run first
    if (pid_ == 0) {
      if (own_group) ::setpgid(0, 0);
      const int fd = ::open(log_s.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
  }
  ~BackgroundKiln() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  BackgroundKiln(const BackgroundKiln&) = delete;
  BackgroundKiln& operator=(const BackgroundKiln&) = delete;

  pid_t pid() const { return pid_; }
  std::string log() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  // Waits for the process; its exit code, 128 + signal when killed, -1 on timeout.
  int wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Sends `sig` to its process group (own_group): Ctrl-C in a terminal, `kill -- -PGID`.
  void signal_group(int sig) { ::kill(-pid_, sig); }
  // Sends `sig`; when it is SIGKILL the process is reaped at once.
  void signal(int sig) {
    ::kill(pid_, sig);
    if (sig == SIGKILL) wait(std::chrono::milliseconds(5000));
  }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// The pids whose parent is `parent` (from /proc/<pid>/stat).
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}

// The kiln workers among `root`'s descendants (KILN_WORKER=1 in their environment): the agent's
// children, or its grandchildren when the agent re-ran itself in a private network.
inline std::vector<pid_t> workers_under(pid_t root) {
  std::vector<pid_t> out, todo = {root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (pid_t c : children_of(p)) {
      todo.push_back(c);
      std::ifstream f("/proc/" + std::to_string(c) + "/environ");
      std::string env((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      if (env.find(std::string("KILN_WORKER=1\0", 14)) != std::string::npos) out.push_back(c);
    }
  }
  return out;
}

// True while `pid` exists and is not a zombie.
inline bool alive(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return false;
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

}  // namespace kiln::testing
