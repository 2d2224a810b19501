// Fresh directories for tests under the system's temporary directory, named so that tests (and
// concurrent runs of a suite from other checkouts) never share one: <prefix>_<name>_<pid>.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <system_error>

namespace kiln::testing {

// "<suite>_<test>" of the running test (parameterised names keep their '/').
inline std::string current_test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "_" + info->name();
}

// <tmp>/<prefix>_<name>_<pid>, removed if it was there: a path for the code under test to create.
inline std::filesystem::path fresh_path(const std::string& prefix,
                                        const std::string& name = current_test_name()) {
  std::string leaf = prefix + "_" + name + "_" + std::to_string(::getpid());
  for (char& c : leaf) c = c == '/' ? '_' : c;
  const std::filesystem::path d = std::filesystem::temp_directory_path() / leaf;
  std::filesystem::remove_all(d);
  return d;
}

// fresh_path, created empty; the caller removes it.
inline std::filesystem::path fresh_dir(const std::string& prefix,
                                       const std::string& name = current_test_name()) {
  const std::filesystem::path d = fresh_path(prefix, name);
  std::filesystem::create_directories(d);
  return d;
}

// The names of the entries directly in `dir`, sorted.
inline std::set<std::string> entry_names(const std::filesystem::path& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.insert(e.path().filename());
  return out;
}

// A fresh_dir removed with everything in it when the object goes out of scope.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix, const std::string& name = current_test_name())
      : path_(fresh_dir(prefix, name)) {}
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::filesystem::path& p) const { return path_ / p; }

 private:
  std::filesystem::path path_;
};

}  // namespace kiln::testing
