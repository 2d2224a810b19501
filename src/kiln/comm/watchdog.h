// The hang watchdog: one per worker process. Every communicator of the process (the world group
// and its sub-groups) records its operations here (name, sequence number, when queued, started
// and finished). A thread checks twice a second: when a collective of this rank has waited
// longer than the timeout, or when another rank announced a hang in the store, this rank writes
// a short report (its last operations, where it waits now or how long ago it left its last
// collective, the ranks missing) to `<report_dir>/rank-RRRRR.txt` and to the store, so that even
// a rank stuck outside any collective (sleeping inside a step) explains itself before the group
// is torn down. The agent then reads every rank's report and prints one line naming the stuck
// rank (hang_summary()).
//
// Store keys, under the namespace `ns` (the agent and the workers agree on it: "kiln/<group>"):
//   <ns>/hang              who noticed first ("rank 0 waited 5.0 s at all_reduce #42")
//   <ns>/hang/<rank>       that rank's report as JSON
//   <ns>/step/<rank>       the step the rank last began (or completed), for the agent's history
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/comm/store.h"

namespace kiln {

struct WatchdogOptions {
  std::string ns = "kiln/world";  // store namespace of this group attempt
  int rank = 0, world_size = 1, node_rank = 0;
  std::chrono::milliseconds timeout{300000};  // a collective waiting longer is a hang
  fs::path report_dir;                        // "" : reports go to the store and the log only
  std::chrono::milliseconds poll{200};
  // A rank still waiting in the same collective this long after the timeout (Gloo's own timeout
  // did not fire) exits with an error so the group fails instead of hanging.
  std::chrono::milliseconds exit_after{0};  // 0: max(timeout, 10 s)
  // The store is the agent's (or rank 0's): when this rank cannot reach it for this long, the
  // process that served it is gone (kill -9 of node 0's agent), so the rank exits with an error
  // rather than train on unwatched. A client connection that failed stays failed, so a short
  // bound is safe; it only has to outlast a normal shutdown's last second.
  std::chrono::milliseconds store_lost_exit{5000};
  bool start_thread = true;  // tests drive check() themselves
};

class HangWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  HangWatchdog(std::shared_ptr<Store> store, WatchdogOptions opts);
  ~HangWatchdog();
  HangWatchdog(const HangWatchdog&) = delete;
  HangWatchdog& operator=(const HangWatchdog&) = delete;

  // Communicators register once per group; `world_ranks`: the world rank of each member;
  // `group_store`: the group's namespace, where "progress/<r>" keys show each member's progress.
  int add_group(const std::string& name, int rank, std::vector<int> world_ranks,
                std::shared_ptr<Store> group_store);
  void op_queued(int group, int64_t seq, const char* name);
  void op_started(int group, int64_t seq);
  void op_finished(int group, int64_t seq, bool ok);
  // The step this rank began, or, with began = false, the last step it completed (the trainer or
  // a user's function says so through WorkerContext::begin_step and end_step, on every rank).
  void set_step(int64_t step, bool began = true);

  // Called on the communication thread when collective `seq` failed after waiting about the
  // timeout: reports now, then waits briefly for every other rank's report so they are all
  // written before this rank's failure tears the group down.
  void on_timeout(int group, int64_t seq);

  // One check (the thread calls it every `poll`); returns true once a report was written.
  bool check();
  bool fired() const;
  // This rank's report as text and as JSON (what fire() writes).
  std::string report_text(const std::string& trigger) const;
  Json report_json() const;
  fs::path report_path() const;

 private:
  struct OpRecord {
    int64_t seq = 0;
    const char* name = "";
    Clock::time_point queued{}, started{}, finished{};
    bool ok = true;
  };
  struct Group {
    std::string name;
    int rank = 0;
    std::vector<int> world_ranks;
    std::shared_ptr<Store> store;
    std::deque<OpRecord> ops;  // the last kKeep, oldest first
  };
  struct Where {  // where this rank is now
    bool waiting = false;
    int group = -1;
    OpRecord op;  // waiting: the op; else the last finished (seq 0: none)
    double seconds = 0;
  };

  void run();
  Where where_now() const;  // mu_ held by the caller
  std::vector<int> missing_at(int group, int64_t seq) const;
  void fire(const std::string& trigger, bool announce);
  // Records whether the last store request reached the store; exits once it has not for
  // o_.store_lost_exit.
  void store_reached(bool ok, const std::string& why);
  OpRecord* find(int group, int64_t seq);

  std::shared_ptr<Store> store_;
  WatchdogOptions o_;
  mutable std::mutex mu_;
  std::vector<Group> groups_;
  int64_t step_ = -1, done_step_ = -1, published_step_ = -1;
  mutable std::mutex fire_mu_;
  bool fired_ = false;
  std::string fired_at_;  // "group/seq" of the wait that fired locally ("" when remote)
  Clock::time_point fired_time_{};
  std::optional<Clock::time_point> store_lost_since_;  // check()'s thread only
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// The agent's one line for a hang in group namespace `ns` (nullopt when no rank reported one):
// waits up to `wait` for all `world_size` reports, then names the stuck rank(s) and where the
// others waited, e.g. "rank 1 stopped at step 3 outside any collective (last: all_reduce #41 done
// 6.1 s ago); rank 0 waited 5.0 s at all_reduce #42".
std::optional<std::string> hang_summary(Store& store, const std::string& ns, int world_size,
                                        std::chrono::milliseconds wait);

// The step a rank last published in `ns` (-1: none).
int64_t published_step(Store& store, const std::string& ns, int rank);

}  // namespace kiln
