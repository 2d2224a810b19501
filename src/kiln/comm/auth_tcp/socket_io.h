// Blocking socket helpers for the authenticated transport: whole reads and writes, a connect
// bounded by a deadline, and the per-socket options every pair's connection gets.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace kiln::auth_tcp {

using Clock = std::chrono::steady_clock;

// Reads exactly n bytes; false on end of stream or an error (errno says which; 0 at EOF).
bool read_full(int fd, void* data, size_t n);
// Writes exactly n bytes (no SIGPIPE); false on an error. `more`: more follows at once (MSG_MORE),
// so a frame's header and payload share a segment.
bool write_full(int fd, const void* data, size_t n, bool more = false);
// A connected TCP socket to `to`, or -1 with *error set once `deadline` passed or on an error
// that retrying cannot fix.
int connect_until(const sockaddr_storage& to, Clock::time_point deadline, std::string* error);
// Blocking reads and writes on fd fail after `timeout` (0: never).
void set_io_timeout(int fd, std::chrono::milliseconds timeout);
// TCP_NODELAY: the small frames of a collective's handshakes go out at once.
void set_no_delay(int fd);
// "Connection reset by peer", "end of stream" for errno 0.
std::string io_error_text(int err);

}  // namespace kiln::auth_tcp
