#include "kiln/hub/hub_settings.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kiln {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// huggingface_hub's _is_true: "1", "ON", "YES", "TRUE" in any case.
bool env_true(const char* name) {
  std::string v = env(name);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::toupper(c); });
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

std::string trimmed(std::string s) {
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), space));
  s.erase(std::find_if_not(s.rbegin(), s.rend(), space).base(), s.end());
  return s;
}

fs::path hf_home() {
  if (const std::string h = env("HF_HOME"); !h.empty()) return h;
  if (const std::string x = env("XDG_CACHE_HOME"); !x.empty()) return fs::path(x) / "huggingface";
  return fs::path(env("HOME")) / ".cache" / "huggingface";
}

std::string token_from_env(const fs::path& home) {
  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    if (std::string t = trimmed(env(name)); !t.empty()) return t;
  }
  const std::string path_env = env("HF_TOKEN_PATH");
  const fs::path file = path_env.empty() ? home / "token" : fs::path(path_env);
  std::ifstream in(file);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return trimmed(ss.str());
}

}  // namespace

HubSettings hub_settings_from_env() {
  HubSettings s;
  const fs::path home = hf_home();
  if (std::string c = env("HF_HUB_CACHE"); !c.empty()) {
    s.cache_dir = c;
  } else if (std::string legacy = env("HUGGINGFACE_HUB_CACHE"); !legacy.empty()) {
    s.cache_dir = legacy;
  } else {
    s.cache_dir = home / "hub";
  }
  s.endpoint = env("HF_ENDPOINT");
  if (s.endpoint.empty()) s.endpoint = kDefaultHubEndpoint;
  while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();
  s.token = token_from_env(home);
  s.offline = env_true("HF_HUB_OFFLINE");
  return s;
}

}  // namespace kiln
