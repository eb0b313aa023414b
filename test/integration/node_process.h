// Starts a real limiterd on loopback, port 0, for integration tests; stops it on destruction.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/subprocess.h"

namespace limiter::testing {

struct RunningNode {
  std::unique_ptr<Subprocess> process;
  std::string listen;  // host:port
  std::string admin;
};

inline std::string WriteTempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// Starts limiterd with `args` (add --policies etc.); fails the test if it does not come up.
inline RunningNode StartNode(std::vector<std::string> args) {
  args.insert(args.begin(), {LIMITERD_BIN, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"});
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

}  // namespace limiter::testing
