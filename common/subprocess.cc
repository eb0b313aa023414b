#include "common/subprocess.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

namespace limiter {

Result<std::unique_ptr<Subprocess>> Subprocess::Start(const std::vector<std::string>& argv) {
  if (argv.empty()) return Error{"no program to start"};
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Error{std::string("pipe: ") + std::strerror(errno)};
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return Error{std::string("fork: ") + std::strerror(errno)};
  }
  if (pid == 0) {
    // Die with the thread that started us, even if it never got to stop us (a crashed test
    // must not leave nodes behind, holding its output open).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::execvp(args[0], args.data());
    const std::string msg = "cannot run " + argv[0] + ": " + std::strerror(errno) + "\n";
    (void)!::write(STDERR_FILENO, msg.data(), msg.size());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  return std::unique_ptr<Subprocess>(new Subprocess(pid, pipe_fds[0]));
}

Subprocess::~Subprocess() {
  if (!status_) {
    Signal(SIGTERM);
    if (!Wait(5000)) {
      Signal(SIGKILL);
      Wait(5000);
    }
  }
  ::close(stdout_fd_);
}

Result<std::string> Subprocess::ReadLine(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    if (const size_t nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return Error{"timed out waiting for a line of output"};
    pollfd p{stdout_fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(stdout_fd_, buf, sizeof(buf));
    if (n == 0) return Error{"the process closed its output (exited?)"};
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error{std::string("read: ") + std::strerror(errno)};
    }
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

void Subprocess::Signal(int signal) {
  if (!status_) ::kill(pid_, signal);
}

std::optional<int> Subprocess::Wait(int timeout_ms) {
  if (status_) return status_;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return status_;
    }
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

namespace {

// Whether a TCP port is free on 127.0.0.1 now (port 0: any); the port bound, 0 if none.
int BindLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  int bound = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    bound = ntohs(addr.sin_port);
  }
  ::close(fd);
  return bound;
}

// The first port of the kernel's ephemeral range (ip_local_port_range), 32768 unread.
int EphemeralStart() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int first = 0;
  return range >> first && first > 1024 ? first : 32768;
}

}  // namespace

int PickFreePort() {
  // Below the ephemeral range: a port the kernel hands out for port 0 or to an outgoing
  // connection's source could be taken by any socket of the machine before the caller binds
  // it (seen: a cluster test's node refused with "Address already in use"); these are taken
  // only by someone who names them. Random, so that tests side by side rarely meet.
  const int low = 10000;
  const int high = EphemeralStart() - 1;
  if (high - low >= 1000) {
    static thread_local std::mt19937 pick{std::random_device{}()};
    std::uniform_int_distribution<int> port(low, high);
    for (int attempt = 0; attempt < 64; ++attempt) {
      if (const int p = BindLoopback(port(pick))) return p;
    }
  }
  return BindLoopback(0);
}

}  // namespace limiter
