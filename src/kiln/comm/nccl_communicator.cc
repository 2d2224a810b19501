#include "kiln/comm/nccl_communicator.h"

#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/comm/nccl_rendezvous.h"
#include "kiln/comm/nccl_transport.h"
#include "kiln/comm/progress_reporter.h"
#include "kiln/comm/sub_group.h"
#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/cuda_stream.h"
#include "kiln/kernels/cuda/stream_scratch.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often the waits and the watcher look at NCCL's state.
constexpr std::chrono::microseconds kPoll{100};

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
  }
  fail("nccl: unsupported dtype {}", dtype_name(t));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMean:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Polls a non-blocking communicator until its pending call settles: ncclSuccess, an error, or
// ncclInProgress still at the deadline.
ncclResult_t settle(ncclComm_t comm, Clock::time_point deadline) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress || Clock::now() >= deadline) return state;
    std::this_thread::sleep_for(kPoll);
  }
}

std::string nccl_error(ncclResult_t r, ncclComm_t comm) {
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  return fmt::format("{}{}{}", ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

// NCCL_DEBUG unset: NCCL's INFO log of INIT and NET goes to a file, for transport_info(). NCCL
// reads these once, at its first call in the process, so this runs before ncclGetUniqueId.
// Returns the file to read ("" : the log goes elsewhere): ours, or one NCCL_DEBUG_FILE already
// names without NCCL's %h/%p patterns (the user's, or ours from an earlier group of this
// process).
std::string route_nccl_log(const NcclOptions& o, int rank) {
  if (std::getenv("NCCL_DEBUG") != nullptr) {
    const char* f = std::getenv("NCCL_DEBUG_FILE");
    return f != nullptr && std::strchr(f, '%') == nullptr ? f : "";
  }
  std::string file = o.debug_file;
  if (file.empty()) {
    file = (std::filesystem::temp_directory_path() /
            fmt::format("kiln-nccl-rank{}-{}.log", rank, static_cast<long>(getpid())))
               .string();
  }
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "INIT,NET", 1);
  setenv("NCCL_DEBUG_FILE", file.c_str(), 1);
  return file;
}

TransportInfo transport_from_log(const std::string& file) {
  if (file.empty()) {
    return {.library = CommLibrary::kNccl,
            .note = "NCCL_DEBUG set without NCCL_DEBUG_FILE: its log is not read"};
  }
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return parse_nccl_transport(text.str());
}

// What the communicator and its Works share: the communicator's health.
struct Health {
  std::mutex mu;
  ncclComm_t comm = nullptr;  // null once aborted or destroyed
  std::string error;          // set once the group failed

  // The failure so far: the recorded one, else NCCL's asynchronous error ("" : healthy).
  std::string check() {
    std::lock_guard<std::mutex> l(mu);
    if (!error.empty() || comm == nullptr) return error.empty() ? "communicator gone" : error;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return nccl_error(r, comm);
    if (state != ncclSuccess && state != ncclInProgress) return nccl_error(state, comm);
    return "";
  }
  // Records the failure and aborts the communicator (once).
  void abort(const std::string& why) {
    std::lock_guard<std::mutex> l(mu);
    if (error.empty()) error = why;
    if (comm != nullptr) {
      ncclCommAbort(comm);
      comm = nullptr;
    }
  }
};

// An op on host buffers leaves its result in pinned memory; the wait copies it out. Where the
// device has no stream-ordered pool, the device staging (cudaMalloc) is freed with it.
struct HostResult {
  void* pinned = nullptr;
  void* out = nullptr;
  size_t bytes = 0;
  void* staging = nullptr;
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<CudaEvent> done, std::shared_ptr<Health> health, std::string what,
           HostResult host = {})
      : done_(std::move(done)), health_(std::move(health)), what_(std::move(what)), host_(host) {}
  ~NcclWork() override {
    if (host_.pinned == nullptr) return;
    cudaEventSynchronize(done_->native());  // the copy into it must be over before it is freed
    cudaFreeHost(host_.pinned);
    if (host_.staging != nullptr) cudaFree(host_.staging);
  }
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  void wait(Stream& stream) override {
    if (host_.pinned != nullptr) {  // host buffers: the result is the host's to copy
      wait_host();
      return;
    }
    throw_if_failed();
    stream.wait(done_);
  }

  void wait_host() override {
    while (true) {
      const cudaError_t q = cudaEventQuery(done_->native());
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) cuda_failed(q, "cudaEventQuery", __FILE__, __LINE__);
      throw_if_failed();
      std::this_thread::sleep_for(kPoll);
    }
    throw_if_failed();
    if (host_.pinned != nullptr) {
      std::memcpy(host_.out, host_.pinned, host_.bytes);
      cudaFreeHost(host_.pinned);
      host_.pinned = nullptr;
      if (host_.staging != nullptr) KILN_CUDA_CHECK(cudaFree(host_.staging));
      host_.staging = nullptr;
    }
  }

 private:
  void throw_if_failed() {
    const std::string err = health_->check();
    if (!err.empty()) fail("nccl {}: {}", what_, err);
  }

  std::shared_ptr<CudaEvent> done_;
  std::shared_ptr<Health> health_;
  std::string what_;
  HostResult host_;
};

