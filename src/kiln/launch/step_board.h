// The step each local worker last began, shared with its agent through memory, so the agent's
// failure line names the step a worker died in even when it was killed a moment after beginning
// it (the hang watchdog publishes steps to the store only twice a second).
//
// The agent makes one memfd of `slots` int64 values (one per local rank) that its workers
// inherit (KILN_STEP_FD); a worker maps it and stores its step at every begin_step, one relaxed
// 8-byte store; the agent reads a slot after the worker has exited.
#pragma once

#include <cstdint>
#include <optional>

namespace kiln {

class StepBoard {
 public:
  // The agent's side: a fresh board of `slots` slots, each -1 (no step yet), inherited by the
  // processes it spawns.
  static StepBoard create(int slots);
  // A worker's side: the board its agent passed in KILN_STEP_FD (nullopt when there is none).
  static std::optional<StepBoard> inherited(int slots);

  StepBoard(StepBoard&& o) noexcept;
  StepBoard& operator=(StepBoard&&) = delete;
  StepBoard(const StepBoard&) = delete;
  ~StepBoard();

  // The descriptor the spawned workers find in KILN_STEP_FD.
  int fd() const { return fd_; }
  void set(int slot, int64_t step);
  int64_t get(int slot) const;  // -1: no step begun
  void reset();                 // every slot back to -1, before a new attempt

 private:
  StepBoard(int fd, int slots);
  int fd_ = -1;
  int slots_ = 0;
  int64_t* data_ = nullptr;
};

}  // namespace kiln
