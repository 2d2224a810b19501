#include "kiln/hub/model_location.h"

#include <cstdio>
#include <optional>
#include <system_error>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/hub/hub_cache.h"
#include "kiln/hub/hub_download.h"
#include "kiln/hub/hub_settings.h"
#include "kiln/hub/repo_ref.h"

namespace kiln {

ModelLocation locate_model(const std::string& spec, const LocateOptions& opt) {
  std::error_code ec;
  if (spec.empty() || fs::exists(spec, ec)) return {spec, "", ""};
  const std::optional<RepoRef> ref = parse_repo_ref(spec, opt.revision, opt.what);
  if (!ref) return {spec, "", ""};
  const HubSettings hub = hub_settings_from_env();
  if (const std::optional<fs::path> snap = cached_snapshot(hub.cache_dir, *ref)) {
    KILN_LOG_DEBUG("{}: {} from the Hugging Face cache: {}", opt.what, ref->text(), snap->string());
    return {*snap, ref->id, ref->revision};
  }
  if (opt.download && !hub.offline) {
    std::fprintf(stderr, "%s: %s is not in the Hugging Face cache (%s); downloading it\n",
                 opt.what.c_str(), ref->text().c_str(), hub.cache_dir.c_str());
    const auto progress = make_download_progress(stderr);
    const DownloadResult got = download_repo(hub, *ref, DownloadOptions{}, *progress);
    return {got.snapshot, ref->id, ref->revision};
  }
  fail(
      "{}: '{}' is neither a local directory nor in the Hugging Face cache at {} (a local path "
      "wins, then {}/refs/{}){}",
      opt.what, spec, hub.cache_dir.string(), repo_folder_name(ref->id), ref->revision,
      hub.offline ? "; HF_HUB_OFFLINE is set"
                  : "; run `kiln download " + ref->text() +
                        "` first (a recipe's model.download: true fetches it on first use)");
}

}  // namespace kiln
