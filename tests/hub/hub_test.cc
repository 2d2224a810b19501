// Repository ids and revisions, the hub's settings from the environment (huggingface_hub's
// precedence), which files a download selects, and where a model named by id is found: a local
// path first, then the cache's refs/<REV> -> snapshots/<COMMIT>, else one line saying the rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error_of.h"
#include "common/temp_dir.h"
#include "hub/scoped_env.h"
#include "kiln/base/file.h"
#include "kiln/hub/hub_cache.h"
#include "kiln/hub/hub_download.h"
#include "kiln/hub/hub_settings.h"
#include "kiln/hub/model_location.h"
#include "kiln/hub/repo_ref.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

// A cache entry as huggingface_hub writes it: refs/<rev>, a blob, a snapshot linking to it.
fs::path fake_cached_repo(const fs::path& cache, const std::string& id, const std::string& rev) {
  const HubCache c(cache, id);
  fs::create_directories(c.blob("x").parent_path());
  write_file_atomic(c.blob("abc"), "{}");
  c.link(kCommit, "config.json", "abc");
  c.write_ref(rev, kCommit);
  return c.snapshot(kCommit);
}

TEST(RepoRef, ParsesIdsAndRevisions) {
  const auto a = parse_repo_ref("Qwen/Qwen3-0.6B");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->id, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(a->revision, "main");
  EXPECT_EQ(parse_repo_ref("Qwen/Qwen3-0.6B@v1.0")->revision, "v1.0");
  EXPECT_EQ(parse_repo_ref("Qwen/Qwen3-0.6B", "dev")->revision, "dev");
  EXPECT_EQ(parse_repo_ref("meta-llama/Llama-3.2-1B@refs/pr/3")->revision, "refs/pr/3");
  for (const char* not_id :
       {"./a/b", "/abs/path", "a/b/c", "single", "a--b/c", "a/b..c", "-a/b", "a/b.", "a b/c", ""}) {
    EXPECT_FALSE(parse_repo_ref(not_id)) << not_id;
  }
  EXPECT_NE(error_of([] {
              parse_repo_ref("a/b@x", "y", "model.revision");
            }).find("model.revision: 'a/b@x' names revision 'x'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref("a/b@../x"); }).find("not a revision"), std::string::npos);
  EXPECT_EQ(repo_folder_name("Qwen/Qwen3-0.6B"), "models--Qwen--Qwen3-0.6B");
  EXPECT_TRUE(is_commit_hash(kCommit));
  EXPECT_FALSE(is_commit_hash("main"));
}

TEST(HubSettings, ReadTheEnvironmentAsHuggingfaceHubDoes) {
  testing::ScopedEnv env;
  for (const char* v :
       {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HF_ENDPOINT",
        "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE"}) {
    env.unset(v);
  }
  TempDir d("hubenv");
  env.set("HOME", d.path().string());
  HubSettings s = hub_settings_from_env();
  EXPECT_EQ(s.cache_dir, d / ".cache/huggingface/hub");
  EXPECT_EQ(s.endpoint, "https://huggingface.co");
  EXPECT_EQ(s.token, "");
  EXPECT_FALSE(s.offline);
  env.set("XDG_CACHE_HOME", (d / "xdg").string());
  EXPECT_EQ(hub_settings_from_env().cache_dir, d / "xdg/huggingface/hub");
  env.set("HF_HOME", (d / "home").string());
  fs::create_directories(d / "home");
  write_file_atomic(d / "home/token", "hf_from_file\n");
  s = hub_settings_from_env();
  EXPECT_EQ(s.cache_dir, d / "home/hub");
  EXPECT_EQ(s.token, "hf_from_file");
  env.set("HF_TOKEN", "hf_from_env");
  env.set("HF_HUB_CACHE", (d / "c").string());
  env.set("HF_ENDPOINT", "http://127.0.0.1:1/");
  env.set("HF_HUB_OFFLINE", "yes");
  s = hub_settings_from_env();
  EXPECT_EQ(s.cache_dir, d / "c");
  EXPECT_EQ(s.token, "hf_from_env");
  EXPECT_EQ(s.endpoint, "http://127.0.0.1:1");
  EXPECT_TRUE(s.offline);
}

TEST(HubDownloadSelection, DefaultsSkipWhatKilnNeverReads) {
  const DownloadOptions none;
  EXPECT_TRUE(selected_for_download("model-00001-of-00002.safetensors", none));
  EXPECT_TRUE(selected_for_download("tokenizer.json", none));
  EXPECT_FALSE(selected_for_download("pytorch_model.bin", none));
  EXPECT_FALSE(selected_for_download("original/consolidated.00.pth", none));
  DownloadOptions some;
  some.include = {"*.json"};
  EXPECT_TRUE(selected_for_download("config.json", some));
  EXPECT_FALSE(selected_for_download("model.safetensors", some));
  some.include.clear();
  some.exclude = {"docs/"};
  EXPECT_FALSE(selected_for_download("docs/a/README.md", some));
  EXPECT_TRUE(selected_for_download("pytorch_model.bin", some));  // the defaults are replaced
}

TEST(ModelLocation, LocalPathWinsThenTheCacheThenOneLine) {
  testing::ScopedEnv env;
  TempDir d("hubloc");
  env.set("HF_HUB_CACHE", (d / "cache").string());
  env.unset("HF_HUB_OFFLINE");
  const fs::path snap = fake_cached_repo(d / "cache", "org/model", "main");
  ModelLocation at = locate_model("org/model");
  EXPECT_EQ(at.dir, snap);
  EXPECT_EQ(at.repo_id, "org/model");
  EXPECT_EQ(locate_model(d.path().string() + "/nothing").dir, d / "nothing");  // not an id
  EXPECT_EQ(locate_model("org/model@" + kCommit).dir, snap);
  const std::string err = error_of([] { locate_model("org/model", {"model.path", "v2", false}); });
  EXPECT_NE(err.find("model.path: 'org/model' is neither a local directory nor in the Hugging "
                     "Face cache at " +
                     (d / "cache").string()),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("kiln download org/model@v2"), std::string::npos) << err;
  // A directory of that name where kiln runs wins over the cache.
  const fs::path cwd = fs::current_path();
  fs::create_directories(d / "org/model");
  fs::current_path(d.path());
  at = locate_model("org/model");
  fs::current_path(cwd);
  EXPECT_EQ(at.dir, "org/model");
  EXPECT_FALSE(at.from_hub());
}

TEST(ModelLocation, DanglingLinkIsNamed) {
  testing::ScopedEnv env;
  TempDir d("hubloc");
  env.set("HF_HUB_CACHE", (d / "cache").string());
  fake_cached_repo(d / "cache", "org/model", "main");
  fs::remove(HubCache(d / "cache", "org/model").blob("abc"));
  const std::string err = error_of([] { locate_model("org/model"); });
  EXPECT_NE(err.find("org/model: config.json in the cache is a dangling link"), std::string::npos)
      << err;
}

}  // namespace
}  // namespace kiln
