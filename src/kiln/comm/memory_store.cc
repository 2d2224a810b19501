#include <fmt/format.h>

#include <cstring>

#include "kiln/base/error.h"
#include "kiln/comm/store.h"

namespace kiln {

namespace {
std::string join_missing(const std::map<std::string, Bytes>& data,
                         const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) {
    if (!data.count(k)) out += (out.empty() ? "" : ", ") + k;
  }
  return out;
}
}  // namespace

void MemoryStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> l(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

Bytes MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  std::lock_guard<std::mutex> l(mu_);
  return data_.at(key);
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t v = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) {
      if (it->second.size() != sizeof v) fail("store: key {} does not hold a counter", key);
      std::memcpy(&v, it->second.data(), sizeof v);
    }
    v += delta;
    Bytes b(sizeof v);
    std::memcpy(b.data(), &v, sizeof v);
    data_[key] = b;
  }
  cv_.notify_all();
  return v;
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  const bool ok = cv_.wait_for(l, timeout, [&] {
    for (const auto& k : keys) {
      if (!data_.count(k)) return false;
    }
    return true;
  });
  if (!ok) {
    fail("store: timed out after {} ms waiting for keys: {}", timeout.count(),
         join_missing(data_, keys));
  }
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& k : keys) {
    if (!data_.count(k)) return false;
  }
  return true;
}

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> p;
  for (const auto& k : keys) p.push_back(prefix_ + k);
  base_->wait(p, timeout);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> p;
  for (const auto& k : keys) p.push_back(prefix_ + k);
  return base_->check(p);
}

}  // namespace kiln
