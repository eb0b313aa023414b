// docker-compose.yml: not the chart, but a deployment all the same (no helm needed). Its nodes'
// stop_grace_period holds their hand-off, and each of its replicas has a data dir of its own.

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/duration.h"
#include "test/deploy/chart_support.h"
#include "test/support/build_paths.h"

namespace limiter::chart {
namespace {

// docker-compose.yml's limiterd service and the host file of the config its --config names
// (by the volume mounted there).
struct ComposeNode {
  YAML::Node service;
  fs::path config_file;
};

void LoadComposeNode(ComposeNode* out) {
  const fs::path root = testing::SourceDir();
  const YAML::Node compose = YAML::LoadFile((root / "docker-compose.yml").string());
  out->service = compose["services"]["limiterd"];
  ASSERT_TRUE(out->service.IsMap());
  std::string config_path;
  const YAML::Node command = out->service["command"];
  for (size_t i = 0; i + 1 < command.size(); ++i) {
    if (command[i].as<std::string>() == "--config") config_path = command[i + 1].as<std::string>();
  }
  ASSERT_FALSE(config_path.empty()) << YAML::Dump(command);
  std::string host_file;
  for (const YAML::Node& volume : out->service["volumes"]) {
    const std::string spec = volume.as<std::string>();
    const size_t colon = spec.find(':');
    const std::string target = spec.substr(colon + 1, spec.find(':', colon + 1) - colon - 1);
    if (colon != std::string::npos && target == config_path) host_file = spec.substr(0, colon);
  }
  ASSERT_FALSE(host_file.empty()) << "nothing is mounted at " << config_path;
  out->config_file = (root / host_file).lexically_normal();
}

// The nodes' stop_grace_period holds the hand-off of their config.
TEST(Compose, StopGracePeriodHoldsTheHandoff) {
  ComposeNode node;
  ASSERT_NO_FATAL_FAILURE(LoadComposeNode(&node));
  const std::optional<int64_t> grace_ms =
      ParseDurationMs(node.service["stop_grace_period"].as<std::string>(""));
  ASSERT_TRUE(grace_ms.has_value()) << "no stop_grace_period on the limiterd service";
  Result<NodeConfig> config = LoadNodeConfig(node.config_file.string());
  ASSERT_TRUE(config) << config.error();
  EXPECT_GT(config->node.handoff_deadline_ms, 0) << "the hand-off is off in compose";
  EXPECT_GE(*grace_ms, config->node.handoff_deadline_ms + 5'000);
}

// Each of the three replicas has a data dir of its own: the image's VOLUME (an anonymous
// volume per container), and no volume of the compose file over it, which would be one
// volume for all three (podman-compose 1.0.3 makes even `- /var/lib/limiterd` a named one)
// and RocksDB lets one process open it. The image's standalone config uses the VOLUME too.
TEST(Compose, EachNodeHasADataDirOfItsOwn) {
  ComposeNode node;
  ASSERT_NO_FATAL_FAILURE(LoadComposeNode(&node));
  Result<NodeConfig> config = LoadNodeConfig(node.config_file.string());
  ASSERT_TRUE(config) << config.error();
  const std::string data_dir = config->durable.data_dir;
  EXPECT_EQ(data_dir, "/var/lib/limiterd");
  for (const YAML::Node& volume : node.service["volumes"]) {
    const std::string spec = volume.IsMap() ? volume["target"].as<std::string>("")
                                            : volume.as<std::string>();
    EXPECT_EQ(spec.find(data_dir), std::string::npos)
        << "a compose volume at the data dir is shared by the replicas: " << spec;
  }
  const fs::path root = testing::SourceDir();
  std::ifstream dockerfile(root / "Dockerfile");
  std::vector<std::string> volumes;
  for (std::string line; std::getline(dockerfile, line);) {
    if (line.rfind("VOLUME ", 0) == 0) volumes.push_back(line.substr(7));
  }
  EXPECT_EQ(volumes, std::vector<std::string>{data_dir});
  Result<NodeConfig> standalone = LoadNodeConfig((root / "deploy/limiterd.yaml").string());
  ASSERT_TRUE(standalone) << standalone.error();
  EXPECT_EQ(standalone->durable.data_dir, data_dir);
}

}  // namespace
}  // namespace limiter::chart
