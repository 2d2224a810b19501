// The fake hub (tests/hub/fake_hub.py) as a child process for one test: serves a model folder as
// repository `repo` on a free loopback port, with the script's fault switches; stopped (SIGTERM)
// when the object goes out of scope. Its request log reads back as JSON rows.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/base/json.h"

namespace kiln::testing {

class FakeHub {
 public:
  FakeHub(const std::filesystem::path& root, const std::filesystem::path& scratch,
          const std::string& repo, std::vector<std::string> faults = {})
      : port_file_(scratch / "hub.port"), log_(scratch / "hub.log") {
    std::filesystem::remove(port_file_);
    std::filesystem::remove(log_);
    std::vector<std::string> args = {"/usr/bin/python3",
                                     std::string(KILN_SOURCE_DIR) + "/tests/hub/fake_hub.py",
                                     "--root",
                                     root.string(),
                                     "--repo",
                                     repo,
                                     "--port-file",
                                     port_file_.string(),
                                     "--log",
                                     log_.string(),
                                     "--lifetime",
                                     "120"};
    args.insert(args.end(), faults.begin(), faults.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    for (int i = 0; i < 200 && !std::filesystem::exists(port_file_); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    std::ifstream in(port_file_);
    in >> port_;
    EXPECT_GT(port_, 0) << "the fake hub did not start";
  }
  ~FakeHub() { stop(); }
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Every request so far: {"method", "path", "range", "auth"}.
  std::vector<Json> requests() const {
    std::vector<Json> out;
    std::ifstream in(log_);
    for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line));
    return out;
  }

 private:
  std::filesystem::path port_file_, log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace kiln::testing
