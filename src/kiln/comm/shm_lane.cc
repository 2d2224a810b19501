#include "kiln/comm/shm_lane.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <random>
#include <sstream>
#include <string>

#include "kiln/base/error.h"
#include "kiln/base/log.h"

namespace kiln {

namespace {

using std::chrono::milliseconds;

// Segment layout: the header line, then per rank a cache line each for `ready`, `done` and its
// Post, then (page-aligned) two slots per rank.
struct Header {
  uint64_t cookie;
  uint64_t slot_bytes;
  uint32_t size;
  uint32_t aborted;  // set by a rank whose operation failed: peers stop waiting
};
constexpr size_t kLine = 64;
constexpr size_t kLinesPerRank = 3;

// Where a rank's part of the current direct all-gather lies in its own address space.
struct Post {
  uint64_t address;
  uint64_t bytes;
  int32_t pid;
};

size_t data_offset(int size) {
  const size_t head = kLine + static_cast<size_t>(size) * kLinesPerRank * kLine;
  return (head + 4095) / 4096 * 4096;
}

uint8_t* rank_lines(void* base, int r) {
  return static_cast<uint8_t*>(base) + kLine + r * kLinesPerRank * kLine;
}
uint32_t* ready_counter(void* base, int r) {
  return reinterpret_cast<uint32_t*>(rank_lines(base, r));
}
uint32_t* done_counter(void* base, int r) {
  return reinterpret_cast<uint32_t*>(rank_lines(base, r) + kLine);
}
Post* post(void* base, int r) { return reinterpret_cast<Post*>(rank_lines(base, r) + 2 * kLine); }

// Copies `bytes` from `address` in process `pid` to `out` in one pass (cross-memory attach):
// false with errno set when the kernel refuses.
bool read_peer(pid_t pid, uint64_t address, void* out, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<uint8_t*>(out) + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(address + done), bytes - done};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) {
      if (n == 0) errno = EFAULT;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}
Header* header(void* base) { return static_cast<Header*>(base); }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void publish(uint32_t* counter, uint32_t value) {
  std::atomic_ref<uint32_t>(*counter).store(value, std::memory_order_release);
  ::syscall(SYS_futex, counter, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Waits until *counter has reached `target` (wrapping uint32 order).
void wait_reach(void* base, uint32_t* counter, uint32_t target, ShmLane::Clock::time_point deadline,
                int peer) {
  std::atomic_ref<uint32_t> c(*counter);
  std::atomic_ref<uint32_t> aborted(header(base)->aborted);
  for (int spin = 0;; ++spin) {
    const uint32_t v = c.load(std::memory_order_acquire);
    if (static_cast<int32_t>(v - target) >= 0) return;
    if (aborted.load(std::memory_order_acquire) != 0) {
      fail("shm lane: the group failed on another rank");
    }
    if (spin < 128) {
      cpu_relax();
      continue;
    }
    const auto now = ShmLane::Clock::now();
    if (now >= deadline) fail("shm lane: rank {} did not arrive in time (round {})", peer, target);
    const auto left = std::min<ShmLane::Clock::duration>(deadline - now, milliseconds(50));
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    ::syscall(SYS_futex, counter, FUTEX_WAIT, v, &ts, nullptr, 0);
  }
}

std::string random_hex() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

// Creates and maps a fresh segment (its pages reserved now, so a full /dev/shm fails here and
// not with SIGBUS later); null with the reason logged.
void* create_segment(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    KILN_LOG_DEBUG("shm lane: shm_open {}: {}", name, std::strerror(errno));
    return nullptr;
  }
  const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* base =
      err == 0 ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (base == MAP_FAILED) {
    KILN_LOG_DEBUG("shm lane: cannot reserve {} bytes for {}: {}", bytes, name,
                   std::strerror(err != 0 ? err : errno));
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  return base;
}

void* map_segment(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return nullptr;  // another host (or another /dev/shm): no lane
  struct stat st {};
  void* base = ::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == bytes
                   ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                   : MAP_FAILED;
  ::close(fd);
  return base == MAP_FAILED ? nullptr : base;
}

}  // namespace

size_t ShmLane::segment_bytes(int size, size_t slot_bytes) {
  return data_offset(size) + static_cast<size_t>(size) * 2 * slot_bytes;
}

std::unique_ptr<ShmLane> ShmLane::open(Store& store, int rank, int size, milliseconds timeout,
                                       size_t slot_bytes, bool allow_direct) {
  const size_t bytes = segment_bytes(size, slot_bytes);
  std::string name;
  uint64_t cookie = 0;
  void* base = nullptr;
  if (rank == 0) {
    name = "/kiln-" + random_hex();
    cookie = std::stoull(random_hex(), nullptr, 16);
    base = create_segment(name, bytes);
    if (base != nullptr) *header(base) = Header{cookie, slot_bytes, static_cast<uint32_t>(size), 0};
    store.set("shm/segment", to_bytes(base ? fmt::format("{} {}", name, cookie) : std::string()));
  } else {
    std::istringstream in(to_string(store.get("shm/segment", timeout)));
    if (in >> name >> cookie) {
      base = map_segment(name, bytes);
      const Header* h = base ? header(base) : nullptr;
      if (h != nullptr && (h->cookie != cookie || h->size != static_cast<uint32_t>(size) ||
                           h->slot_bytes != slot_bytes)) {
        ::munmap(base, bytes);
        base = nullptr;
      }
    }
  }
  store.set("shm/ok/" + std::to_string(rank), to_bytes(std::string(base ? "1" : "0")));
  bool all = true;
  for (int r = 0; r < size; ++r) {
    all = to_string(store.get("shm/ok/" + std::to_string(r), timeout)) == "1" && all;
  }
  // Every rank has mapped it (or given up): the name is no longer needed.
  if (rank == 0 && base != nullptr) ::shm_unlink(name.c_str());
  if (!all) {
    if (base != nullptr) ::munmap(base, bytes);
    return nullptr;
  }
  std::unique_ptr<ShmLane> lane(new ShmLane(base, bytes, rank, size, slot_bytes));
  lane->direct_ = allow_direct && probe_direct_reads(store, rank, size, cookie, base, timeout);
  return lane;
}

// Whether every rank can read every peer's memory directly (process_vm_readv: same uid, and
// not refused by a seccomp policy or Yama): each reads a probe word every peer posted, and all
// agree. The probe lives on this frame until every rank has answered.
bool ShmLane::probe_direct_reads(Store& store, int rank, int size, uint64_t cookie, void* base,
                                 milliseconds timeout) {
  const uint64_t probe = cookie ^ static_cast<uint64_t>(rank);
  *post(base, rank) = Post{reinterpret_cast<uint64_t>(&probe), sizeof probe, ::getpid()};
  store.set("shm/post/" + std::to_string(rank), to_bytes(std::string("1")));
  bool ok = true;
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    (void)store.get("shm/post/" + std::to_string(q), timeout);
    const Post p = *post(base, q);
    uint64_t seen = 0;
    ok = ok && read_peer(p.pid, p.address, &seen, sizeof seen) &&
         seen == (cookie ^ static_cast<uint64_t>(q));
  }
  if (!ok) KILN_LOG_DEBUG("shm lane: no direct reads between ranks: {}", std::strerror(errno));
  store.set("shm/direct/" + std::to_string(rank), to_bytes(std::string(ok ? "1" : "0")));
  bool all = true;
  for (int q = 0; q < size; ++q) {
    all = to_string(store.get("shm/direct/" + std::to_string(q), timeout)) == "1" && all;
  }
  return all;
}

ShmLane::ShmLane(void* base, size_t bytes, int rank, int size, size_t slot_bytes)
    : base_(base), bytes_(bytes), rank_(rank), size_(size), slot_bytes_(slot_bytes) {}

ShmLane::~ShmLane() { ::munmap(base_, bytes_); }

void ShmLane::abort() {
  std::atomic_ref<uint32_t>(header(base_)->aborted).store(1, std::memory_order_release);
  for (int r = 0; r < size_; ++r) {
    ::syscall(SYS_futex, ready_counter(base_, r), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
    ::syscall(SYS_futex, done_counter(base_, r), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
}

uint8_t* ShmLane::slot(int rank, uint32_t round) const {
  return static_cast<uint8_t*>(base_) + data_offset(size_) +
         (static_cast<size_t>(rank) * 2 + (round & 1)) * slot_bytes_;
}

uint8_t* ShmLane::begin_round(Clock::time_point deadline) {
  ++round_;
  for (int q = 0; q < size_; ++q) {
    if (q != rank_) wait_reach(base_, done_counter(base_, q), round_ - 2, deadline, q);
  }
  return slot(rank_, round_);
}

void ShmLane::publish_and_wait(Clock::time_point deadline) {
  publish(ready_counter(base_, rank_), round_);
  for (int q = 0; q < size_; ++q) {
    if (q != rank_) wait_reach(base_, ready_counter(base_, q), round_, deadline, q);
  }
}

void ShmLane::end_round() { publish(done_counter(base_, rank_), round_); }

void ShmLane::all_gather(void* out, const void* in, size_t bytes, Clock::time_point deadline) {
  auto* out8 = static_cast<uint8_t*>(out);
  const auto* in8 = static_cast<const uint8_t*>(in);
  if (in8 != out8 + rank_ * bytes) std::memmove(out8 + rank_ * bytes, in8, bytes);
  const uint8_t* mine = out8 + rank_ * bytes;
  if (direct_ && bytes >= kDirectMinBytes) return all_gather_direct(out8, mine, bytes, deadline);
  for (size_t off = 0; off < bytes; off += slot_bytes_) {
    const size_t len = std::min(slot_bytes_, bytes - off);
    std::memcpy(begin_round(deadline), mine + off, len);
    publish_and_wait(deadline);
    for (int q = 0; q < size_; ++q) {
      if (q != rank_) std::memcpy(out8 + q * bytes + off, slot(q, round_), len);
    }
    end_round();
  }
}

// One round: every rank posts where its part lies, and each reads its peers' parts straight
// from their memory (one copy instead of two through the slots); a rank returns only once
// every peer has read its part, which the caller may then change.
void ShmLane::all_gather_direct(uint8_t* out, const uint8_t* mine, size_t bytes,
                                Clock::time_point deadline) {
  ++round_;
  *post(base_, rank_) = Post{reinterpret_cast<uint64_t>(mine), bytes, ::getpid()};
  publish_and_wait(deadline);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const Post p = *post(base_, q);
    if (p.bytes != bytes || !read_peer(p.pid, p.address, out + q * bytes, bytes)) {
      fail("shm lane: cannot read rank {}'s part ({} bytes posted, {} expected): {}", q, p.bytes,
           bytes, std::strerror(errno));
    }
  }
  end_round();
  for (int q = 0; q < size_; ++q) {
    if (q != rank_) wait_reach(base_, done_counter(base_, q), round_, deadline, q);
  }
}

void ShmLane::reduce_scatter(void* out, const void* in, size_t n, size_t elem, ReduceFn fn,
                             Clock::time_point deadline) {
  const size_t part = n * elem;
  const auto* in8 = static_cast<const uint8_t*>(in);
  auto* out8 = static_cast<uint8_t*>(out);
  // The fold below writes `out` before a rank above 1 adds its own contribution: when `out`
  // aliases that contribution, it is read from a copy in this rank's slot.
  const bool own_copied = rank_ >= 2 && out8 == in8 + rank_ * part;
  // A slot carries a piece of every rank's part; pieces stay whole elements and cache lines.
  const size_t piece = std::max(elem, slot_bytes_ / size_ / (kLine * elem) * (kLine * elem));
  for (size_t off = 0; off < part; off += piece) {
    const size_t len = std::min(piece, part - off);
    uint8_t* mine = begin_round(deadline);
    for (int p = 0; p < size_; ++p) {
      if (p != rank_ || own_copied) std::memcpy(mine + p * piece, in8 + p * part + off, len);
    }
    publish_and_wait(deadline);
    auto src = [&](int q) -> const void* {
      return q == rank_ && !own_copied ? in8 + rank_ * part + off : slot(q, round_) + rank_ * piece;
    };
    // In rank order, from the first two.
    fn(out8 + off, src(0), src(1), len / elem);
    for (int q = 2; q < size_; ++q) fn(out8 + off, out8 + off, src(q), len / elem);
    end_round();
  }
}

void ShmLane::all_reduce(void* data, size_t n, size_t elem, ReduceFn fn,
                         Clock::time_point deadline) {
  auto* d8 = static_cast<uint8_t*>(data);
  const size_t bytes = n * elem;
  const size_t chunk = slot_bytes_ / elem * elem;
  for (size_t off = 0; off < bytes; off += chunk) {
    const size_t len = std::min(chunk, bytes - off);
    std::memcpy(begin_round(deadline), d8 + off, len);
    publish_and_wait(deadline);
    // Every rank folds the same slots in the same order: identical results everywhere.
    fn(d8 + off, slot(0, round_), slot(1, round_), len / elem);
    for (int q = 2; q < size_; ++q) fn(d8 + off, d8 + off, slot(q, round_), len / elem);
    end_round();
  }
}

}  // namespace kiln