struct GroupSpec {
  std::shared_ptr<Store> root;
  std::string name;
  int rank = 0, size = 1;
  std::vector<int> world_ranks;
  milliseconds timeout{300000};
  std::shared_ptr<HangWatchdog> watchdog;
  TransportInfo transport;
};

// Host buffers of an op with `after` null, and where they sit in the device copy.
struct HostBuffers {
  void* out = nullptr;
  size_t out_bytes = 0;
  const void* in = nullptr;  // may alias out or lie inside it
  size_t in_bytes = 0;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(GroupSpec g, ncclComm_t comm)
      : g_(std::move(g)), store_(std::make_shared<PrefixStore>(g_.name, g_.root)) {
    KILN_CUDA_CHECK(cudaGetDevice(&device_));
    stream_pool_ = cuda::prepare_stream_pool(device_);
    health_->comm = comm;
    stream_ = std::make_unique<CudaStream>();
    progress_ = std::make_unique<ProgressReporter>(store_, "progress/" + std::to_string(g_.rank));
    if (g_.watchdog) wd_group_ = g_.watchdog->add_group(g_.name, g_.rank, g_.world_ranks, store_);
    watcher_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    watcher_.join();
    close();
    stream_.reset();
  }

  int rank() const override { return g_.rank; }
  int world_size() const override { return g_.size; }
  TransportInfo transport_info() const override { return g_.transport; }

  std::unique_ptr<Work> all_reduce_async(void* data, size_t n, DType t, ReduceOp op,
                                         Stream* after) override {
    const size_t bytes = n * dtype_size(t);
    return enqueue("all_reduce", after, {data, bytes, data, bytes},
                   [=](void* out, const void* in, ncclComm_t c, cudaStream_t s) {
                     return ncclAllReduce(in, out, n, nccl_dtype(t), nccl_op(op), c, s);
                   });
  }

  std::unique_ptr<Work> all_gather_async(void* out, const void* in, size_t n, DType t,
                                         Stream* after) override {
    const size_t bytes = n * dtype_size(t);
    return enqueue("all_gather", after, {out, bytes * g_.size, in, bytes},
                   [=](void* o, const void* i, ncclComm_t c, cudaStream_t s) {
                     return ncclAllGather(i, o, n, nccl_dtype(t), c, s);
                   });
  }

  std::unique_ptr<Work> reduce_scatter_async(void* out, const void* in, size_t n, DType t,
                                             ReduceOp op, Stream* after) override {
    const size_t bytes = n * dtype_size(t);
    return enqueue("reduce_scatter", after, {out, bytes, in, bytes * g_.size},
                   [=](void* o, const void* i, ncclComm_t c, cudaStream_t s) {
                     return ncclReduceScatter(i, o, n, nccl_dtype(t), nccl_op(op), c, s);
                   });
  }

  std::unique_ptr<Work> broadcast_async(void* data, size_t n, DType t, int root,
                                        Stream* after) override {
    KILN_CHECK(root >= 0 && root < g_.size, "broadcast root {} outside group of {}", root, g_.size);
    const size_t bytes = n * dtype_size(t);
    return enqueue("broadcast", after, {data, bytes, data, bytes},
                   [=](void* o, const void* i, ncclComm_t c, cudaStream_t s) {
                     return ncclBroadcast(i, o, n, nccl_dtype(t), root, c, s);
                   });
  }

  std::unique_ptr<Work> all_reduce_f64_async(double* data, size_t n, ReduceOp op,
                                             Stream* after) override {
    const size_t bytes = n * sizeof(double);
    return enqueue("all_reduce_f64", after, {data, bytes, data, bytes},
                   [=](void* o, const void* i, ncclComm_t c, cudaStream_t s) {
                     return ncclAllReduce(i, o, n, ncclFloat64, nccl_op(op), c, s);
                   });
  }

