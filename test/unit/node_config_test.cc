// limiterd's configuration file: every field it documents is read, paths are relative to the
// file, and a bad field is one error naming file:line:column and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "server/config.h"

namespace limiter {
namespace {

namespace fs = std::filesystem;

class NodeConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("limiter_config_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result<NodeConfig> Load(const std::string& text) {
    const fs::path file = dir_ / "limiterd.yaml";
    std::ofstream(file) << text;
    return LoadNodeConfig(file.string());
  }
  std::string In(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(NodeConfigFile, ReadsTheSecurityFieldsWithPathsRelativeToTheFile) {
  const Result<NodeConfig> c = Load(R"(
listen: 0.0.0.0:7450
policies: policies.yaml
secret_file: secret
secret_reload: 2s
insecure: false
max_ops_per_frame: 1024
max_reply_bytes: 65536
max_connections: 500
frame_timeout: 3s
tls:
  cert: tls/node.pem
  key: /etc/limiter/node.key
  client_ca: tls/ca.pem
max_tls_handshakes: 50
)");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->policies_path, In("policies.yaml"));
  EXPECT_EQ(c->secret_file, In("secret"));
  EXPECT_EQ(c->secret_reload_ms, 2000);
  EXPECT_FALSE(c->insecure);
  EXPECT_EQ(c->node.max_ops_per_frame, 1024u);
  EXPECT_EQ(c->node.max_reply_bytes, 65536u);
  EXPECT_EQ(c->server.max_connections, 500);
  EXPECT_EQ(c->server.frame_timeout_ms, 3000);
  EXPECT_EQ(c->server.tls.cert_file, In("tls/node.pem"));
  EXPECT_EQ(c->server.tls.key_file, "/etc/limiter/node.key");
  EXPECT_EQ(c->server.tls.ca_file, In("tls/ca.pem"));
  EXPECT_EQ(c->server.max_tls_handshakes, 50);
}

TEST_F(NodeConfigFile, AnEmptyFileIsAllDefaultsWithoutTls) {
  const Result<NodeConfig> c = Load("");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_TRUE(c->server.tls.cert_file.empty());
  EXPECT_TRUE(c->secret_file.empty());
  EXPECT_EQ(c->node.max_ops_per_frame, 8192u);
}

TEST_F(NodeConfigFile, BadFieldsAreOneErrorNamingWhereAndWhat) {
  const std::string file = In("limiterd.yaml");
  Result<NodeConfig> c = Load("tls:\n  cert: node.pem\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(), file + ":2:3: field 'tls': needs both cert and key");
  c = Load("tls:\n  cert: a.pem\n  key: a.key\n  ca: ca.pem\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(),
            file + ":4:3: field 'tls.ca': unknown field (known: cert, key, client_ca, peer_ca)");
  c = Load("insecure: yes please\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(), file + ":1:11: field 'insecure': expected true or false");
  c = Load("max_ops_per_frame: 2000000\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(),
            file + ":1:20: field 'max_ops_per_frame': must be between 1 and 1000000, got 2000000");
  c = Load("max_reply_bytes: 100\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(),
            file + ":1:18: field 'max_reply_bytes': must be between 4096 and 1073741824, got 100");
  c = Load("secret: hunter2\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("field 'secret': unknown field"), std::string::npos) << c.error();
}

TEST_F(NodeConfigFile, EveryDurationAndSizeIsHeldToItsRange) {
  const std::string file = In("limiterd.yaml");
  // Each field, a value past its range, and the message's tail.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"idle_timeout: 20000w", "field 'idle_timeout': must be between 100ms and 1d, got '20000w'"},
      {"idle_timeout: 0s", "field 'idle_timeout': must be between 100ms and 1d, got '0s'"},
      {"frame_timeout: 11m", "field 'frame_timeout': must be between 100ms and 10m, got '11m'"},
      {"auth_timeout: 2h", "field 'auth_timeout': must be between 100ms and 1m, got '2h'"},
      {"secret_reload: 2h", "field 'secret_reload': must be between 10ms and 1h, got '2h'"},
      {"handoff_deadline: 1h", "field 'handoff_deadline': must be between 1ms and 10m, got '1h'"},
      {"sync_interval: 2m", "field 'sync_interval': must be between 1ms and 1m, got '2m'"},
      {"rebalance_interval: 50ms",
       "field 'rebalance_interval': must be between 100ms and 10m, got '50ms'"},
      {"hot_keys: {valid: 2h}", "field 'hot_keys.valid': must be between 100ms and 1h, got '2h'"},
      {"threads: 0", "field 'threads': must be between 1 and 256, got 0"},
      {"max_connections: 99999999999",
       "field 'max_connections': must be between 1 and 10000000, got 99999999999"},
      {"max_preauth_connections: 0",
       "field 'max_preauth_connections': must be between 1 and 10000000, got 0"},
      {"max_preauth_per_source: -1",
       "field 'max_preauth_per_source': must be between 1 and 10000000, got -1"},
      {"max_tls_handshakes_per_source: 0",
       "field 'max_tls_handshakes_per_source': must be between 1 and 1000000, got 0"},
      {"reply_budget: 1000",
       "field 'reply_budget': must be between 1048576 and 68719476736, got 1000"},
      {"max_frame: 99999999999",
       "field 'max_frame': must be between 1024 and 67108864, got 99999999999"},
      {"region_max_keys: 0", "field 'region_max_keys': must be between 1 and 100000000, got 0"},
      {"hot_keys: {sketch: 0}", "field 'hot_keys.sketch': must be between 1 and 65536, got 0"},
      {"generation: -3", "field 'generation': must be between 0 and 9223372036854775807, got -3"},
      {"max_keys: 1e9", "field 'max_keys': expected an integer, got '1e9'"},
  };
  for (const auto& [text, tail] : cases) {
    const Result<NodeConfig> c = Load(text + "\n");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.error().substr(0, file.size()), file) << c.error();
    EXPECT_NE(c.error().find(tail), std::string::npos) << text << ": " << c.error();
  }
  // The new fields, in range.
  const Result<NodeConfig> c = Load(
      "auth_timeout: 500ms\nmax_preauth_connections: 10\nmax_preauth_per_source: 3\n"
      "max_tls_handshakes_per_source: 4\nreply_budget: 2097152\npeer_secret_file: peer\n"
      "key_seed_file: /etc/seed\ntls: {cert: a.pem, key: a.key, peer_ca: nodes.pem}\n");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->server.auth_timeout_ms, 500);
  EXPECT_EQ(c->server.max_preauth_connections, 10);
  EXPECT_EQ(c->server.max_preauth_per_source, 3);
  EXPECT_EQ(c->server.max_tls_handshakes_per_source, 4);
  EXPECT_EQ(c->server.reply_budget_bytes, 2097152);
  EXPECT_EQ(c->peer_secret_file, In("peer"));
  EXPECT_EQ(c->key_seed_file, "/etc/seed");
  EXPECT_EQ(c->server.tls.peer_ca_file, In("nodes.pem"));
}

TEST_F(NodeConfigFile, ReadsTheRegionsAndNamesWhatIsWrongWithThem) {
  Result<NodeConfig> c = Load(
      "region: us\n"
      "regions:\n"
      "  - {name: eu, members: [10.1.0.1:7450, 10.1.0.2:7450]}\n"
      "  - {name: ap, members_dns: limiterd.ap.svc:7450}\n"
      "rebalance_interval: 3s\nregion_floor: 0.1\nregion_max_keys: 500\n");
  ASSERT_TRUE(c.ok()) << c.error();
  const RegionOptions& r = c->node.regions;
  EXPECT_EQ(r.region, "us");
  ASSERT_EQ(r.others.size(), 2u);
  EXPECT_EQ(r.others[0].name, "eu");
  EXPECT_EQ(r.others[0].members, (std::vector<std::string>{"10.1.0.1:7450", "10.1.0.2:7450"}));
  EXPECT_EQ(r.others[1].members_dns, "limiterd.ap.svc:7450");
  EXPECT_EQ(r.rebalance_interval_ms, 3000);
  EXPECT_DOUBLE_EQ(r.floor, 0.1);
  EXPECT_EQ(r.max_keys, 500);

  const std::string file = In("limiterd.yaml");
  c = Load("regions: eu\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find(":1:10: field 'regions': expected a list"), std::string::npos)
      << c.error();
  c = Load("regions:\n  - {members: [a:1]}\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("each region needs a name"), std::string::npos) << c.error();
  c = Load("regions:\n  - {name: eu, members: [nope]}\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("field 'regions.members'"), std::string::npos) << c.error();
  c = Load("regions:\n  - {name: eu, member: [a:1]}\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("unknown field"), std::string::npos) << c.error();
  c = Load("region_floor: 2\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(), file +
                           ":1:15: field 'region_floor': expected a share of the limit "
                           "between 0 and 1, got '2'");
}

}  // namespace
}  // namespace limiter
