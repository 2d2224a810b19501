#include "kiln/launch/worker.h"

#include <omp.h>
#include <signal.h>

#include <cstdlib>
#include <memory>

#include "kiln/base/error.h"
#include "kiln/base/json.h"
#include "kiln/base/log.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/nccl_communicator.h"
#include "kiln/comm/tcp_store.h"
#include "kiln/comm/watchdog.h"
#include "kiln/kernels/device/gpu_assignment.h"
#include "kiln/launch/formation.h"
#include "kiln/launch/step_board.h"

namespace kiln {

namespace {

// The world group and, for Gloo on CUDA, the backend whose compute stream stages its device
// buffers (declared first: it outlives the communicator).
struct WorldGroup {
  std::unique_ptr<Backend> staging;
  std::unique_ptr<Communicator> comm;
};

// Whether fn's backend will be CUDA: what make_backend() decides for the same request.
bool backend_is_cuda(DeviceRequest d, int* visible_gpus) {
  *visible_gpus = 0;
  if (d == DeviceRequest::kCpu) return false;
  *visible_gpus = visible_gpu_count();
  // kCuda in a build without CUDA: make_backend() says so.
  return d == DeviceRequest::kCuda || *visible_gpus > 0;
}

WorldGroup join_world(const WorkerSpec& s, std::shared_ptr<Store> store, GlooOptions go) {
  int gpus = 0;
  const bool cuda = backend_is_cuda(s.device, &gpus);
  // This thread's GPU, before any stream, buffer or NCCL communicator is made on it.
  if (cuda) use_gpu_of_rank(s.local_rank);
  const CommChoice choice = choose_communicator(s.communicator, cuda, s.local_world_size, gpus);
  WorldGroup w;
  if (choice.kind == CommKind::kNccl) {
#ifdef KILN_HAVE_CUDA
    NcclOptions no;
    no.timeout = go.timeout;
    no.group_name = go.group_name;
    no.watchdog = go.watchdog;
    w.comm = make_nccl_communicator(store, s.rank, s.world_size, no);
#else
    fail("NCCL: this kiln was built without CUDA");
#endif
  } else {
    if (choice.kind == CommKind::kGlooStaged) {
      w.staging = make_backend(DeviceRequest::kCuda, ComputeDType::kFp32);
      go.staging_backend = w.staging.get();
    }
    w.comm = make_gloo_communicator(store, s.rank, s.world_size, go);
  }
  // On the CPU nothing is chosen (Gloo, as always): only the GPU cases say why.
  if (s.rank == 0 && cuda) {
    KILN_LOG_INFO("communicator: {} ({})", w.comm->transport(), choice.reason);
  }
  return w;
}

// The ranks of an external launcher agree on the run identity (kiln's agents did so for theirs
// before spawning): each publishes its own and compares it with rank 0's; the lowest rank that
// differs is agreed by an all-reduce, and every rank fails with the same line.
void agree_on_identity(const WorkerSpec& s, Store& store, Communicator& comm,
                       const std::string& ns) {
  const auto key = [&](int rank) { return fmt::format("{}/identity/{}", ns, rank); };
  const auto read = [&](int rank) {
    RunIdentity id;
    const Json j = parse_json(
        to_string(store.get(key(rank),
                            std::chrono::milliseconds(static_cast<int64_t>(s.timeout_s * 1000)))),
        key(rank));
    for (const Json& kv : j)
      id.emplace_back(kv.at(0).get<std::string>(), kv.at(1).get<std::string>());
    return id;
  };
  Json mine = Json::array();
  for (const auto& [k, v] : s.identity) mine.push_back({k, v});
  store.set(key(s.rank), to_bytes(mine.dump()));
  const RunIdentity zero = read(0);
  // The lowest rank that differs (world_size: none), by a max over negated ranks.
  const bool differs = !identity_difference("rank", 0, zero, s.rank, s.identity).empty();
  double lowest = -static_cast<double>(differs ? s.rank : s.world_size);
  comm.all_reduce(&lowest, size_t{1}, ReduceOp::kMax);
  const int r = static_cast<int>(-lowest);
  if (r == s.world_size) return;
  const std::string line = identity_difference("rank", 0, zero, r, read(r));
  comm.barrier();  // rank 0 serves the store: it stays until every rank has read rank r's
  fail("{}", line);
}

}  // namespace

int run_worker(const WorkerSpec& s, const TrainFn& fn) {
  // A peer that dies closes its sockets: writing to them must fail the collective with an error
  // naming it (and mark this rank a casualty), not kill this rank silently with SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  if (s.threads > 0) omp_set_num_threads(s.threads);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(s.timeout_s * 1000));
  std::unique_ptr<TcpStoreServer> server;
  if (s.host_store && s.rank == 0) {
    server = std::make_unique<TcpStoreServer>(s.store_listen, s.store_port, s.token);
  }
  // Store requests get the same bound as collectives: a node cut off from node 0 fails within
  // the timeout instead of waiting on a dead connection.
  TcpStoreOptions so;
  so.io_timeout = timeout;
  auto store = std::make_shared<TcpStore>(s.master_addr, s.store_port, s.token, timeout, so);
  GlooOptions go;
  // Each restart of the group rendezvouses in its own namespace of the (surviving) store.
  const char* attempt = std::getenv("KILN_RESTART_ATTEMPT");
  if (attempt != nullptr) go.group_name = std::string("world-") + attempt;
  if (const char* ifname = std::getenv("KILN_SOCKET_IFNAME")) go.ifname = ifname;
  // KILN_GLOO_SHM=0: bulk collectives over TCP even between ranks of one host.
  if (const char* shm = std::getenv("KILN_GLOO_SHM")) go.same_host_shm = std::string(shm) != "0";
  go.timeout = timeout;
  go.pair_token = s.token;
  go.authenticate = s.authenticate_pairs;
  // The hang watchdog polls the store on a connection of its own, so a request of the
  // communication thread never delays it.
  WatchdogOptions wo;
  wo.ns = "kiln/" + go.group_name;
  wo.rank = s.rank;
  wo.world_size = s.world_size;
  wo.node_rank = s.node_rank;
  wo.timeout = timeout;
  wo.report_dir = s.hang_dir;
  go.watchdog = std::make_shared<HangWatchdog>(
      std::make_shared<TcpStore>(s.master_addr, s.store_port, s.token, timeout, so), wo);
  WorldGroup world = join_world(s, store, go);
  Communicator* comm = world.comm.get();
  if (s.launcher != "kiln-agent" && !s.identity.empty()) {
    agree_on_identity(s, *store, *comm, "kiln/" + go.group_name);
  }
  KILN_LOG_DEBUG("rank {}/{} joined: {}", s.rank, s.world_size, comm->transport());
  WorkerIdentity id;
  id.rank = s.rank;
  id.world_size = s.world_size;
  id.local_rank = s.local_rank;
  id.local_world_size = s.local_world_size;
  id.node_rank = s.node_rank;
  id.num_nodes = s.nnodes;
  id.topology_source = s.topology_source;
  id.launcher = s.launcher;
  id.restart_attempt = attempt != nullptr ? std::atoi(attempt) : 0;
  WorkerContext ctx(std::move(id), *comm, s.run_dir, s.keep_last);
  // Spawned by kiln's agent: the step slot it reads when this worker dies (step_board.h).
  std::shared_ptr<StepBoard> board;
  if (auto b = StepBoard::inherited(s.local_world_size)) {
    board = std::make_shared<StepBoard>(std::move(*b));
  }
  ctx.step_listener = [wd = go.watchdog, board, slot = s.local_rank](int64_t step, bool began) {
    wd->set_step(step, began);
    if (began && board) board->set(slot, step);
  };
  const int rc = fn(ctx);
  // Rank 0 may host the store: everyone finishes with it before it goes away.
  comm->barrier();
  return rc;
}

}  // namespace kiln
