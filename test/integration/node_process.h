// Starts a real limiterd on loopback, port 0, for integration tests; stops it on destruction.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/subprocess.h"
#include "test/support/build_paths.h"
#include "test/support/wait.h"

namespace limiter::testing {

struct RunningNode {
  std::unique_ptr<Subprocess> process;
  std::string listen;  // host:port
  std::string admin;
};

// A file in the temp dir, named per process: test binaries run side by side.
inline std::string WriteTempFile(const std::string& name, const std::string& text) {
  const std::string path =
      ::testing::TempDir() + "/limiter_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

// Starts limiterd with exactly `args` (after the binary), under `wrapper` (a command such as
// prlimit) when given; fails the test if it does not come up. The addresses come from the
// line it prints when it is ready.
inline RunningNode Launch(std::vector<std::string> args, std::vector<std::string> wrapper = {}) {
  args.insert(args.begin(), LimiterdBin());
  args.insert(args.begin(), wrapper.begin(), wrapper.end());
  RunningNode node;
  Result<std::unique_ptr<Subprocess>> p = Subprocess::Start(args);
  EXPECT_TRUE(p.ok()) << p.error();
  if (!p.ok()) return node;
  node.process = std::move(p).value();
  Result<std::string> line = node.process->ReadLine(20'000);
  EXPECT_TRUE(line.ok()) << line.error();
  if (!line.ok()) return node;
  // "limiterd NAME listening on HOST:PORT admin HOST:PORT threads N policies M"
  std::istringstream words(*line);
  std::string w, prev;
  while (words >> w) {
    if (prev == "on") node.listen = w;
    if (prev == "admin") node.admin = w;
    prev = w;
  }
  EXPECT_FALSE(node.listen.empty()) << *line;
  return node;
}

// A wrapper for Launch for a test that measures the node's resident memory: under
// AddressSanitizer freed blocks are held in a quarantine of up to 256 MiB before they are
// reused, which a test of a memory bound would read as growth; this node keeps none. Other
// builds ignore the variable.
inline std::vector<std::string> WithoutAsanQuarantine() {
  const char* given = std::getenv("ASAN_OPTIONS");
  std::string options = given != nullptr && *given != '\0' ? std::string(given) + ":" : "";
  return {"/usr/bin/env", "ASAN_OPTIONS=" + options + "quarantine_size_mb=0"};
}

// Runs limiterd with `args` when it is expected to stop by itself (a refused start): its
// exit status (-1: it did not stop) and the first line it printed, stderr included.
inline std::pair<int, std::string> RunToExit(const std::vector<std::string>& args) {
  std::string command = LimiterdBin();
  for (const std::string& a : args) command += " '" + a + "'";
  Result<std::unique_ptr<Subprocess>> p = Subprocess::Start({"/bin/sh", "-c", command + " 2>&1"});
  if (!p.ok()) return {-1, p.error()};
  Result<std::string> line = (*p)->ReadLine(20'000);
  const std::optional<int> status = (*p)->Wait(20'000);
  return {status.value_or(-1), line.ok() ? *line : line.error()};
}

// Whether GET /readyz on the admin port "host:port" (IPv4) answers 200.
inline bool Ready(const std::string& admin) {
  const size_t colon = admin.rfind(':');
  if (colon == std::string::npos) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(admin.substr(colon + 1))));
  if (::inet_pton(AF_INET, admin.substr(0, colon).c_str(), &addr.sin_addr) != 1) return false;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  bool ok = false;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string get = "GET /readyz HTTP/1.0\r\n\r\n";
    char buf[64] = {};
    if (::write(fd, get.data(), get.size()) == static_cast<ssize_t>(get.size()) &&
        ::read(fd, buf, sizeof(buf) - 1) > 12) {
      ok = std::string(buf).find(" 200") != std::string::npos;
    }
  }
  ::close(fd);
  return ok;
}

// Waits (bounded) until a node of a cluster serves every key it owns: it starts waiting for
// the keys other members may hold for it (the join, server/peers.h), and says so on /readyz.
inline void WaitReady(const RunningNode& node) {
  EXPECT_TRUE(WaitUntil([&] { return Ready(node.admin); }, std::chrono::seconds(30)))
      << "node " << node.listen << " never became ready";
}

// A standalone node on any free port; add --policies etc.
inline RunningNode StartNode(std::vector<std::string> args) {
  args.insert(args.begin(), {"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"});
  return Launch(std::move(args));
}

// A port free on 127.0.0.1 a moment ago, for a cluster whose members must be named before
// they start (port 0 cannot be: every node needs every address).
using limiter::PickFreePort;

// Starts a node of a cluster on a given address, its member list at `generation`.
// Returns once the node is ready (WaitReady).
inline RunningNode StartMember(const std::string& self, const std::string& members,
                               const std::string& policies, uint64_t generation = 1) {
  RunningNode node = Launch({"--listen", self, "--admin", "127.0.0.1:0", "--members", members,
                             "--self", self, "--policies", policies, "--threads", "1",
                             "--generation", std::to_string(generation)});
  if (!node.admin.empty()) WaitReady(node);
  return node;
}

}  // namespace limiter::testing
