#include "kiln/comm/watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "kiln/base/error.h"
#include "kiln/base/log.h"

namespace kiln {

namespace {

using std::chrono::milliseconds;
constexpr size_t kKeep = 8;  // operations kept per group for the report

double seconds(HangWatchdog::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string join_ranks(const std::vector<int>& rs) {
  std::string s;
  for (size_t i = 0; i < rs.size(); ++i) s += (i ? ", " : "") + std::to_string(rs[i]);
  return s;
}

std::string ranks_word(const std::vector<int>& rs) {
  return (rs.size() == 1 ? "rank " : "ranks ") + join_ranks(rs);
}

}  // namespace

HangWatchdog::HangWatchdog(std::shared_ptr<Store> store, WatchdogOptions opts)
    : store_(std::move(store)), o_(std::move(opts)) {
  if (o_.exit_after.count() <= 0) o_.exit_after = std::max(o_.timeout, milliseconds(10000));
  if (o_.start_thread) thread_ = std::thread([this] { run(); });
}

HangWatchdog::~HangWatchdog() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int HangWatchdog::add_group(const std::string& name, int rank, std::vector<int> world_ranks,
                            std::shared_ptr<Store> group_store) {
  std::lock_guard<std::mutex> l(mu_);
  groups_.push_back(Group{name, rank, std::move(world_ranks), std::move(group_store), {}});
  return static_cast<int>(groups_.size()) - 1;
}

HangWatchdog::OpRecord* HangWatchdog::find(int group, int64_t seq) {
  auto& ops = groups_[group].ops;
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    if (it->seq == seq) return &*it;
  }
  return nullptr;
}

void HangWatchdog::op_queued(int group, int64_t seq, const char* name) {
  std::lock_guard<std::mutex> l(mu_);
  auto& ops = groups_[group].ops;
  OpRecord r;
  r.seq = seq;
  r.name = name;
  r.queued = Clock::now();
  ops.push_back(r);
  // Drop the oldest finished records beyond kKeep (queued or running ones stay).
  while (ops.size() > kKeep && ops.front().finished != Clock::time_point{}) ops.pop_front();
}

void HangWatchdog::op_started(int group, int64_t seq) {
  std::lock_guard<std::mutex> l(mu_);
  if (OpRecord* r = find(group, seq)) r->started = Clock::now();
}

void HangWatchdog::op_finished(int group, int64_t seq, bool ok) {
  std::lock_guard<std::mutex> l(mu_);
  if (OpRecord* r = find(group, seq)) {
    r->finished = Clock::now();
    r->ok = ok;
  }
}

void HangWatchdog::set_step(int64_t step, bool began) {
  std::lock_guard<std::mutex> l(mu_);
  (began ? step_ : done_step_) = step;
}

HangWatchdog::Where HangWatchdog::where_now() const {
  const auto now = Clock::now();
  Where w;
  Clock::time_point last_done{};
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& r : groups_[g].ops) {
      const bool running = r.started != Clock::time_point{} && r.finished == Clock::time_point{};
      if (running && (!w.waiting || r.started < w.op.started)) {
        w.waiting = true;
        w.group = static_cast<int>(g);
        w.op = r;
        w.seconds = seconds(now - r.started);
      }
      if (!w.waiting && r.finished != Clock::time_point{} && r.finished > last_done) {
        last_done = r.finished;
        w.group = static_cast<int>(g);
        w.op = r;
        w.seconds = seconds(now - r.finished);
      }
    }
  }
  return w;
}

std::vector<int> HangWatchdog::missing_at(int group, int64_t seq) const {
  std::string name;
  int me = 0;
  std::vector<int> world_ranks;
  std::shared_ptr<Store> gs;
  {
    std::lock_guard<std::mutex> l(mu_);
    name = groups_[group].name;
    me = groups_[group].rank;
    world_ranks = groups_[group].world_ranks;
    gs = groups_[group].store;
  }
  std::vector<int> missing;
  for (size_t r = 0; r < world_ranks.size(); ++r) {
    if (static_cast<int>(r) == me) continue;
    int64_t seen = -1;
    const std::string key = "progress/" + std::to_string(r);
    try {
      if (gs->check({key})) seen = std::stoll(to_string(gs->get(key, milliseconds(500))));
    } catch (const std::exception&) {
    }
    if (seen < seq) missing.push_back(world_ranks[r]);
  }
  return missing;
}