  void barrier() override {
    float one = 1;
    all_reduce_async(&one, 1, DType::F32, ReduceOp::kSum, nullptr)->wait_host();
  }

  void all_reduce(double* data, size_t n, ReduceOp op) override {
    all_reduce_f64_async(data, n, op, nullptr)->wait_host();
  }

  std::unique_ptr<Communicator> split(const std::vector<int>& ranks,
                                      const std::string& name) override;

 private:
  using Launch = std::function<ncclResult_t(void* out, const void* in, ncclComm_t, cudaStream_t)>;
  struct Pending {
    int64_t seq = 0;
    const char* name = "";
    std::shared_ptr<CudaEvent> done;
    Clock::time_point start;  // when it became the oldest op not done
    bool started = false;
  };

  std::string where() const {
    return fmt::format("group {}, rank {} of {}", g_.name, g_.rank, g_.size);
  }

  ncclComm_t comm_or_fail(const char* name) {
    const std::string err = health_->check();
    if (!err.empty()) fail("nccl {} ({}) not run: {}", name, where(), err);
    std::lock_guard<std::mutex> l(health_->mu);
    return health_->comm;
  }

  // Enqueues one op on the communicator's stream after `after` (null: `b` is host memory,
  // staged through device memory); returns its Work.
  std::unique_ptr<Work> enqueue(const char* name, Stream* after, HostBuffers b,
                                const Launch& launch) {
    std::lock_guard<std::mutex> serial(enqueue_mu_);
    ncclComm_t comm = comm_or_fail(name);
    const cudaStream_t s = stream_->native();
    const int64_t seq = ++next_seq_;
    if (g_.watchdog) g_.watchdog->op_queued(wd_group_, seq, name);
    progress_->entered(seq);
    void* dev_out = b.out;
    const void* dev_in = b.in;
    void* staging = nullptr;
    if (after != nullptr) {
      stream_->wait(after->record());
    } else {
      stage_in(b, s, &staging, &dev_out, &dev_in);
    }
    ncclResult_t r = launch(dev_out, dev_in, comm, s);
    // Non-blocking: the call may still be in progress (the first op's connections wait for the
    // peers); the next NCCL call waits until it is not.
    if (r == ncclInProgress) r = settle(comm, Clock::now() + g_.timeout);
    if (r != ncclSuccess) {
      if (r == ncclInProgress && g_.watchdog) g_.watchdog->on_timeout(wd_group_, seq);
      const std::string why =
          r == ncclInProgress
              ? fmt::format("nccl {} #{} ({}) not issued after {} ms: {}", name, seq, where(),
                            g_.timeout.count(), ranks_behind(seq))
              : fmt::format("nccl {} #{} ({}) failed: {}", name, seq, where(), nccl_error(r, comm));
      if (g_.watchdog) g_.watchdog->op_finished(wd_group_, seq, false);
      health_->abort(why);
      fail("{}", why);
    }
    auto op_done = std::make_shared<CudaEvent>(s, false);
    {
      std::lock_guard<std::mutex> l(mu_);
      pending_.push_back(Pending{seq, name, op_done, Clock::now(), false});
    }
    cv_.notify_all();
    if (staging == nullptr) {
      return std::make_unique<NcclWork>(op_done, health_, fmt::format("{} #{}", name, seq));
    }
    // Pinned, so the copy never blocks the host (a blocked issuer would keep the watcher from
    // aborting a hung collective).
    HostResult host{nullptr, b.out, b.out_bytes, stream_pool_ ? nullptr : staging};
    KILN_CUDA_CHECK(cudaMallocHost(&host.pinned, b.out_bytes + 1));
    KILN_CUDA_CHECK(cudaMemcpyAsync(host.pinned, dev_out, b.out_bytes, cudaMemcpyDeviceToHost, s));
    if (stream_pool_) KILN_CUDA_CHECK(cudaFreeAsync(staging, s));
    return std::make_unique<NcclWork>(std::make_shared<CudaEvent>(s, false), health_,
                                      fmt::format("{} #{}", name, seq), host);
  }

