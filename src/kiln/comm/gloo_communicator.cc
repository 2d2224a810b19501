#include "kiln/comm/gloo_communicator.h"

#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "kiln/base/error.h"
#include "kiln/base/fault.h"
#include "kiln/comm/auth_tcp/device.h"
#include "kiln/comm/gloo_collectives.h"
#include "kiln/comm/net_iface.h"
#include "kiln/comm/pinned_pool.h"
#include "kiln/comm/progress_reporter.h"
#include "kiln/comm/shm_lane.h"
#include "kiln/comm/sub_group.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Gloo's rendezvous talks to a kiln::Store (TcpStore in jobs, MemoryStore in tests).
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<kiln::Store> store, milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const Bytes b = store_->get(key, timeout_);
    return std::vector<char>(b.begin(), b.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<kiln::Store> store_;
  milliseconds timeout_;
};

// Completion of one queued operation, shared by the queue and the caller's Work.
struct OpState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;

  void finish(std::string err) {
    {
      std::lock_guard<std::mutex> l(mu);
      done = true;
      error = std::move(err);
    }
    cv.notify_all();
  }

  // Blocks until the operation is done; rethrows its failure.
  void wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done; });
    if (!error.empty()) throw Error(error);
  }
};

class GlooWork final : public Work {
 public:
  explicit GlooWork(std::shared_ptr<OpState> state) : state_(std::move(state)) {}
  void wait(Stream& stream) override {
    stream.wait_for([state = state_] { state->wait(); });
  }
  void wait_host() override { state_->wait(); }

 private:
  std::shared_ptr<OpState> state_;
};

// An operation on device buffers staged through pinned host memory (GlooOptions::staging_backend):
// the result reaches the device when the caller waits, on the staging backend's compute stream.
class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<OpState> state, const Backend& backend, void* dev_out,
             std::shared_ptr<uint8_t> host, const uint8_t* host_out, size_t bytes)
      : state_(std::move(state)),
        backend_(backend),
        dev_out_(dev_out),
        host_(std::move(host)),
        host_out_(host_out),
        bytes_(bytes) {}

  void wait(Stream& stream) override {
    Stream& copies = backend_.compute_stream();
    if (host_ != nullptr) {
      copies.wait_for([state = state_] { state->wait(); });
      if (bytes_ > 0) backend_.copy_to_device(dev_out_, host_out_, bytes_);
      // The pinned copy goes back to the pool once the copy to the device has run.
      copies.wait_for([host = std::move(host_)] {});
      host_.reset();
    }
    if (&stream != &copies) {
      stream.wait(copies.record());
      // A failure surfaces at `stream`'s next synchronize too, not only at the copies' stream.
      stream.wait_for([state = state_] { state->wait(); });
    }
  }

  void wait_host() override {
    state_->wait();
    if (host_ == nullptr) return;
    if (bytes_ > 0) backend_.copy_to_device(dev_out_, host_out_, bytes_);
    backend_.compute_stream().record()->synchronize();
    host_.reset();
  }

 private:
  std::shared_ptr<OpState> state_;
  const Backend& backend_;
  void* dev_out_;
  std::shared_ptr<uint8_t> host_;  // null once the result was copied back
  const uint8_t* host_out_;
  size_t bytes_;
};

// What this host's loopback can reach: same kernel (boot id) and same network namespace. Host
// names alone mislead (containers on one node, copied images with one name).
std::string host_identity() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char ns[128] = {};
  const ssize_t len = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  return std::string(host) + "|" + boot + "|" + (len > 0 ? std::string(ns, len) : "");
}

bool peers_remote(Store& group_store, int rank, int world_size, milliseconds timeout) {
  if (world_size == 1) return false;
  const std::string me = host_identity();
  group_store.set("host/" + std::to_string(rank), to_bytes(me));
  for (int r = 0; r < world_size; ++r) {
    if (r != rank && to_string(group_store.get("host/" + std::to_string(r), timeout)) != me) {
      return true;
    }
  }
  return false;
}