fs::path HangWatchdog::report_path() const {
  if (o_.report_dir.empty()) return {};
  return o_.report_dir / fmt::format("rank-{:05d}.txt", o_.rank);
}

Json HangWatchdog::report_json() const {
  Where w;
  std::string group;
  int64_t step = -1, done_step = -1;
  {
    std::lock_guard<std::mutex> l(mu_);
    w = where_now();
    if (w.group >= 0) group = groups_[w.group].name;
    step = step_;
    done_step = done_step_;
  }
  Json j{{"rank", o_.rank},
         {"node", o_.node_rank},
         {"pid", static_cast<int64_t>(::getpid())},
         {"step", step},
         {"done_step", done_step},
         {"state", w.waiting ? "waiting" : "outside"},
         {"group", group},
         {"op", w.op.seq > 0 ? w.op.name : ""},
         {"seq", w.op.seq},
         {"seconds", w.seconds},
         {"file", report_path().string()}};
  if (w.waiting) j["missing"] = missing_at(w.group, w.op.seq);
  return j;
}

std::string HangWatchdog::report_text(const std::string& trigger) const {
  const Json j = report_json();
  std::string out = fmt::format("kiln hang report: rank {} of {} (node {}, pid {})\n", o_.rank,
                                o_.world_size, o_.node_rank, j["pid"].get<int64_t>());
  out += "trigger: " + trigger + "\n";
  const int64_t step = j["step"].get<int64_t>();
  const int64_t done = j["done_step"].get<int64_t>();
  if (step >= 0) {
    out += fmt::format("step: {}\n", step);
    if (done >= 0) out += fmt::format("last completed step: {}\n", done);
  } else {
    out +=
        done >= 0 ? fmt::format("step: unknown (last completed: {})\n", done) : "step: unknown\n";
  }
  const std::string op = j["op"].get<std::string>();
  const int64_t seq = j["seq"].get<int64_t>();
  const double s = j["seconds"].get<double>();
  if (j["state"] == "waiting") {
    const auto missing = j["missing"].get<std::vector<int>>();
    out +=
        fmt::format("now: waiting in {} #{} (group {}) for {:.1f} s; {}\n", op, seq,
                    j["group"].get<std::string>(), s,
                    missing.empty() ? "every rank has arrived" : "missing: " + ranks_word(missing));
  } else if (seq > 0) {
    out += fmt::format("now: not in a collective since {} #{} (group {}) finished {:.1f} s ago\n",
                       op, seq, j["group"].get<std::string>(), s);
  } else {
    out += "now: not in a collective; none has run yet\n";
  }
  out += "last operations (oldest first):\n";
  std::lock_guard<std::mutex> l(mu_);
  const auto now = Clock::now();
  for (const auto& g : groups_) {
    for (const auto& r : g.ops) {
      std::string state;
      if (r.started == Clock::time_point{}) {
        state = "queued, not started";
      } else if (r.finished == Clock::time_point{}) {
        state = fmt::format("running for {:.3f} s", seconds(now - r.started));
      } else {
        state = fmt::format("took {:.3f} s, {} {:.1f} s ago", seconds(r.finished - r.started),
                            r.ok ? "done" : "FAILED", seconds(now - r.finished));
      }
      out += fmt::format("  {} {} #{}: queued {:.1f} s ago, {}\n", g.name, r.name, r.seq,
                         seconds(now - r.queued), state);
    }
  }
  return out;
}

bool HangWatchdog::fired() const {
  std::lock_guard<std::mutex> l(fire_mu_);
  return fired_;
}

