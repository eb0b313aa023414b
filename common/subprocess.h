// Subprocess: a child process started from an argv, with its stdout readable line by line.
// The one part of common/ that touches the OS beyond reading files: the load harness starts
// nodes and redis-server with it, and integration tests start real binaries.
//
// The destructor stops the child: SIGTERM, then SIGKILL if it has not exited within 5 s.
// The child is also killed when the thread that started it ends (PR_SET_PDEATHSIG), so a
// crashed parent leaves nothing behind. Not thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "limiter/status.h"

namespace limiter {

class Subprocess {
 public:
  // argv[0] is the program path. stderr is inherited; stdout is a pipe.
  static Result<std::unique_ptr<Subprocess>> Start(const std::vector<std::string>& argv);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  int pid() const { return pid_; }
  // The next line of stdout, without its newline; an error on timeout or end of file.
  Result<std::string> ReadLine(int timeout_ms);
  void Signal(int signal);
  // The exit status (or 128 + signal) once the child has exited, nullopt on timeout.
  std::optional<int> Wait(int timeout_ms);

 private:
  Subprocess(int pid, int stdout_fd) : pid_(pid), stdout_fd_(stdout_fd) {}
  int pid_;
  int stdout_fd_;
  std::string buffered_;
  std::optional<int> status_;
};

// A TCP port free on 127.0.0.1 a moment ago, for a cluster whose members must be named
// before they start; 0 when none could be had. Picked at random below the kernel's
// ephemeral range, so that no port-0 listener or outgoing connection takes it meanwhile;
// another caller naming the same port still may: callers start again on a failed bind.
int PickFreePort();

}  // namespace limiter