  // Copies host input into device memory (stream-ordered where the device has a pool, else
  // cudaMalloc, freed by the op's Work): out's copy, with `in` placed where it aliases out
  // (all_gather in place, all_reduce), else after it.
  void stage_in(const HostBuffers& b, cudaStream_t s, void** staging, void** dev_out,
                const void** dev_in) {
    const auto* out8 = static_cast<const uint8_t*>(b.out);
    const auto* in8 = static_cast<const uint8_t*>(b.in);
    const bool inside = in8 >= out8 && in8 + b.in_bytes <= out8 + b.out_bytes;
    const size_t bytes = b.out_bytes + (inside ? 0 : b.in_bytes) + 1;
    if (stream_pool_) {
      KILN_CUDA_CHECK(cudaMallocAsync(staging, bytes, s));
    } else {
      KILN_CUDA_CHECK(cudaMalloc(staging, bytes));
    }
    auto* base = static_cast<uint8_t*>(*staging);
    *dev_out = base;
    uint8_t* din = inside ? base + (in8 - out8) : base + b.out_bytes;
    *dev_in = din;
    if (b.in_bytes > 0) {
      KILN_CUDA_CHECK(cudaMemcpyAsync(din, b.in, b.in_bytes, cudaMemcpyHostToDevice, s));
    }
  }

  // The watcher: marks ops done in order, and aborts the group when the oldest is late.
  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      cv_.wait(l, [&] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      if (pending_.empty()) continue;
      if (!pending_.front().started) {
        // Its time starts when the ops before it are done: a prefetch queued early is not late.
        pending_.front().started = true;
        pending_.front().start = Clock::now();
        if (g_.watchdog) g_.watchdog->op_started(wd_group_, pending_.front().seq);
      }
      Pending p = pending_.front();
      l.unlock();
      const bool done = cudaEventQuery(p.done->native()) == cudaSuccess;
      const std::string err = done ? "" : health_->check();
      const bool late = !done && Clock::now() - p.start >= g_.timeout;
      if (!done && err.empty() && !late) {
        std::this_thread::sleep_for(kPoll);
        l.lock();
        continue;
      }
      if (!done) fail_op(p, err, late);
      if (g_.watchdog) g_.watchdog->op_finished(wd_group_, p.seq, done);
      l.lock();
      if (!pending_.empty() && pending_.front().seq == p.seq) pending_.pop_front();
      if (!done) {
        for (const Pending& q : pending_) {
          if (g_.watchdog) g_.watchdog->op_finished(wd_group_, q.seq, false);
        }
        pending_.clear();
      }
    }
  }

  void fail_op(const Pending& p, const std::string& err, bool late) {
    if (late && g_.watchdog) g_.watchdog->on_timeout(wd_group_, p.seq);
    progress_->publish(p.seq);
    const std::string why =
        late ? fmt::format("nccl {} #{} ({}) not done after {} ms: {}", p.name, p.seq, where(),
                           g_.timeout.count(), ranks_behind(p.seq))
             : fmt::format("nccl {} #{} ({}) failed: {}", p.name, p.seq, where(), err);
    {
      // Not while an op is being issued on the communicator.
      std::lock_guard<std::mutex> serial(enqueue_mu_);
      health_->abort(why);
    }
    try {
      store_->set("failed", to_bytes(fmt::format("rank {} at {} #{}", g_.rank, p.name, p.seq)));
      store_->set("failed/" + std::to_string(g_.rank), to_bytes(std::string(p.name)));
    } catch (const std::exception&) {
      // Only a hint for the peers; the failure itself reaches every wait.
    }
  }

  // Who never entered op `seq`, from the published progress ("ranks 1, 3 did not arrive").
  std::string ranks_behind(int64_t seq) {
    std::vector<int> behind;
    for (int r = 0; r < g_.size; ++r) {
      if (r == g_.rank) continue;
      int64_t seen = -1;
      try {
        const std::string key = "progress/" + std::to_string(r);
        if (store_->check({key})) seen = std::stoll(to_string(store_->get(key, milliseconds(100))));
      } catch (const std::exception&) {
      }
      if (seen < seq) behind.push_back(g_.world_ranks[r]);
    }
    return behind.empty() ? "every rank entered it (a hang inside NCCL or the network)"
                          : describe_not_arrived(behind);
  }

  void close() {
    std::lock_guard<std::mutex> l(health_->mu);
    if (health_->comm == nullptr) return;
    ncclComm_t comm = health_->comm;
    health_->comm = nullptr;
    const ncclResult_t f = ncclCommFinalize(comm);
    if ((f == ncclSuccess || f == ncclInProgress) &&
        settle(comm, Clock::now() + g_.timeout) == ncclSuccess) {
      ncclCommDestroy(comm);
      return;
    }
    ncclCommAbort(comm);
  }

  GroupSpec g_;
  std::shared_ptr<Store> store_;  // this group's namespace
  int device_ = 0;
  bool stream_pool_ = false;  // the device has a stream-ordered pool (stream_scratch.h)
  std::shared_ptr<Health> health_ = std::make_shared<Health>();
  std::unique_ptr<CudaStream> stream_;
  std::unique_ptr<ProgressReporter> progress_;
  int wd_group_ = -1;
  std::map<std::string, int> split_count_;

  std::mutex enqueue_mu_;  // ops are issued one at a time, in order
  int64_t next_seq_ = 0;
  std::mutex mu_;  // pending_, stop_
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  bool stop_ = false;
  std::thread watcher_;
};