void HangWatchdog::fire(const std::string& trigger, bool announce) {
  std::lock_guard<std::mutex> l(fire_mu_);
  if (fired_) return;
  fired_ = true;
  fired_time_ = Clock::now();
  if (announce) {
    try {
      if (!store_->check({o_.ns + "/hang"})) store_->set(o_.ns + "/hang", to_bytes(trigger));
    } catch (const std::exception&) {
    }
  }
  const std::string text = report_text(trigger);
  Json j = report_json();
  j["trigger"] = trigger;
  const fs::path path = report_path();
  std::string written;
  if (!path.empty()) {
    try {
      fs::create_directories(path.parent_path());
      write_file_atomic(path, text);
      written = "; report in " + path.string();
    } catch (const std::exception& e) {
      written = fmt::format("; could not write {}: {}", path.string(), e.what());
    }
  }
  try {
    store_->set(o_.ns + "/hang/" + std::to_string(o_.rank), to_bytes(j.dump()));
  } catch (const std::exception&) {
  }
  // The first line of the report ("now: ...") is what the log needs.
  const size_t now_at = text.find("now: ");
  const std::string now_line = now_at == std::string::npos
                                   ? ""
                                   : text.substr(now_at + 5, text.find('\n', now_at) - now_at - 5);
  std::fprintf(stderr, "kiln: hang report: rank %d %s%s\n", o_.rank, now_line.c_str(),
               written.c_str());
  std::fflush(stderr);
}

void HangWatchdog::on_timeout(int group, int64_t seq) {
  std::string name;
  double waited = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (OpRecord* r = find(group, seq)) {
      name = r->name;
      waited = seconds(Clock::now() - r->started);
    }
    name = fmt::format("rank {} waited {:.1f} s at {} #{} (group {})", o_.rank, waited, name, seq,
                       groups_[group].name);
  }
  fire(name, true);
  // Give every other rank's watchdog (polling every o_.poll) time to write its report.
  const auto deadline =
      Clock::now() + std::clamp(o_.timeout / 2, milliseconds(1000), milliseconds(3000));
  while (Clock::now() < deadline) {
    bool all = true;
    for (int r = 0; r < o_.world_size && all; ++r) {
      try {
        all = store_->check({o_.ns + "/hang/" + std::to_string(r)});
      } catch (const std::exception&) {
        return;
      }
    }
    if (all) return;
    std::this_thread::sleep_for(milliseconds(50));
  }
}