std::string sockaddr_ip(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr, buf, sizeof buf);
  }
  return buf;
}

struct GroupSpec {
  std::shared_ptr<Store> root;  // the store given to make_gloo_communicator
  std::shared_ptr<gloo::transport::Device> device;
  std::string iface, address;
  milliseconds timeout;
  std::string name;  // "world", "world/intra/0"
  int rank = 0, size = 1;
  std::vector<int> world_ranks;            // world rank of each member, for messages
  std::shared_ptr<HangWatchdog> watchdog;  // may be null
  const Backend* staging = nullptr;        // GlooOptions::staging_backend
  std::shared_ptr<PinnedPool> pool;        // staging's pinned buffers, shared with sub-groups
  bool shm = true;                         // GlooOptions::same_host_shm
  bool authenticated = false;              // the device is auth_tcp's
};

// An operation's buffers: out (out_bytes) and in (in_bytes), which may alias out or lie in it.
struct Buffers {
  void* out = nullptr;
  size_t out_bytes = 0;
  const void* in = nullptr;
  size_t in_bytes = 0;
};

class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(GroupSpec g)
      : g_(std::move(g)), store_(std::make_shared<PrefixStore>(g_.name, g_.root)) {
    progress_ = std::make_unique<ProgressReporter>(store_, "progress/" + std::to_string(g_.rank));
    if (g_.watchdog) wd_group_ = g_.watchdog->add_group(g_.name, g_.rank, g_.world_ranks, store_);
    context_ = std::make_shared<gloo::rendezvous::Context>(g_.rank, g_.size);
    context_->setTimeout(g_.timeout);
    if (g_.size > 1) {
      try {
        StoreAdapter adapter(store_, g_.timeout);
        context_->connectFullMesh(adapter, g_.device);
        if (g_.shm) lane_ = ShmLane::open(*store_, g_.rank, g_.size, g_.timeout);
      } catch (const std::exception& e) {
        fail("gloo rendezvous of {} over {} failed: {}", where(), transport(), e.what());
      }
    }
    thread_ = std::thread([this] { run(); });
  }

  ~GlooCommunicator() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    progress_.reset();
    if (g_.staging != nullptr) {
      // Pinned buffers go back to the pool on this thread, not in a stream's host function.
      try {
        g_.staging->compute_stream().synchronize();
      } catch (const std::exception&) {
      }
    }
  }

  int rank() const override { return g_.rank; }
  int world_size() const override { return g_.size; }
  TransportInfo transport_info() const override {
    TransportInfo t;
    t.library = CommLibrary::kGloo;
    t.net = kNetSocket;
    t.iface = g_.iface;
    t.address = g_.address;
    t.authenticated = g_.authenticated;
    t.shm_lane = lane_ != nullptr;
    t.staged = g_.staging != nullptr;
    return t;
  }

  std::unique_ptr<Work> all_reduce_async(void* data, size_t n, DType t, ReduceOp op,
                                         Stream* after) override {
    const size_t bytes = n * dtype_size(t);
    return submit(
        "all_reduce", after, {data, bytes, data, bytes}, [=, this](void* buf, const void*) {
          if (n == 0 || g_.size == 1) return;
          if (lane_) {
            lane_->all_reduce(buf, n, dtype_size(t), gloo_detail::reduce_fn(t, op), deadline());
            if (op == ReduceOp::kMean) gloo_detail::divide_by(buf, n, t, g_.size);
            return;
          }
          gloo::AllreduceOptions o(context_);
          o.setTimeout(g_.timeout);
          if (t == DType::F32) {
            o.setOutput(static_cast<float*>(buf), n);
          } else {
            o.setOutput(static_cast<uint16_t*>(buf), n);
          }
          o.setReduceFunction(gloo_detail::reduce_fn(t, op));
          gloo::allreduce(o);
          if (op == ReduceOp::kMean) gloo_detail::divide_by(buf, n, t, g_.size);
        });
  }

  std::unique_ptr<Work> all_gather_async(void* out, const void* in, size_t n, DType t,
                                         Stream* after) override {
    const size_t bytes = n * dtype_size(t);
    return submit("all_gather", after, {out, bytes * g_.size, in, bytes},
                  [=, this](void* o_buf, const void* i_buf) {
                    auto* out8 = static_cast<uint8_t*>(o_buf);
                    auto* in8 = static_cast<uint8_t*>(const_cast<void*>(i_buf));
                    const bool in_place = in8 == out8 + g_.rank * bytes;
                    if (g_.size == 1 || bytes == 0) {
                      if (!in_place) std::memmove(out8, in8, bytes);
                      return;
                    }
                    if (lane_) return lane_->all_gather(out8, in8, bytes, deadline());
                    gloo::AllgatherOptions o(context_);
                    o.setTimeout(g_.timeout);
                    if (!in_place) o.setInput(in8, bytes);
                    o.setOutput(out8, bytes * g_.size);
                    gloo::allgather(o);
                  });
  }

  std::unique_ptr<Work> reduce_scatter_async(void* out, const void* in, size_t n, DType t,
                                             ReduceOp op, Stream* after) override {
    const size_t bytes = n * dtype_size(t);
    return submit("reduce_scatter", after, {out, bytes, in, bytes * g_.size},
                  [=, this](void* o_buf, const void* i_buf) {
                    if (lane_ && g_.size > 1) {
                      lane_->reduce_scatter(o_buf, i_buf, n, dtype_size(t),
                                            gloo_detail::reduce_fn(t, op), deadline());
                    } else {
                      gloo_detail::ring_reduce_scatter(context_, o_buf, i_buf, n, t,
                                                       gloo_detail::reduce_fn(t, op), g_.timeout,
                                                       scratch_);
                    }
                    if (op == ReduceOp::kMean && g_.size > 1)
                      gloo_detail::divide_by(o_buf, n, t, g_.size);
                  });
  }

  std::unique_ptr<Work> broadcast_async(void* data, size_t n, DType t, int root,
                                        Stream* after) override {
    KILN_CHECK(root >= 0 && root < g_.size, "broadcast root {} outside group of {}", root, g_.size);
    const size_t bytes = n * dtype_size(t);
    return submit("broadcast", after, {data, bytes, data, bytes},
                  [=, this](void* buf, const void*) {
                    if (g_.size == 1 || bytes == 0) return;
                    gloo::BroadcastOptions o(context_);
                    o.setTimeout(g_.timeout);
                    o.setOutput(static_cast<uint8_t*>(buf), bytes);
                    o.setRoot(root);
                    gloo::broadcast(o);
                  });
  }

  void barrier() override {
    submit("barrier", nullptr, [this] {
      if (g_.size == 1) return;
      gloo::BarrierOptions o(context_);
      o.setTimeout(g_.timeout);
      gloo::barrier(o);
    })->wait_host();
  }

  std::unique_ptr<Work> all_reduce_f64_async(double* data, size_t n, ReduceOp op,
                                             Stream* after) override {
    const size_t bytes = n * sizeof(double);
    return submit("all_reduce_f64", after, {data, bytes, data, bytes},
                  [=, this](void* out, const void*) {
                    double* x = static_cast<double*>(out);
                    if (n == 0 || g_.size == 1) return;
                    gloo::AllreduceOptions o(context_);
                    o.setTimeout(g_.timeout);
                    o.setOutput(x, n);
                    o.setReduceFunction(gloo_detail::reduce_fn_f64(op));
                    gloo::allreduce(o);
                    if (op == ReduceOp::kMean) {
                      for (size_t i = 0; i < n; ++i) x[i] /= g_.size;
                    }
                  });
  }

  void all_reduce(double* data, size_t n, ReduceOp op) override {
    all_reduce_f64_async(data, n, op, nullptr)->wait_host();
  }

  std::unique_ptr<Communicator> split(const std::vector<int>& ranks,
                                      const std::string& name) override {
    GroupIdentity id =
        sub_group({g_.name, g_.rank, g_.size, g_.world_ranks}, ranks, name, split_count_);
    GroupSpec sub = g_;
    sub.name = std::move(id.name);
    sub.rank = id.rank;
    sub.size = id.size;
    sub.world_ranks = std::move(id.world_ranks);
    return std::make_unique<GlooCommunicator>(std::move(sub));
  }

 private:
  struct Op {
    int64_t seq = 0;
    const char* name = "";
    std::function<void()> fn;
    std::shared_ptr<OpState> state;
  };

  // An operation's deadline, as Gloo's timeout counts it: from when it starts.
  ShmLane::Clock::time_point deadline() const { return ShmLane::Clock::now() + g_.timeout; }

  std::string where() const {
    return fmt::format("group {}, rank {} of {}", g_.name, g_.rank, g_.size);
  }

  using Body = std::function<void(void* out, const void* in)>;

  // Queues body(out, in); with `after`, it runs once everything enqueued on `after` so far has
  // run. With a staging backend and `after`, the buffers are device memory: see submit_staged.
  std::unique_ptr<Work> submit(const char* name, Stream* after, const Buffers& b, Body body) {
    if (after != nullptr && g_.staging != nullptr) return submit_staged(name, *after, b, body);
    return submit(name, after, [b, body = std::move(body)] { body(b.out, b.in); });
  }

  // Device buffers: in is copied to pinned memory on the staging backend's compute stream once
  // `after` reached this call (in placed where it aliases out); the communication thread waits
  // for that copy, then runs body on the pinned buffers; StagedWork copies out back.
  std::unique_ptr<Work> submit_staged(const char* name, Stream& after, const Buffers& b,
                                      Body body) {
    const Backend& be = *g_.staging;
    Stream& copies = be.compute_stream();
    if (&after != &copies) copies.wait(after.record());
    const auto* out8 = static_cast<const uint8_t*>(b.out);
    const auto* in8 = static_cast<const uint8_t*>(b.in);
    const bool inside = in8 >= out8 && in8 + b.in_bytes <= out8 + b.out_bytes;
    std::shared_ptr<uint8_t> host = g_.pool->acquire(b.out_bytes + (inside ? 0 : b.in_bytes));
    uint8_t* host_out = host.get();
    uint8_t* host_in = inside ? host_out + (in8 - out8) : host_out + b.out_bytes;
    if (b.in_bytes > 0) be.copy_to_host(host_in, b.in, b.in_bytes);
    auto state =
        queue(name, [copied = copies.record(), host, host_out, host_in, body = std::move(body)] {
          copied->synchronize();
          body(host_out, host_in);
        });
    return std::make_unique<StagedWork>(std::move(state), be, b.out, std::move(host), host_out,
                                        b.out_bytes);
  }

  // Queues fn; with `after`, it runs once everything enqueued on `after` so far has run.
  std::unique_ptr<Work> submit(const char* name, Stream* after, std::function<void()> fn) {
    if (after != nullptr) {
      fn = [ready = after->record(), body = std::move(fn)] {
        ready->synchronize();
        body();
      };
    }
    return std::make_unique<GlooWork>(queue(name, std::move(fn)));
  }

  std::shared_ptr<OpState> queue(const char* name, std::function<void()> fn) {
    auto state = std::make_shared<OpState>();
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.push_back(Op{++next_seq_, name, std::move(fn), state});
      if (g_.watchdog) g_.watchdog->op_queued(wd_group_, next_seq_, name);
    }
    cv_.notify_all();
    return state;
  }

  // The communication thread: one operation at a time, in issue order (the ordering contract).
  void run() {
    while (true) {
      Op op;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        op = std::move(queue_.front());
        queue_.pop_front();
        if (stop_) {
          if (g_.watchdog) g_.watchdog->op_finished(wd_group_, op.seq, false);
          op.state->finish(fmt::format("gloo {} #{} ({}) not run: the communicator was destroyed",
                                       op.name, op.seq, where()));
          continue;
        }
      }
      execute(op);
    }
  }

  void execute(Op& op) {
    if (!broken_.empty()) {
      if (g_.watchdog) g_.watchdog->op_finished(wd_group_, op.seq, false);
      op.state->finish(
          fmt::format("gloo {} #{} ({}) not run: {}", op.name, op.seq, where(), broken_));
      return;
    }
    progress_->entered(op.seq);
    if (g_.watchdog) g_.watchdog->op_started(wd_group_, op.seq);
    fault_point("collective");
    const auto start = Clock::now();
    try {
      op.fn();
      if (g_.watchdog) g_.watchdog->op_finished(wd_group_, op.seq, true);
      op.state->finish("");
    } catch (const std::exception& e) {
      const auto ms = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
      // A wait as long as the timeout is a hang: every rank reports before this one fails.
      if (g_.watchdog && ms >= g_.timeout.count() * 9 / 10)
        g_.watchdog->on_timeout(wd_group_, op.seq);
      if (g_.watchdog) g_.watchdog->op_finished(wd_group_, op.seq, false);
      progress_->publish(op.seq);
      // After a failure Gloo's state is unknown (sends and receives may be half done). Closing
      // first makes the peers still waiting on this rank fail now, not at their own timeout.
      try {
        context_->closeConnections();
      } catch (const std::exception&) {
      }
      if (lane_) lane_->abort();
      const std::string who = diagnose(op.seq);
      broken_ = fmt::format("the group failed at {} #{} ({})", op.name, op.seq, who);
      try {
        store_->set("failed", to_bytes(fmt::format("rank {} at {} #{}", g_.rank, op.name, op.seq)));
        // Per rank too: the agent tells ranks that failed because a peer did from the cause.
        store_->set("failed/" + std::to_string(g_.rank), to_bytes(std::string(op.name)));
      } catch (const std::exception&) {
        // Only a hint for the peers' messages; the failure itself is reported below.
      }
      op.state->finish(fmt::format("gloo {} #{} ({}) failed after {} ms: {}: {}", op.name, op.seq,
                                   where(), ms, who, e.what()));
    }
  }

  std::string rank_label(int r) const {
    if (g_.world_ranks[r] == r) return std::to_string(r);
    return fmt::format("{} (world {})", r, g_.world_ranks[r]);
  }

  // Who never entered operation `seq`: peers whose published progress stays behind it for a
  // short grace period (a live peer publishes within kProgressInterval of entering).
  std::string diagnose(int64_t seq) {
    const auto grace = std::clamp(g_.timeout / 8, milliseconds(250), milliseconds(1000));
    const auto deadline = Clock::now() + grace;
    std::vector<int64_t> seen(g_.size, -1);
    seen[g_.rank] = seq;
    while (true) {
      bool all = true;
      for (int r = 0; r < g_.size; ++r) {
        if (seen[r] >= seq) continue;
        const std::string key = "progress/" + std::to_string(r);
        try {
          if (store_->check({key}))
            seen[r] = std::stoll(to_string(store_->get(key, milliseconds(100))));
        } catch (const std::exception&) {
        }
        all = all && seen[r] >= seq;
      }
      if (all || Clock::now() >= deadline) break;
      std::this_thread::sleep_for(milliseconds(20));
    }
    std::vector<int> missing;
    for (int r = 0; r < g_.size; ++r) {
      if (seen[r] < seq) missing.push_back(r);
    }
    if (missing.empty()) {
      std::string failed;
      try {
        if (store_->check({"failed"})) failed = to_string(store_->get("failed", milliseconds(100)));
      } catch (const std::exception&) {
      }
      return failed.empty() ? "every rank arrived"
                            : "every rank arrived; the group had already failed (" + failed + ")";
    }
    const bool same = std::all_of(missing.begin(), missing.end(),
                                  [&](int r) { return seen[r] == seen[missing[0]]; });
    auto last_seen = [&](int r) {
      return seen[r] < 0 ? std::string("never seen") : fmt::format("last seen at #{}", seen[r]);
    };
    std::string out = missing.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < missing.size(); ++i) {
      out += (i ? ", " : "") + rank_label(missing[i]);
      if (!same) out += " (" + last_seen(missing[i]) + ")";
    }
    out += " did not arrive";
    if (same) out += " (" + last_seen(missing[0]) + ")";
    return out;
  }

  GroupSpec g_;
  std::shared_ptr<Store> store_;  // this group's namespace
  std::unique_ptr<ProgressReporter> progress_;
  int wd_group_ = -1;  // this group's index in the watchdog
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::map<std::string, int> split_count_;
  std::vector<uint8_t> scratch_;   // reduce-scatter's, used on the communication thread only
  std::unique_ptr<ShmLane> lane_;  // same-host data path, null when the group has none

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  int64_t next_seq_ = 0;
  bool stop_ = false;
  std::string broken_;  // set on the communication thread after a failure
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(std::shared_ptr<Store> store, int rank,
                                                     int world_size, const GlooOptions& opts) {
  KILN_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank {} of {}", rank, world_size);
  KILN_CHECK(store != nullptr && !opts.group_name.empty());
  GroupSpec g;
  g.root = store;
  g.timeout = opts.timeout;
  g.name = opts.group_name;
  g.rank = rank;
  g.size = world_size;
  g.watchdog = opts.watchdog;
  g.staging = opts.staging_backend;
  g.shm = opts.same_host_shm;
  if (g.staging != nullptr) g.pool = std::make_shared<PinnedPool>(*g.staging);
  for (int r = 0; r < world_size; ++r) g.world_ranks.push_back(r);

  // Whether some rank is on another host: it picks the interface (unless a host name is given)
  // and, with authenticate auto, the transport.
  const bool need_remote =
      opts.hostname.empty() || (opts.authenticate == PairAuth::kAuto && !opts.pair_token.empty());
  bool remote = false;
  if (need_remote) {
    PrefixStore group_store(opts.group_name, store);
    try {
      remote = peers_remote(group_store, rank, world_size, opts.timeout);
    } catch (const std::exception& e) {
      fail("gloo rendezvous of group {} (rank {} of {}) failed: {}", opts.group_name, rank,
           world_size, e.what());
    }
  }
  // Without a token (a caller that has none) auto means Gloo's own transport.
  g.authenticated = opts.authenticate == PairAuth::kOn ||
                    (!opts.pair_token.empty() && pairs_authenticate(opts.authenticate, remote));
  KILN_CHECK(!g.authenticated || !opts.pair_token.empty(),
             "dist.authenticate_pairs is on but rank {} of group {} has no token to authenticate "
             "its pairs with (KILN_STORE_TOKEN)",
             rank, opts.group_name);
  gloo::transport::tcp::attr attr;
  if (!opts.hostname.empty()) {
    attr.hostname = opts.hostname;
  } else {
    attr.iface = choose_interface(opts.ifname, remote, list_interfaces());
    attr.ai_family = AF_INET;  // list_interfaces() reports IPv4; bind the address it reported
  }
  gloo::transport::tcp::attr resolved;
  try {
    resolved = gloo::transport::tcp::CreateDeviceAttr(attr);
  } catch (const std::exception& e) {
    fail("gloo: cannot use {} '{}' (rank {} of {}): {}", attr.iface.empty() ? "host" : "interface",
         attr.iface.empty() ? attr.hostname : attr.iface, rank, world_size, e.what());
  }
  g.address = sockaddr_ip(resolved.ai_addr);
  g.iface = attr.iface;
  if (g.iface.empty()) {
    for (const auto& i : list_interfaces()) {
      if (i.address == g.address) g.iface = i.name;
    }
    if (g.iface.empty()) g.iface = "?";
  }
  // Built from the resolved attributes so the address recorded is the one bound.
  if (g.authenticated) {
    g.device = auth_tcp::make_auth_device(resolved, opts.pair_token);
  } else {
    g.device = std::make_shared<gloo::transport::tcp::Device>(resolved);
  }
  return std::make_unique<GlooCommunicator>(std::move(g));
}

}  // namespace kiln
