#include "kernels/emul/block_run.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "kernels/emul/device_state.h"
#include "kernels/emul/fiber.h"
#include "kernels/emul/warp_ops.h"

namespace kiln::emul {

namespace {
// The block whose thread this OS thread is running (null outside emulated threads).
thread_local BlockRun* tl_block = nullptr;

const char* op_name(WarpOpKind k) {
  switch (k) {
    case WarpOpKind::kShuffle:
      return "a warp shuffle";
    case WarpOpKind::kVote:
      return "a warp vote";
    case WarpOpKind::kSyncWarp:
      return "__syncwarp";
    case WarpOpKind::kLdmatrix:
      return "ldmatrix";
    case WarpOpKind::kMma:
      return "mma.sync";
    case WarpOpKind::kNone:
      break;
  }
  return "nothing";
}
}  // namespace

std::string site_text(const Site& s) {
  const char* slash = std::strrchr(s.file, '/');
  return fmt::format("{}:{}", slash != nullptr ? slash + 1 : s.file, s.line);
}

BlockRun::BlockRun(const LaunchRun& launch, uint3 index, uint32_t linear)
    : launch_(launch), index_(index), linear_(linear) {
  const int n = launch.threads;
  threads_.resize(static_cast<size_t>(n));
  warps_.resize(static_cast<size_t>((n + 31) / 32));
  Device& d = Device::get();
  for (int t = 0; t < n; ++t) {
    Thread& th = threads_[static_cast<size_t>(t)];
    th.block = this;
    th.id = t;
    th.fiber = &d.fiber(t);
    th.fiber->reset(&BlockRun::thread_main, &th);
    ready_.push_back(t);
  }
}

BlockRun* BlockRun::current() { return tl_block; }

uint3 BlockRun::thread_index(int t) const {
  const unsigned bx = launch_.block.x, by = launch_.block.y;
  const auto u = static_cast<unsigned>(t);
  return {u % bx, u / bx % by, u / (bx * by)};
}

bool BlockRun::on_own_stack(uintptr_t addr) const {
  const Fiber* f = threads_[static_cast<size_t>(current_)].fiber;
  return addr >= reinterpret_cast<uintptr_t>(f->stack_low()) &&
         addr < reinterpret_cast<uintptr_t>(f->stack_high());
}

void BlockRun::run() {
  Device& d = Device::get();
  first_epoch_ = epoch_ = d.new_epoch();
  while (!ready_.empty() && !faulted_) {
    current_ = ready_.front();
    ready_.pop_front();
    tl_block = this;
    threads_[static_cast<size_t>(current_)].fiber->resume();
    tl_block = nullptr;
  }
  current_ = -1;
  if (!faulted_ && exited_ < launch_.threads) deadlock();
}

void BlockRun::thread_main(void* arg) {
  auto* th = static_cast<Thread*>(arg);
  th->block->launch_.body(th->block->launch_.body_arg);
  th->block->exit_thread();
}

void BlockRun::suspend() { threads_[static_cast<size_t>(current_)].fiber->suspend(); }

std::string BlockRun::where(int t) const {
  const uint3 ti = thread_index(t);
  const Thread& th = threads_[static_cast<size_t>(t)];
  return fmt::format("{} block ({},{},{}) thread ({},{},{}){}", launch_.name, index_.x, index_.y,
                     index_.z, ti.x, ti.y, ti.z,
                     th.synced ? " after " + site_text(th.site) : std::string());
}

void BlockRun::fault(const std::string& what) {
  Device::get().fault(fmt::format("{}: {}", where(current_), what));
  faulted_ = true;
  suspend();  // never resumed: the block is abandoned
  __builtin_unreachable();
}

void BlockRun::barrier(const Site& site) {
  Thread& me = threads_[static_cast<size_t>(current_)];
  me.state = State::kBarrier;
  me.site = site;
  me.synced = true;
  if (exited_ > 0) {
    for (const Thread& t : threads_) {
      if (t.state == State::kExited) {
        fault(fmt::format("__syncthreads at {} is never reached by thread {}, which has exited",
                          site_text(site), t.id));
      }
    }
  }
  // A lane of this warp waiting at a warp operation that needs this thread can never finish.
  const WarpOp& op = warps_[static_cast<size_t>(current_ / 32)];
  if (op.arrived != 0 && (op.mask >> (current_ % 32) & 1u) != 0) {
    fault(fmt::format("__syncthreads at {} while lanes of its warp wait for it at {} at {}",
                      site_text(site), op_name(op.kind), site_text(op.site)));
  }
  warps_[static_cast<size_t>(current_ / 32)].at_barrier |= 1u << (current_ % 32);
  if (++at_barrier_ < launch_.threads) {
    suspend();
    return;
  }
  for (const Thread& t : threads_) {
    if (!(t.site == site)) {
      fault(fmt::format("threads meet at different __syncthreads: thread {} at {}, thread {} at {}",
                        t.id, site_text(t.site), current_, site_text(site)));
    }
  }
  at_barrier_ = 0;
  for (WarpOp& w : warps_) w.at_barrier = 0;
  epoch_ = Device::get().new_epoch();
  ++Device::get().stats().barriers;
  for (Thread& t : threads_) {
    t.state = State::kReady;
    if (t.id != current_) ready_.push_back(t.id);
  }
}

void BlockRun::exit_thread() {
  Thread& me = threads_[static_cast<size_t>(current_)];
  if (at_barrier_ > 0) {
    for (const Thread& t : threads_) {
      if (t.state == State::kBarrier) {
        fault(fmt::format("exits while {} threads wait at __syncthreads at {}", at_barrier_,
                          site_text(t.site)));
      }
    }
  }
  const WarpOp& op = warps_[static_cast<size_t>(current_ / 32)];
  if (op.arrived != 0 && (op.mask >> (current_ % 32) & 1u) != 0) {
    fault(fmt::format("exits while lanes of its warp wait for it at {} at {}", op_name(op.kind),
                      site_text(op.site)));
  }
  me.state = State::kExited;
  warps_[static_cast<size_t>(current_ / 32)].exited |= 1u << (current_ % 32);
  ++exited_;
  suspend();  // never resumed
  __builtin_unreachable();
}

void BlockRun::check_lanes_can_arrive(const WarpOp& op, int warp) {
  const unsigned stuck = op.mask & ~op.arrived & (op.exited | op.at_barrier);
  if (stuck == 0) return;
  const int l = std::countr_zero(stuck);
  const Thread& t = threads_[static_cast<size_t>(warp * 32 + l)];
  if (t.state == State::kExited) {
    fault(fmt::format("{} at {} waits for lane {}, which has exited", op_name(op.kind),
                      site_text(op.site), l));
  }
  fault(fmt::format("{} at {} waits for lane {}, which waits at __syncthreads at {}",
                    op_name(op.kind), site_text(op.site), l, site_text(t.site)));
}

void BlockRun::warp_op(WarpOpKind kind, int variant, unsigned mask, const void* in, size_t in_bytes,
                       int arg, void* out, size_t out_bytes, const Site& site) {
  const int warp = current_ / 32, lane = current_ % 32;
  const int lanes = std::min(32, launch_.threads - warp * 32);
  const unsigned exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  Thread& me = threads_[static_cast<size_t>(current_)];
  me.site = site;
  me.synced = true;
  if ((mask >> lane & 1u) == 0) {
    fault(fmt::format("{} at {} with mask {:#x}, which leaves this lane out", op_name(kind),
                      site_text(site), mask));
  }
  if ((mask & ~exists) != 0) {
    fault(fmt::format("{} at {} with mask {:#x}: the warp has only {} lanes", op_name(kind),
                      site_text(site), mask, lanes));
  }
  WarpOp& op = warps_[static_cast<size_t>(warp)];
  if (op.arrived == 0) {
    op.kind = kind;
    op.variant = variant;
    op.mask = mask;
    op.site = site;
  } else if (op.kind != kind || op.variant != variant || op.mask != mask || !(op.site == site)) {
    fault(fmt::format("lanes of one warp at different warp operations: {} at {} and {} at {}",
                      op_name(op.kind), site_text(op.site), op_name(kind), site_text(site)));
  }
  std::memcpy(op.lanes[lane].in, in, in_bytes);
  op.lanes[lane].arg = arg;
  op.arrived |= 1u << lane;
  check_lanes_can_arrive(op, warp);
  if (op.arrived != op.mask) {
    me.state = State::kWarpOp;
    suspend();
  } else {
    complete_warp_op(op, warp);
  }
  std::memcpy(out, op.lanes[lane].out, out_bytes);
}

void BlockRun::complete_warp_op(WarpOp& op, int warp) {
  compute_warp_op(*this, op, warp);
  ++Device::get().stats().warp_ops;
  const unsigned lanes = op.mask;
  op.arrived = 0;
  for (int l = 0; l < 32; ++l) {
    const int t = warp * 32 + l;
    if ((lanes >> l & 1u) == 0 || t == current_) continue;
    threads_[static_cast<size_t>(t)].state = State::kReady;
    ready_.push_back(t);
  }
}

void BlockRun::deadlock() {
  std::string waits;
  for (const Thread& t : threads_) {
    if (t.state == State::kExited) continue;
    waits += fmt::format(" thread {} at {};", t.id, site_text(t.site));
    if (waits.size() > 300) break;
  }
  Device::get().fault(
      fmt::format("{} block ({},{},{}): deadlock, {} of {} threads exited, waiting:{}",
                  launch_.name, index_.x, index_.y, index_.z, exited_, launch_.threads, waits));
  faulted_ = true;
}

}  // namespace kiln::emul
