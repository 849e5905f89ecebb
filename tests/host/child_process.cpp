#include "child_process.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <exception>
#include <stdexcept>

namespace sluice::test {
namespace {

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t put = ::write(fd, text.data() + done, text.size() - done);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return;
    done += static_cast<std::size_t>(put);
  }
}

std::string read_all(int fd) {
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return text;
    text.append(buffer, static_cast<std::size_t>(got));
  }
}

}  // namespace

void ChildReport::step(unsigned char step) const {
  while (::write(fd_, &step, 1) < 0 && errno == EINTR) {
  }
}

Child::Child(const std::function<std::string(const ChildReport&)>& body) {
  int steps[2], message[2];
  if (::pipe2(steps, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  if (::pipe2(message, O_CLOEXEC) != 0) {
    ::close(steps[0]);
    ::close(steps[1]);
    throw std::runtime_error("pipe failed");
  }
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::close(steps[0]);
    ::close(message[0]);
    std::string said;
    int code = 0;
    try {
      said = body(ChildReport(steps[1]));
    } catch (const std::exception& e) {
      said = std::string("the child's body threw: ") + e.what();
      code = 1;
    } catch (...) {
      said = "the child's body threw";
      code = 1;
    }
    write_all(message[1], said);
    ::_exit(code);
  }
  ::close(steps[1]);
  ::close(message[1]);
  steps_fd_ = steps[0];
  message_fd_ = message[0];
}

Child::~Child() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  if (steps_fd_ >= 0) ::close(steps_fd_);
  if (message_fd_ >= 0) ::close(message_fd_);
}

bool Child::wait_for_step(unsigned char step) {
  unsigned char got = 0;
  for (;;) {
    const ssize_t n = ::read(steps_fd_, &got, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (got >= step) return true;
  }
}

bool Child::wait_until_stopped() {
  int status = 0;
  while (::waitpid(pid_, &status, WUNTRACED) < 0)
    if (errno != EINTR) return false;
  if (WIFSTOPPED(status)) return true;
  reaped_ = true;  // it ended: wait() must not reap it again
  status_ = status;
  return false;
}

void Child::kill() {
  if (pid_ > 0 && !reaped_) ::kill(pid_, SIGKILL);
}

ChildEnd Child::wait() {
  ChildEnd end;
  end.message = read_all(message_fd_);
  int status = status_;
  if (!reaped_)
    while (::waitpid(pid_, &status, 0) < 0)
      if (errno != EINTR) throw std::runtime_error("waitpid failed");
  reaped_ = true;
  end.killed = WIFSIGNALED(status);
  end.signal = end.killed ? WTERMSIG(status) : 0;
  end.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return end;
}

ChildEnd run_in_child(const std::function<std::string()>& body) {
  Child child([&body](const ChildReport&) { return body(); });
  return child.wait();
}

}  // namespace sluice::test