bool HangWatchdog::check() {
  int64_t step = -1;
  Where w;
  std::string group;
  {
    std::lock_guard<std::mutex> l(mu_);
    step = step_ >= 0 ? step_ : done_step_;
    w = where_now();
    if (w.group >= 0) group = groups_[w.group].name;
  }
  if (step != published_step_) {
    try {
      store_->set(o_.ns + "/step/" + std::to_string(o_.rank), to_bytes(std::to_string(step)));
      published_step_ = step;
    } catch (const std::exception&) {
    }
  }
  const auto timeout_s = std::chrono::duration<double>(o_.timeout).count();
  if (!fired()) {
    if (w.waiting && w.seconds >= timeout_s) {
      {
        std::lock_guard<std::mutex> l(fire_mu_);
        fired_at_ = fmt::format("{}/{}", group, w.op.seq);
      }
      fire(fmt::format("rank {} waited {:.1f} s at {} #{} (group {})", o_.rank, w.seconds,
                       w.op.name, w.op.seq, group),
           true);
    } else {
      std::string trigger;
      try {
        if (store_->check({o_.ns + "/hang"})) {
          trigger = to_string(store_->get(o_.ns + "/hang", milliseconds(1000)));
        }
        store_reached(true, "");
      } catch (const std::exception& e) {
        store_reached(false, e.what());
      }
      if (!trigger.empty()) fire(trigger, false);
    }
    return fired();
  }
  // Still waiting in the collective that fired long after the timeout: Gloo's own timeout did
  // not end it, so this rank ends itself and the agent tears the group down.
  std::string at;
  Clock::time_point when;
  {
    std::lock_guard<std::mutex> l(fire_mu_);
    at = fired_at_;
    when = fired_time_;
  }
  if (w.waiting && !at.empty() && at == fmt::format("{}/{}", group, w.op.seq) &&
      Clock::now() - when > o_.exit_after) {
    std::fprintf(stderr,
                 "kiln: error: watchdog: rank %d still waiting in %s #%lld (group %s) %.1f s "
                 "after dist.timeout_s; exiting\n",
                 o_.rank, w.op.name, static_cast<long long>(w.op.seq), group.c_str(), w.seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }
  return true;
}

void HangWatchdog::store_reached(bool ok, const std::string& why) {
  if (ok) {
    store_lost_since_.reset();
    return;
  }
  const auto now = Clock::now();
  if (!store_lost_since_) store_lost_since_ = now;
  const double lost_s = std::chrono::duration<double>(now - *store_lost_since_).count();
  if (now - *store_lost_since_ < o_.store_lost_exit) return;
  std::fprintf(stderr,
               "kiln: error: watchdog: rank %d lost the store for %.1f s (%s); the agent that "
               "served it is gone, exiting\n",
               o_.rank, lost_s, why.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

void HangWatchdog::run() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (cv_.wait_for(l, o_.poll, [&] { return stop_; })) return;
    l.unlock();
    check();
    l.lock();
  }
}

int64_t published_step(Store& store, const std::string& ns, int rank) {
  const std::string key = ns + "/step/" + std::to_string(rank);
  try {
    if (store.check({key})) return std::stoll(to_string(store.get(key, milliseconds(1000))));
  } catch (const std::exception&) {
  }
  return -1;
}

std::optional<std::string> hang_summary(Store& store, const std::string& ns, int world_size,
                                        milliseconds wait) {
  try {
    if (!store.check({ns + "/hang"})) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::vector<std::optional<Json>> reports(world_size);
  for (;;) {
    bool all = true;
    for (int r = 0; r < world_size; ++r) {
      if (reports[r]) continue;
      const std::string key = ns + "/hang/" + std::to_string(r);
      try {
        if (store.check({key})) {
          reports[r] = parse_json(to_string(store.get(key, milliseconds(1000))), key);
        }
      } catch (const std::exception&) {
      }
      all = all && reports[r].has_value();
    }
    if (all || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  // Ranks some waiter is missing: the stuck ones, wherever they are.
  std::vector<bool> missed(world_size, false);
  for (const auto& j : reports) {
    if (!j || j->value("state", "") != "waiting" || !j->contains("missing")) continue;
    for (int m : (*j)["missing"].get<std::vector<int>>()) {
      if (m >= 0 && m < world_size) missed[m] = true;
    }
  }
  std::vector<std::string> stuck;
  // Waiting ranks grouped by where they wait: "group op #seq" -> (ranks, longest wait).
  std::map<std::string, std::pair<std::vector<int>, double>> waits;
  std::vector<int> silent;
  for (int r = 0; r < world_size; ++r) {
    if (!reports[r]) {
      silent.push_back(r);
      continue;
    }
    const Json& j = *reports[r];
    const int64_t step = j.value("step", int64_t{-1});
    const int64_t done = j.value("done_step", int64_t{-1});
    const std::string at_step = step >= 0   ? fmt::format(" at step {}", step)
                                : done >= 0 ? fmt::format(" after step {}", done)
                                            : "";
    const std::string op = j.value("op", "");
    const int64_t seq = j.value("seq", int64_t{0});
    const double s = j.value("seconds", 0.0);
    if (j.value("state", "") == "outside") {
      stuck.push_back(
          seq > 0 ? fmt::format("rank {} stopped{} outside any collective (last: {} "
                                "#{} done {:.1f} s ago)",
                                r, at_step, op, seq, s)
                  : fmt::format("rank {} stopped{} before its first collective", r, at_step));
    } else if (missed[r]) {
      stuck.push_back(
          fmt::format("rank {} is stuck{} in {} #{} ({:.1f} s)", r, at_step, op, seq, s));
    } else {
      auto& w = waits[fmt::format("{} #{}", op, seq)];
      w.first.push_back(r);
      w.second = std::max(w.second, s);
    }
  }
  std::string line = "hang: ";
  for (size_t i = 0; i < stuck.size(); ++i) line += (i ? "; " : "") + stuck[i];
  if (stuck.empty()) {
    std::vector<int> m;
    for (int r = 0; r < world_size; ++r) {
      if (missed[r]) m.push_back(r);
    }
    line += m.empty() ? "no rank is missing" : ranks_word(m) + " did not arrive";
  }
  for (const auto& [where, w] : waits) {
    line += fmt::format("; {} waited {:.1f} s at {}", ranks_word(w.first), w.second, where);
  }
  if (!silent.empty()) line += "; no report from " + ranks_word(silent);
  return line;
}

}  // namespace kiln
