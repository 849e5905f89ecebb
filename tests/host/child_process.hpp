#pragma once
// A test body run in a forked child: so that it can be killed at a chosen
// point, or can change what only a process of its own may (resource limits,
// mount namespaces) without touching the test runner. The child tells its
// parent how far it got through a pipe, and ends with a message: empty when
// all went as it expected, otherwise what went wrong.
#include <sys/types.h>

#include <functional>
#include <string>

namespace sluice::test {

class ChildReport {
 public:
  explicit ChildReport(int fd) : fd_(fd) {}
  // One step done (steps are small numbers, counted from 0).
  void step(unsigned char step) const;

 private:
  int fd_;
};

struct ChildEnd {
  bool killed = false;  // ended by a signal (`signal`), not by exiting
  int signal = 0;
  int exit_code = 0;
  std::string message;  // what the body returned, or the exception that left it
};

class Child {
 public:
  // Forks; the child runs `body`, then exits without running the parent's
  // atexit handlers or destructors (nor the test framework's).
  explicit Child(const std::function<std::string(const ChildReport&)>& body);
  // Kills and reaps a child still running.
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Blocks until the child reports `step` (true) or ends first (false).
  bool wait_for_step(unsigned char step);
  // Blocks until the child stops itself (raise(SIGSTOP)); false if it ended instead.
  bool wait_until_stopped();
  void kill();
  // Reads the child's message and reaps it: for a child that runs to its end, or was killed.
  ChildEnd wait();

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  int steps_fd_ = -1;
  int message_fd_ = -1;
};

// Runs `body` in a child to its end.
ChildEnd run_in_child(const std::function<std::string()>& body);

}  // namespace sluice::test
