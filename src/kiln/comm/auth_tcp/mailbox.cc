#include "kiln/comm/auth_tcp/mailbox.h"

#include <algorithm>

namespace kiln::auth_tcp {

std::optional<PostedRecv> Mailbox::claim(uint64_t slot, int rank) {
  auto it = posted_.find(slot);
  if (it == posted_.end()) return std::nullopt;
  auto& q = it->second;
  for (auto r = q.begin(); r != q.end(); ++r) {
    if (std::find(r->ranks.begin(), r->ranks.end(), rank) == r->ranks.end()) continue;
    PostedRecv out = std::move(*r);
    q.erase(r);
    if (q.empty()) posted_.erase(it);
    return out;
  }
  return std::nullopt;
}

std::optional<ArrivedMessage> Mailbox::take(uint64_t slot, const std::vector<int>& ranks) {
  auto it = arrived_.find(slot);
  if (it == arrived_.end()) return std::nullopt;
  auto& q = it->second;
  for (auto m = q.begin(); m != q.end(); ++m) {
    if (std::find(ranks.begin(), ranks.end(), m->rank) == ranks.end()) continue;
    ArrivedMessage out = std::move(*m);
    q.erase(m);
    if (q.empty()) arrived_.erase(it);
    return out;
  }
  return std::nullopt;
}

bool Mailbox::stranded(const std::function<bool(int)>& gone) const {
  for (const auto& [slot, q] : posted_) {
    for (const PostedRecv& r : q) {
      if (std::all_of(r.ranks.begin(), r.ranks.end(), gone)) return true;
    }
  }
  return false;
}

void Mailbox::forget(const UnboundBuffer* buf) {
  for (auto it = posted_.begin(); it != posted_.end();) {
    auto& q = it->second;
    q.erase(std::remove_if(q.begin(), q.end(), [&](const PostedRecv& r) { return r.buf == buf; }),
            q.end());
    it = q.empty() ? posted_.erase(it) : std::next(it);
  }
}

}  // namespace kiln::auth_tcp
