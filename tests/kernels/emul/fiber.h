// A user-level context for one emulated GPU thread: its own stack, entered and left by explicit
// switches on the calling OS thread (no kernel involvement, no signal masks). The emulator runs a
// block's threads as fibers, each until it reaches a barrier, a warp operation or its end.
//
// x86-64 switches with a few instructions of its own (callee-saved registers, the SSE and x87
// control words); other architectures use ucontext (slower: a system call per switch).
#pragma once

#include <cstddef>
#include <memory>

namespace kiln::emul {

// The saved state of a context that is not running (the scheduler's or a fiber's).
struct FiberContext;

class Fiber {
 public:
  using Entry = void (*)(void* arg);

  explicit Fiber(size_t stack_bytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Makes the next resume() start entry(arg) from the top of the stack (whatever ran before is
  // abandoned). entry must never return: it ends by switching away for good.
  void reset(Entry entry, void* arg);
  // Runs the fiber from where it stopped; returns when it calls suspend().
  void resume();
  // Called on the fiber: back to whoever resumed it.
  void suspend();

  // The stack's usable range, for telling stack addresses apart from device memory.
  const char* stack_low() const { return stack_low_; }
  const char* stack_high() const { return stack_high_; }

 private:
  char* mapping_ = nullptr;  // guard page + stack
  size_t mapping_bytes_ = 0;
  char* stack_low_ = nullptr;
  char* stack_high_ = nullptr;
  std::unique_ptr<FiberContext> self_, caller_;
};

}  // namespace kiln::emul
