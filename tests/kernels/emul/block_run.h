// One block of an emulated launch: its threads as fibers, run until each reaches a barrier, a warp
// operation or its end; barriers and warp operations complete when every thread (lane of the
// mask) has reached them. What cannot complete, and every checked fault, ends the block and the
// launch (Device::fault).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "kernels/emul/memory_map.h"
#include "kernels/emul/runtime_api.h"
#include "kernels/emul/site.h"

namespace kiln::emul {

class Fiber;

// What every block of a launch shares.
struct LaunchRun {
  const char* name;
  dim3 grid, block;
  size_t dynamic_shared;
  int threads;          // per block
  void (*body)(void*);  // runs the kernel for the current thread
  void* body_arg;
  uintptr_t params_begin, params_end;  // the launch's argument values (read-only)
  Region* shared_arena;                // dynamic shared memory, or null
  uint32_t first_epoch;                // accesses from epochs before it belong to earlier launches
};

enum class WarpOpKind { kNone, kShuffle, kVote, kSyncWarp, kLdmatrix, kMma };

// One lane's part of a warp operation.
struct LaneSlot {
  alignas(16) unsigned char in[48];
  alignas(16) unsigned char out[16];
  int arg;
};

struct WarpOp {
  WarpOpKind kind = WarpOpKind::kNone;
  int variant = 0;  // shuffle or vote kind, width, ldmatrix transposition: the same in every lane
  unsigned mask = 0, arrived = 0;
  unsigned exited = 0, at_barrier = 0;  // lanes of the warp that cannot arrive
  Site site;
  LaneSlot lanes[32];
};

class BlockRun {
 public:
  BlockRun(const LaunchRun& launch, uint3 index, uint32_t linear);
  // Runs the block to its end or to a fault.
  void run();

  // The block the calling emulated thread belongs to (null on any other thread) and its index.
  static BlockRun* current();
  int current_thread() const { return current_; }

  const LaunchRun& launch() const { return launch_; }
  uint3 index() const { return index_; }
  uint3 thread_index(int t) const;
  // Launch-wide thread id (for race tracking) and the epochs of this block.
  uint32_t global_thread(int t) const {
    return linear_ * static_cast<uint32_t>(launch_.threads) + t;
  }
  uint32_t epoch() const { return epoch_; }
  uint32_t first_epoch() const { return first_epoch_; }
  // The current thread's stack, where its locals live.
  bool on_own_stack(uintptr_t addr) const;

  // Emulated-thread side.
  void barrier(const Site& site);
  // Reaches a warp operation: `in` is this lane's input, `out` receives its result once every lane
  // of the mask has arrived (compute: warp_ops.h).
  void warp_op(WarpOpKind kind, int variant, unsigned mask, const void* in, size_t in_bytes,
               int arg, void* out, size_t out_bytes, const Site& site);
  [[noreturn]] void fault(const std::string& what);
  // "kernel k block (x,y,z) thread (x,y,z) after <site>": the context of a fault.
  std::string where(int t) const;

 private:
  enum class State { kReady, kBarrier, kWarpOp, kExited };
  struct Thread {
    BlockRun* block;
    int id;
    Fiber* fiber;
    State state = State::kReady;
    Site site;            // where it last synchronised (or exited)
    bool synced = false;  // site is set
  };
  static void thread_main(void* arg);
  void exit_thread();
  void suspend();
  void check_lanes_can_arrive(const WarpOp& op, int warp);
  void complete_warp_op(WarpOp& op, int warp);
  void deadlock();

  const LaunchRun& launch_;
  uint3 index_;
  uint32_t linear_;
  std::vector<Thread> threads_;
  std::vector<WarpOp> warps_;
  std::deque<int> ready_;
  int current_ = -1;
  int at_barrier_ = 0, exited_ = 0;
  uint32_t epoch_ = 0, first_epoch_ = 0;
  bool faulted_ = false;
};

std::string site_text(const Site& s);

}  // namespace kiln::emul
