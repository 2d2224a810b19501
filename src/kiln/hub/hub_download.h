// Downloads a model repository's revision into the Hugging Face cache (hub_cache.h's layout, as
// huggingface_hub's snapshot_download writes it, so Python tools share the files): the revision's
// file list from the hub, each file not yet cached fetched in parallel into
// blobs/<ETAG>.incomplete, resumed with a Range request after a cut, checked against the digest
// the metadata gives (LFS sha256, else the git blob id), then renamed into blobs/ and linked into
// snapshots/<COMMIT>/; refs/<REV> last. A mismatch is refused naming the file and nothing of it
// is linked. HF_HUB_OFFLINE=1: the cache alone, no request.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/hub/download_progress.h"
#include "kiln/hub/http_client.h"
#include "kiln/hub/hub_settings.h"
#include "kiln/hub/repo_ref.h"

namespace kiln {

namespace fs = std::filesystem;

struct DownloadOptions {
  // fnmatch patterns over repository paths, as huggingface_hub's allow/ignore patterns ("*"
  // crosses '/'; a pattern ending in '/' takes the folder). A file is fetched when it matches
  // an include (or none is given) and no exclude. Both empty: kDefaultExcludes apply.
  std::vector<std::string> include, exclude;
  int parallel = 8;  // files at once
  RetryPolicy retry;
};

// What kiln never reads and a repository often carries besides safetensors (other frameworks'
// weights, Llama's original/ checkpoint): skipped unless --include or --exclude is given.
const std::vector<std::string>& default_download_excludes();

struct DownloadResult {
  fs::path snapshot;  // snapshots/<COMMIT>
  std::string commit;
  size_t fetched = 0;  // files downloaded now
  size_t cached = 0;   // files already there
  uint64_t bytes = 0;  // bytes downloaded now
};

DownloadResult download_repo(const HubSettings& hub, const RepoRef& ref, const DownloadOptions& opt,
                             DownloadProgress& progress);

// True when `path` is selected by the options (see DownloadOptions).
bool selected_for_download(const std::string& path, const DownloadOptions& opt);

}  // namespace kiln
