#include "kiln/base/file.h"

#include <gtest/gtest.h>

#include "common/temp_dir.h"
#include "kiln/base/error.h"
#include "kiln/base/json.h"

namespace kiln {
namespace {

fs::path temp_dir() { return testing::fresh_dir("kiln_base_test"); }

TEST(File, AtomicWriteReplacesAndLeavesNoTemporary) {
  fs::path d = temp_dir();
  write_file_atomic(d / "a.txt", "first");
  write_file_atomic(d / "a.txt", "second");
  EXPECT_EQ(read_file(d / "a.txt"), "second");
  int n = 0;
  for (auto& e : fs::directory_iterator(d)) n += e.is_regular_file();
  EXPECT_EQ(n, 1);
}

TEST(File, AbandonedWriterKeepsOldFile) {
  fs::path d = temp_dir();
  write_file_atomic(d / "a.txt", "good");
  {
    AtomicFileWriter w(d / "a.txt");
    w.write("partial");
    // destroyed without commit, as when an exception unwinds
  }
  EXPECT_EQ(read_file(d / "a.txt"), "good");
  int n = 0;
  for (auto& e : fs::directory_iterator(d)) n += e.is_regular_file();
  EXPECT_EQ(n, 1);
}

TEST(File, MissingFileErrorNamesPath) {
  try {
    read_file("/nonexistent/kiln/x.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/kiln/x.json"), std::string::npos);
  }
  EXPECT_THROW(MappedFile("/nonexistent/kiln/y"), Error);
}

TEST(File, MapReadsContents) {
  fs::path d = temp_dir();
  write_file_atomic(d / "m", "hello");
  MappedFile m(d / "m");
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data()), 5), "hello");
}

TEST(Json, MalformedNamesWhat) {
  try {
    parse_json("{\"a\": ", "conf.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conf.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln
