// Starts a real limiterd on loopback, port 0, for integration tests; stops it on destruction.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "common/subprocess.h"

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
  args.insert(args.begin(), LIMITERD_BIN);
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

// Runs limiterd with `args` when it is expected to stop by itself (a refused start): its
// exit status (-1: it did not stop) and the first line it printed, stderr included.
inline std::pair<int, std::string> RunToExit(const std::vector<std::string>& args) {
  std::string command = LIMITERD_BIN;
  for (const std::string& a : args) command += " '" + a + "'";
  Result<std::unique_ptr<Subprocess>> p = Subprocess::Start({"/bin/sh", "-c", command + " 2>&1"});
  if (!p.ok()) return {-1, p.error()};
  Result<std::string> line = (*p)->ReadLine(20'000);
  const std::optional<int> status = (*p)->Wait(20'000);
  return {status.value_or(-1), line.ok() ? *line : line.error()};
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
inline RunningNode StartMember(const std::string& self, const std::string& members,
                               const std::string& policies, uint64_t generation = 1) {
  return Launch({"--listen", self, "--admin", "127.0.0.1:0", "--members", members, "--self",
                 self, "--policies", policies, "--threads", "1", "--generation",
                 std::to_string(generation)});
}

}  // namespace limiter::testing
