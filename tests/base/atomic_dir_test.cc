// write_dir_atomic: the directory's name holds the old directory or the whole new one.
#include "kiln/base/atomic_dir.h"

#include <gtest/gtest.h>

#include <set>

#include "common/temp_dir.h"
#include "kiln/base/error.h"

namespace kiln {
namespace {

class AtomicDir : public ::testing::Test {
 protected:
  std::set<std::string> entries(const fs::path& d) const { return testing::entry_names(d); }

  testing::TempDir tmp_{"kiln_atomic_dir"};
  const fs::path root_ = tmp_.path();
};

TEST_F(AtomicDir, WritesANewDirectory) {
  write_dir_atomic(root_ / "out/", [](const fs::path& tmp) {
    EXPECT_NE(tmp.filename().string().find("out.tmp."), std::string::npos) << tmp;
    write_file_atomic(tmp / "a", "1");
  });
  EXPECT_EQ(read_file(root_ / "out/a"), "1");
  EXPECT_EQ(entries(root_), std::set<std::string>{"out"});
}

TEST_F(AtomicDir, ReplacesAnOldOneWhole) {
  fs::create_directories(root_ / "out");
  write_file_atomic(root_ / "out/old", "x");
  write_dir_atomic(root_ / "out", [](const fs::path& tmp) { write_file_atomic(tmp / "new", "y"); });
  EXPECT_EQ(entries(root_ / "out"), std::set<std::string>{"new"});
  EXPECT_EQ(entries(root_), std::set<std::string>{"out"});
}

TEST_F(AtomicDir, AFailureLeavesNothingOrTheOldOne) {
  const auto half_then_fail = [](const fs::path& tmp) {
    write_file_atomic(tmp / "part", "p");
    fail("disk full");
  };
  EXPECT_THROW(write_dir_atomic(root_ / "out", half_then_fail), Error);
  EXPECT_TRUE(entries(root_).empty());

  fs::create_directories(root_ / "out");
  write_file_atomic(root_ / "out/old", "x");
  EXPECT_THROW(write_dir_atomic(root_ / "out", half_then_fail), Error);
  EXPECT_EQ(entries(root_), std::set<std::string>{"out"});
  EXPECT_EQ(entries(root_ / "out"), std::set<std::string>{"old"});
}

TEST_F(AtomicDir, RefusesToReplaceAFile) {
  write_file_atomic(root_ / "out", "a file");
  EXPECT_THROW(write_dir_atomic(root_ / "out", [](const fs::path&) {}), Error);
  EXPECT_EQ(read_file(root_ / "out"), "a file");
  EXPECT_EQ(entries(root_), std::set<std::string>{"out"});
}

}  // namespace
}  // namespace kiln
