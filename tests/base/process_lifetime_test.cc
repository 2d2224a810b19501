// process_lifetime: the object is made once and its destructor never runs, not even at exit,
// while an ordinary static's does (the control, so the test can fail).
#include "kiln/base/process_lifetime.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace kiln {
namespace {

// Writes its tag to `fd` when destroyed.
struct Probe {
  Probe(int fd, char tag) : fd(fd), tag(tag) {}
  Probe(Probe&& o) noexcept : fd(o.fd), tag(o.tag) { o.fd = -1; }
  ~Probe() {
    if (fd >= 0) static_cast<void>(write(fd, &tag, 1));
  }
  int fd;
  char tag;
};

TEST(ProcessLifetime, MadeOnceAndNeverDestroyed) {
  int made = 0;
  const auto make = [&made] {
    ++made;
    return Probe(-1, 'x');
  };
  Probe& a = process_lifetime<Probe>(make);
  Probe& b = process_lifetime<Probe>(make);
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(made, 1);
}

TEST(ProcessLifetime, DestructorDoesNotRunAtExit) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    static Probe ordinary(fds[1], 's');  // destroyed at exit: writes 's'
    process_lifetime<Probe>([&] { return Probe(fds[1], 'p'); });
    std::exit(0);  // runs the static destructors
  }
  close(fds[1]);
  std::string seen;
  char c;
  while (read(fds[0], &c, 1) == 1) seen += c;
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(seen, "s");  // the ordinary static's destructor ran, process_lifetime's did not
}

}  // namespace
}  // namespace kiln
