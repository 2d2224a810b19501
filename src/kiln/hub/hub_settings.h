// Where the Hugging Face hub and its cache are, read from the environment as huggingface_hub reads
// it (its constants.py), in one place: the cache kiln writes is the one Python tools read.
#pragma once

#include <filesystem>
#include <string>

namespace kiln {

namespace fs = std::filesystem;

struct HubSettings {
  // HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else
  // XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
  fs::path cache_dir;
  // HF_ENDPOINT without a trailing '/', else the public hub.
  std::string endpoint;
  // HF_TOKEN (or the older HUGGING_FACE_HUB_TOKEN), else the file HF_TOKEN_PATH, else
  // HF_HOME/token, the file `hf auth login` writes; empty when none.
  std::string token;
  // HF_HUB_OFFLINE=1 (or ON, YES, TRUE): never touch the network.
  bool offline = false;
};

inline constexpr const char* kDefaultHubEndpoint = "https://huggingface.co";

HubSettings hub_settings_from_env();

}  // namespace kiln
