#include "kiln/launch/step_board.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "kiln/base/error.h"

namespace kiln {

StepBoard::StepBoard(int fd, int slots) : fd_(fd), slots_(slots) {
  const size_t bytes = sizeof(int64_t) * static_cast<size_t>(slots);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    fail("step board: mmap failed: {}", std::strerror(err));
  }
  data_ = static_cast<int64_t*>(p);
}

StepBoard StepBoard::create(int slots) {
  // Not close-on-exec: the workers exec'd by the agent inherit it.
  const int fd = ::memfd_create("kiln-steps", 0);
  if (fd < 0) fail("step board: memfd_create failed: {}", std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(sizeof(int64_t) * slots)) != 0) {
    const int err = errno;
    ::close(fd);
    fail("step board: ftruncate failed: {}", std::strerror(err));
  }
  StepBoard b(fd, slots);
  b.reset();
  return b;
}

std::optional<StepBoard> StepBoard::inherited(int slots) {
  const char* v = std::getenv("KILN_STEP_FD");
  if (v == nullptr || slots < 1) return std::nullopt;
  const int fd = std::atoi(v);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(int64_t) * slots)) {
    return std::nullopt;  // not the agent's board: no step slot, nothing else changes
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // nothing this worker runs needs it
  return StepBoard(fd, slots);
}

StepBoard::StepBoard(StepBoard&& o) noexcept : fd_(o.fd_), slots_(o.slots_), data_(o.data_) {
  o.fd_ = -1;
  o.data_ = nullptr;
}

StepBoard::~StepBoard() {
  if (data_ != nullptr) ::munmap(data_, sizeof(int64_t) * static_cast<size_t>(slots_));
  if (fd_ >= 0) ::close(fd_);
}

void StepBoard::set(int slot, int64_t step) {
  if (slot >= 0 && slot < slots_) __atomic_store_n(&data_[slot], step, __ATOMIC_RELAXED);
}

int64_t StepBoard::get(int slot) const {
  if (slot < 0 || slot >= slots_) return -1;
  return __atomic_load_n(&data_[slot], __ATOMIC_RELAXED);
}

void StepBoard::reset() {
  for (int i = 0; i < slots_; ++i) set(i, -1);
}

}  // namespace kiln
