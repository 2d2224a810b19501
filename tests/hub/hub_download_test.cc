// kiln download against the fake hub on loopback (fake_hub.py: the hub's metadata and file
// endpoints as huggingface_hub and @huggingface/hub call them) serving a tiny model `kiln init`
// wrote: a clean download laid out as huggingface_hub lays it out, a second call that fetches
// nothing, a cut connection resumed with Range at the right byte, a 429 retried, corrupted bytes
// refused by name, a gated repository without a token, offline resolution with the server gone,
// and the cache read as complete by the hub's own JavaScript client.
#include "kiln/hub/hub_download.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "common/kiln_split.h"
#include "common/run_kiln.h"
#include "common/temp_dir.h"
#include "common/tiny_run.h"
#include "hub/fake_hub.h"
#include "hub/scoped_env.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/hub/hub_cache.h"
#include "kiln/hub/model_location.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::CmdResult;
using testing::FakeHub;
using testing::SplitResult;
using testing::TempDir;

constexpr const char* kRepo = "kiln-test/tiny";

// A tiny model as `kiln init` writes it, plus a file in a subfolder (links two levels deep).
fs::path make_model(const TempDir& d) {
  const fs::path model = testing::init_tiny_model(d.path(), 1);
  fs::create_directories(model / "docs");
  write_file_atomic(model / "docs/README.md", "a tiny kiln model\n");
  return model;
}

HubSettings settings(const fs::path& cache, const FakeHub& hub, std::string token = "") {
  return {cache, hub.endpoint(), std::move(token), false};
}

DownloadOptions fast_retries() {
  DownloadOptions opt;
  opt.retry.first_delay = std::chrono::milliseconds(10);
  return opt;
}

DownloadResult download(const HubSettings& s, const std::string& rev = "main") {
  const auto quiet = silent_download_progress();
  return download_repo(s, RepoRef{kRepo, rev}, fast_retries(), *quiet);
}

// Every file of `model` is in `snapshot` with the same bytes, as a relative link into blobs/.
void expect_snapshot_of(const fs::path& model, const fs::path& snapshot) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(model)) {
    if (e.is_directory()) continue;
    const fs::path rel = fs::relative(e.path(), model);
    const fs::path link = snapshot / rel;
    ASSERT_TRUE(fs::is_symlink(link)) << link;
    EXPECT_TRUE(fs::read_symlink(link).is_relative()) << link;
    EXPECT_EQ(fs::canonical(link).parent_path().filename(), "blobs") << link;
    EXPECT_EQ(read_file(link), read_file(e.path())) << rel;
    ++n;
  }
  EXPECT_EQ(n, 3u);
}

// `kiln <args>` with the hub and cache of this test; stderr apart.
SplitResult kiln_with(const std::string& env, const std::string& args, const TempDir& d) {
  const fs::path err = d / "stderr";
  const CmdResult r = testing::run_shell(
      "env -u HF_TOKEN -u HUGGING_FACE_HUB_TOKEN -u HF_HUB_OFFLINE "
      "HF_HOME=" +
      (d / "hf_home").string() + " HF_HUB_CACHE=" + (d / "cache").string() + " " + env + " " +
      testing::kiln_binary() + " " + args + " 2> " + err.string());
  return {r.code, r.out, read_file(err)};
}

size_t count_requests(const FakeHub& hub, const std::string& needle) {
  const std::vector<Json> reqs = hub.requests();
  return std::count_if(reqs.begin(), reqs.end(), [&](const Json& r) {
    return r["path"].get<std::string>().find(needle) != std::string::npos;
  });
}

TEST(HubDownload, CleanDownloadThenNothingMore) {
  TempDir d("hub");
  const fs::path model = make_model(d);
  FakeHub hub(model, d.path(), kRepo);
  const HubSettings s = settings(d / "cache", hub);
  const DownloadResult first = download(s);
  EXPECT_EQ(first.fetched, 3u);
  EXPECT_EQ(first.bytes,
            fs::file_size(model / "model.safetensors") + fs::file_size(model / "config.json") + 18);
  expect_snapshot_of(model, first.snapshot);
  const fs::path repo_dir = d / "cache/models--kiln-test--tiny";
  EXPECT_EQ(first.snapshot, repo_dir / "snapshots" / first.commit);
  EXPECT_EQ(read_file(repo_dir / "refs/main"), first.commit);  // no newline, as huggingface_hub
  EXPECT_EQ(count_requests(hub, "/lfs-storage/"), 1u);         // the LFS file came by the redirect
  const size_t before = hub.requests().size();
  const DownloadResult second = download(s);
  EXPECT_EQ(second.fetched, 0u);
  EXPECT_EQ(second.cached, 3u);
  EXPECT_EQ(second.bytes, 0u);
  EXPECT_EQ(hub.requests().size(), before + 1);  // the metadata only
}

