// How an authenticated context matches incoming messages with posted receives: per slot, the
// receives in the order they were posted and the messages that arrived before a receive wanted
// them, in arrival order. A message goes to the earliest posted receive on its slot that accepts
// its sender; a receive takes the earliest buffered message on its slot from one of its ranks.
// So messages on one pair and slot match in issue order, whatever order the algorithm posts its
// receives in. Not thread-safe: the context holds its lock around every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <vector>

namespace kiln::auth_tcp {

class UnboundBuffer;

struct PostedRecv {
  UnboundBuffer* buf = nullptr;
  size_t offset = 0, nbytes = 0;
  std::vector<int> ranks;  // any one of them may fill it
};

struct ArrivedMessage {
  int rank = 0;
  std::vector<uint8_t> payload;
};

class Mailbox {
 public:
  // The earliest receive on `slot` that accepts `rank`, removed; nullopt when none is posted.
  std::optional<PostedRecv> claim(uint64_t slot, int rank);
  // The earliest buffered message on `slot` from one of `ranks`, removed.
  std::optional<ArrivedMessage> take(uint64_t slot, const std::vector<int>& ranks);
  void post(uint64_t slot, PostedRecv r) { posted_[slot].push_back(std::move(r)); }
  void hold(uint64_t slot, ArrivedMessage m) { arrived_[slot].push_back(std::move(m)); }
  // True when some posted receive accepts only ranks for which gone(rank) holds: it can never
  // complete.
  bool stranded(const std::function<bool(int)>& gone) const;
  // Drops the receives `buf` posted (it is being destroyed).
  void forget(const UnboundBuffer* buf);

 private:
  std::map<uint64_t, std::deque<PostedRecv>> posted_;
  std::map<uint64_t, std::deque<ArrivedMessage>> arrived_;
};

}  // namespace kiln::auth_tcp
