// docker-compose.yml: not the chart, but a deployment all the same (no helm needed). Its nodes'
// stop_grace_period holds their hand-off, each of its replicas has a data dir of its own, and
// only the nodes hold the peer secret and the key-id seed: the gateway and the bench get the
// gateway secret alone.

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
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
    const std::string spec =
        volume.IsMap() ? volume["target"].as<std::string>("") : volume.as<std::string>();
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

// The compose secrets a service lists (short syntax, or the long one's `source`).
std::vector<std::string> SecretsOf(const YAML::Node& service) {
  std::vector<std::string> names;
  if (!service["secrets"]) return names;
  for (const YAML::Node& s : service["secrets"]) {
    names.push_back(s.IsMap() ? s["source"].as<std::string>() : s.as<std::string>());
  }
  return names;
}

// A file's text ("" when it cannot be read).
std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The nodes' config reads each of its three credentials from a compose secret the nodes list,
// three different ones, each a git-ignored file deploy/build-image.sh makes. The gateway and
// the bench list the gateway secret alone and read it from there.
TEST(Compose, OnlyTheNodesHoldThePeerSecretAndTheKeySeed) {
  ComposeNode node;
  ASSERT_NO_FATAL_FAILURE(LoadComposeNode(&node));
  const fs::path root = testing::SourceDir();
  const YAML::Node compose = YAML::LoadFile((root / "docker-compose.yml").string());
  Result<NodeConfig> config = LoadNodeConfig(node.config_file.string());
  ASSERT_TRUE(config) << config.error();

  // /run/secrets/NAME: where compose mounts the secret NAME.
  auto secret_named = [](const std::string& file) {
    const std::string prefix = "/run/secrets/";
    EXPECT_EQ(file.rfind(prefix, 0), 0u) << file << " is not a compose secret";
    return file.rfind(prefix, 0) == 0 ? file.substr(prefix.size()) : std::string();
  };
  const std::string gateway_secret = secret_named(config->secret_file);
  const std::string peer_secret = secret_named(config->peer_secret_file);
  const std::string key_seed = secret_named(config->key_seed_file);
  ASSERT_FALSE(gateway_secret.empty() || peer_secret.empty() || key_seed.empty())
      << "the nodes' config lacks secret_file, peer_secret_file or key_seed_file";
  EXPECT_EQ(std::set<std::string>({gateway_secret, peer_secret, key_seed}).size(), 3u);
  const std::vector<std::string> node_secrets = SecretsOf(node.service);
  for (const std::string& name : {gateway_secret, peer_secret, key_seed}) {
    EXPECT_NE(std::find(node_secrets.begin(), node_secrets.end(), name), node_secrets.end())
        << "the nodes do not list the secret " << name;
  }

  // Each a file of its own, made by build-image.sh and kept out of git.
  const std::string build_image = ReadText(root / "deploy/build-image.sh");
  const std::string ignored = ReadText(root / "deploy/.gitignore");
  std::set<std::string> files;
  for (const std::string& name : {gateway_secret, peer_secret, key_seed}) {
    SCOPED_TRACE(name);
    const std::string file = compose["secrets"][name]["file"].as<std::string>("");
    ASSERT_EQ(file.rfind("./deploy/", 0), 0u) << "secret " << name << ": file " << file;
    files.insert(file);
    const std::string base = file.substr(std::string("./deploy/").size());
    EXPECT_NE(build_image.find("deploy/" + base), std::string::npos)
        << "deploy/build-image.sh does not make " << file;
    EXPECT_NE(("\n" + ignored).find("\n" + base + "\n"), std::string::npos)
        << file << " is not in deploy/.gitignore";
  }
  EXPECT_EQ(files.size(), 3u);

  // Every other service: the gateway secret or nothing.
  for (const auto& kv : compose["services"]) {
    const std::string service = kv.first.as<std::string>();
    if (service == "limiterd") continue;
    SCOPED_TRACE(service);
    for (const std::string& name : SecretsOf(kv.second)) EXPECT_EQ(name, gateway_secret);
    const std::string text = YAML::Dump(kv.second);
    for (const std::string& word : {peer_secret, key_seed, std::string("PEER_SECRET"),
                                    std::string("KEY_SEED"), std::string("peer-secret")}) {
      EXPECT_EQ(text.find(word), std::string::npos) << service << " mentions " << word;
    }
  }
  const YAML::Node gateway = compose["services"]["gateway"];
  EXPECT_EQ(SecretsOf(gateway), std::vector<std::string>{gateway_secret});
  std::string gateway_file;
  const YAML::Node command = gateway["command"];
  for (size_t i = 0; i + 1 < command.size(); ++i) {
    if (command[i].as<std::string>() == "--secret-file")
      gateway_file = command[i + 1].as<std::string>();
  }
  EXPECT_EQ(gateway_file, config->secret_file);
  const YAML::Node bench = compose["services"]["bench"];
  EXPECT_EQ(SecretsOf(bench), std::vector<std::string>{gateway_secret});
  EXPECT_NE(YAML::Dump(bench["command"]).find("--secret-file " + config->secret_file),
            std::string::npos)
      << YAML::Dump(bench["command"]);
}

}  // namespace
}  // namespace limiter::chart