TEST(HubDownload, CutConnectionResumesWithRangeAtTheRightByte) {
  TempDir d("hub");
  const fs::path model = make_model(d);
  FakeHub hub(model, d.path(), kRepo, {"--cut", "model.safetensors:100000"});
  const DownloadResult r = download(settings(d / "cache", hub));
  expect_snapshot_of(model, r.snapshot);
  std::vector<std::string> ranges;
  for (const Json& q : hub.requests()) {
    if (q["path"].get<std::string>().find("model.safetensors") != std::string::npos &&
        !q["range"].is_null()) {
      ranges.push_back(q["range"].get<std::string>());
    }
  }
  // The resolve request carries the Range, and the redirect to the storage keeps it.
  ASSERT_FALSE(ranges.empty());
  for (const std::string& range : ranges) EXPECT_EQ(range, "bytes=100000-");
  EXPECT_FALSE(fs::exists(
      d / "cache/models--kiln-test--tiny/blobs" /
      (fs::read_symlink(r.snapshot / "model.safetensors").filename().string() + ".incomplete")));
}

TEST(HubDownload, TooManyRequestsIsRetried) {
  TempDir d("hub");
  const fs::path model = make_model(d);
  FakeHub hub(model, d.path(), kRepo, {"--busy-once"});
  const DownloadResult r = download(settings(d / "cache", hub));
  expect_snapshot_of(model, r.snapshot);
  EXPECT_EQ(count_requests(hub, "/resolve/"), 4u);  // three files, one answered 429 first
}

TEST(HubDownload, CorruptedBytesAreRefusedByNameAndNothingIsLinked) {
  TempDir d("hub");
  const fs::path model = make_model(d);
  {
    FakeHub hub(model, d.path(), kRepo, {"--corrupt", "model.safetensors"});
    const SplitResult r =
        kiln_with("HF_ENDPOINT=" + hub.endpoint(), "download " + std::string(kRepo), d);
    testing::expect_one_line_error(r, "model.safetensors: sha256 mismatch");
  }
  const fs::path repo_dir = d / "cache/models--kiln-test--tiny";
  EXPECT_FALSE(fs::exists(repo_dir / "refs/main"));
  for (const auto& e : fs::recursive_directory_iterator(repo_dir)) {
    EXPECT_EQ(e.path().string().find("model.safetensors"), std::string::npos) << e.path();
    EXPECT_NE(e.path().extension(), ".incomplete") << e.path();
  }
  FakeHub good(model, d.path(), kRepo);  // the next run fetches it whole
  expect_snapshot_of(model, download(settings(d / "cache", good)).snapshot);
}

TEST(HubDownload, GatedRepositoryWithoutATokenIsOneLine) {
  TempDir d("hub");
  const fs::path model = make_model(d);
  FakeHub hub(model, d.path(), kRepo, {"--token", "hf_test_secret"});
  const std::string env = "HF_ENDPOINT=" + hub.endpoint();
  testing::expect_one_line_error(kiln_with(env, "download kiln-test/tiny", d),
                                 "kiln-test/tiny is gated");
  // The token from the file `hf auth login` writes (HF_HOME/token), then from HF_TOKEN.
  fs::create_directories(d / "hf_home");
  write_file_atomic(d / "hf_home/token", "hf_test_secret\n");
  const SplitResult ok = kiln_with(env, "download kiln-test/tiny", d);
  EXPECT_EQ(ok.code, 0) << ok.err;
  fs::remove(d / "hf_home/token");
  fs::remove_all(d / "cache");
  EXPECT_EQ(kiln_with(env + " HF_TOKEN=hf_test_secret", "download kiln-test/tiny", d).code, 0);
}

TEST(HubDownload, OfflineResolvesFromTheCacheWithTheServerGone) {
  TempDir d("hub");
  const fs::path model = make_model(d);
  std::string endpoint;
  {
    FakeHub hub(model, d.path(), kRepo);
    endpoint = hub.endpoint();
    ASSERT_EQ(kiln_with("HF_ENDPOINT=" + endpoint, "download kiln-test/tiny", d).code, 0);
  }
  const SplitResult r =
      kiln_with("HF_HUB_OFFLINE=1 HF_ENDPOINT=" + endpoint, "download kiln-test/tiny", d);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("0 files downloaded (0 B), 3 already in the cache"), std::string::npos)
      << r.out;
  testing::expect_one_line_error(
      kiln_with("HF_HUB_OFFLINE=1 HF_ENDPOINT=" + endpoint, "download kiln-test/other", d),
      "kiln-test/other: revision 'main' is not in the Hugging Face cache");
}

TEST(HubDownload, BadInputIsOneLineEach) {
  TempDir d("hub");
  const fs::path model = make_model(d);
  FakeHub hub(model, d.path(), kRepo);
  const std::string env = "HF_ENDPOINT=" + hub.endpoint();
  testing::expect_one_line_error(kiln_with(env, "download kiln-test/nope", d),
                                 "kiln-test/nope: no such model repository on " + hub.endpoint());
  testing::expect_one_line_error(kiln_with(env, "download kiln-test/tiny@no-such-branch", d),
                                 "kiln-test/tiny: no revision 'no-such-branch'");
  testing::expect_one_line_error(kiln_with(env, "download not-a-repo-id", d),
                                 "'not-a-repo-id' is not a repository id");
  // A blob removed behind the cache's back: its link dangles, and the error names the file.
  const DownloadResult r = download(settings(d / "cache", hub));
  fs::remove(fs::canonical(r.snapshot / "config.json"));
  testing::expect_one_line_error(kiln_with("HF_HUB_OFFLINE=1", "download kiln-test/tiny", d),
                                 "kiln-test/tiny: config.json in the cache is a dangling link");
}