// Waits for a non-blocking init or split of `comm`; on timeout or error aborts it and fails
// naming the group and the ranks that had not arrived.
void finish_init(ncclComm_t comm, ncclResult_t started, const char* what, Store& group_store,
                 const std::string& group, int rank, int size, milliseconds timeout) {
  ncclResult_t r = started;
  if (comm == nullptr && r == ncclSuccess) r = ncclInternalError;
  if (comm != nullptr && (r == ncclSuccess || r == ncclInProgress)) {
    r = settle(comm, Clock::now() + timeout);
  }
  if (r == ncclSuccess) return;
  const std::string err = r == ncclInProgress ? fmt::format("not done after {} ms", timeout.count())
                                              : nccl_error(r, comm);
  if (comm != nullptr) ncclCommAbort(comm);
  fail("nccl {} of group {} (rank {} of {}) failed: {} ({})", what, group, rank, size, err,
       describe_not_arrived(nccl_ranks_not_arrived(group_store, size)));
}

std::unique_ptr<Communicator> NcclCommunicator::split(const std::vector<int>& ranks,
                                                      const std::string& name) {
  GroupIdentity id =
      sub_group({g_.name, g_.rank, g_.size, g_.world_ranks}, ranks, name, split_count_);
  GroupSpec sub = g_;
  sub.name = std::move(id.name);
  sub.rank = id.rank;
  sub.size = id.size;
  sub.world_ranks = std::move(id.world_ranks);
  PrefixStore sub_store(sub.name, g_.root);
  sub_store.set("nccl/arrived/" + std::to_string(sub.rank), to_bytes("1"));
  std::lock_guard<std::mutex> serial(enqueue_mu_);
  ncclComm_t parent = comm_or_fail("split");
  ncclConfig_t config = nonblocking_config();
  ncclComm_t child = nullptr;
  // color: the group's first member (unique among the groups of one call); key: rank within it.
  const ncclResult_t r = ncclCommSplit(parent, ranks[0], sub.rank, &child, &config);
  finish_init(child, r, "split", sub_store, sub.name, sub.rank, sub.size, g_.timeout);
  return std::make_unique<NcclCommunicator>(std::move(sub), child);
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Store> store, int rank,
                                                     int world_size, const NcclOptions& opts) {
  KILN_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank {} of {}", rank, world_size);
  KILN_CHECK(store != nullptr && !opts.group_name.empty());
  GroupSpec g;
  g.root = store;
  g.name = opts.group_name;
  g.rank = rank;
  g.size = world_size;
  g.timeout = opts.timeout;
  g.watchdog = opts.watchdog;
  for (int r = 0; r < world_size; ++r) g.world_ranks.push_back(r);
  const std::string log_file = route_nccl_log(opts, rank);
  PrefixStore group_store(g.name, store);
  const Bytes id_bytes = exchange_nccl_id(group_store, g.name, rank, world_size, g.timeout, [] {
    ncclUniqueId id;
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) fail("ncclGetUniqueId failed: {}", ncclGetErrorString(r));
    return Bytes(reinterpret_cast<const uint8_t*>(&id),
                 reinterpret_cast<const uint8_t*>(&id) + sizeof id);
  });
  ncclUniqueId id;
  KILN_CHECK(id_bytes.size() == sizeof id, "nccl unique id of {} bytes, expected {}",
             id_bytes.size(), sizeof id);
  std::memcpy(&id, id_bytes.data(), sizeof id);
  ncclConfig_t config = nonblocking_config();
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, world_size, id, rank, &config);
  finish_init(comm, r, "init", group_store, g.name, rank, world_size, g.timeout);
  g.transport = transport_from_log(log_file);
  KILN_LOG_DEBUG("nccl group {} rank {}/{}: {} (NCCL's log: {})", g.name, rank, world_size,
                 transport_text(g.transport), log_file.empty() ? "not kiln's" : log_file);
  return std::make_unique<NcclCommunicator>(std::move(g), comm);
}

}  // namespace kiln