// A model named by id and missing from the cache: one line saying the rule, unless downloading
// on first use is allowed (a recipe's model.download: true), then fetched by the same code.
TEST(HubDownload, FirstUseDownloadsOnlyWhenAllowed) {
  TempDir d("hub");
  const fs::path model = make_model(d);
  FakeHub hub(model, d.path(), kRepo);
  testing::ScopedEnv env;
  env.set("HF_HUB_CACHE", (d / "cache").string());
  env.set("HF_ENDPOINT", hub.endpoint());
  env.set("HF_HOME", (d / "hf_home").string());
  for (const char* v : {"HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) env.unset(v);
  const std::string err = testing::error_of([] { locate_model(kRepo, {"model.path", "", false}); });
  EXPECT_NE(err.find("model.path: 'kiln-test/tiny' is neither a local directory nor in the "
                     "Hugging Face cache"),
            std::string::npos)
      << err;
  EXPECT_EQ(count_requests(hub, "/"), 0u);  // nothing asked of the hub
  const ModelLocation at = locate_model(kRepo, {"model.path", "", true});
  EXPECT_EQ(at.repo_id, kRepo);
  expect_snapshot_of(model, at.dir);
  EXPECT_EQ(locate_model(kRepo, {"model.path", "", false}).dir, at.dir);  // now from the cache
}

// Every entry under a cache (.locks aside) with its link target: "path -> target" or "path".
std::vector<std::string> cache_tree(const fs::path& cache) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(cache)) {
    const std::string rel = fs::relative(e.path(), cache).string();
    if (rel.rfind(".locks", 0) == 0) continue;
    out.push_back(e.is_symlink() ? rel + " -> " + fs::read_symlink(e.path()).string() : rel);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The hub's own client reads the cache kiln wrote as complete (@huggingface/hub's scanCacheDir),
// and its own snapshotDownload from the fake hub writes the same layout; run when node and
// tools/hub_cache_check's node_modules are there (scripts/setup.sh installs them with npm).
TEST(HubDownload, HubJavaScriptClientReadsTheCacheAndWritesTheSameLayout) {
  const fs::path tool = fs::path(KILN_SOURCE_DIR) / "tools/hub_cache_check";
  if (testing::run_shell("command -v node >/dev/null").code != 0 ||
      !fs::exists(tool / "node_modules/@huggingface/hub")) {
    GTEST_SKIP() << "node or " << tool << "/node_modules is missing (npm ci --prefix " << tool
                 << ")";
  }
  TempDir d("hub");
  const fs::path model = make_model(d);
  FakeHub hub(model, d.path(), kRepo);
  const DownloadResult r = download(settings(d / "cache", hub));
  download(settings(d / "cache", hub), "v1.0");  // a second ref to the same commit
  const CmdResult scan =
      testing::run_shell("node " + (tool / "scan.mjs").string() + " " + (d / "cache").string());
  ASSERT_EQ(scan.code, 0) << scan.out;
  const Json j = Json::parse(scan.out);
  EXPECT_TRUE(j["warnings"].empty()) << scan.out;
  ASSERT_EQ(j["repos"].size(), 1u) << scan.out;
  const Json& repo = j["repos"][0];
  EXPECT_EQ(repo["id"], kRepo);
  EXPECT_EQ(repo["type"], "model");
  ASSERT_EQ(repo["revisions"].size(), 1u);
  const Json& rev = repo["revisions"][0];
  EXPECT_EQ(rev["commit"], r.commit);
  const std::set<std::string> refs(rev["refs"].begin(), rev["refs"].end());
  EXPECT_EQ(refs, (std::set<std::string>{"main", "v1.0"})) << scan.out;
  EXPECT_EQ(rev["files"]["model.safetensors"], fs::file_size(model / "model.safetensors"));
  EXPECT_EQ(rev["files"]["config.json"], fs::file_size(model / "config.json"));
  // The same client's own download from the fake hub writes the very layout kiln wrote: the same
  // blob names, links and refs (which also holds the fake hub to the hub's answers).
  const CmdResult js =
      testing::run_shell("node " + (tool / "download.mjs").string() + " " +
                         (d / "js_cache").string() + " " + hub.endpoint() + " " + kRepo + " 2>&1");
  ASSERT_EQ(js.code, 0) << js.out;
  fs::remove(d / "cache/models--kiln-test--tiny/refs/v1.0");
  EXPECT_EQ(cache_tree(d / "js_cache"), cache_tree(d / "cache"));
}

}  // namespace
}  // namespace kiln
