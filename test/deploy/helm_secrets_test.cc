// The chart's credentials: the gateway secret, the peer secret and the key-id seed. The nodes
// mount all three where their config points (each in a directory of its own, no subPath), and
// what the chart gives gateways (the gateway ConfigMap, the bench Job, the example Deployment
// in values.yaml) holds the gateway secret alone. Rendering fails, with the chart's message,
// when a node would lack the peer secret or the key seed, or on values limiterd would refuse
// (the peer secret equal to the gateway secret among them).

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "protocol/auth.h"
#include "test/deploy/chart_support.h"
#include "test/support/build_paths.h"

namespace limiter::chart {
namespace {

// The Secret the chart makes (secret.value and friends).
constexpr char kChartSecret[] = "t-limiter-secret";

struct Credential {
  const char* field;  // in limiterd.yaml
  const char* key;    // in the chart's Secret
  const char* value;  // as kSecrets gives it
};
const Credential kCredentials[] = {{"secret_file", "secret", kSecret},
                                   {"peer_secret_file", "peer-secret", kPeerSecret},
                                   {"key_seed_file", "key-seed", kKeySeed}};

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The stderr of a render that must fail, with a failure when it did not.
std::string FailureOf(const std::vector<std::string>& args) {
  Output run = Template(args);
  EXPECT_NE(run.status, 0) << "rendered:\n" << run.out.substr(0, 400);
  return run.err;
}

std::vector<std::string> With(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST_F(HelmChart, NodesMountTheThreeCredentialsWhereTheConfigPoints) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    const NodeConfigView v = View(m);
    std::set<std::string> dirs;
    for (const Credential& c : kCredentials) {
      SCOPED_TRACE(c.field);
      const std::string file = v.config[c.field].as<std::string>("");
      ASSERT_FALSE(file.empty()) << "the node config has no " << c.field;
      dirs.insert(Dir(file));
      const YAML::Node volume = VolumeMountedAt(v.pod_spec, v.container, Dir(file));
      ASSERT_TRUE(volume["secret"].IsDefined()) << "not a secret volume: " << volume;
      EXPECT_EQ(volume["secret"]["secretName"].as<std::string>(), kChartSecret);
      EXPECT_EQ(SecretKeyFor(volume, Base(file)), c.key);
      // The volume holds that key alone.
      EXPECT_EQ(volume["secret"]["items"].size(), 1u) << volume;
      const YAML::Node secret = m.Named("Secret", kChartSecret);
      ASSERT_TRUE(secret["data"][c.key].IsDefined()) << "the Secret has no key " << c.key;
      EXPECT_EQ(Base64Decode(secret["data"][c.key].as<std::string>()), c.value);
    }
    EXPECT_EQ(dirs.size(), 3u) << "each credential in a directory of its own";
    for (const YAML::Node& mount : v.container["volumeMounts"]) {
      // All read-only but the data dir, the one place a node writes.
      EXPECT_EQ(mount["readOnly"].as<bool>(false),
                mount["mountPath"].as<std::string>() != v.config["data_dir"].as<std::string>(""))
          << mount;
      EXPECT_FALSE(mount["subPath"].IsDefined()) << "a subPath mount never sees a rotation";
    }
  }
}

// The Secret's values, written out as mounted, load with limiterd's own readers, and limiterd's
// own check of a node's credentials passes with the rendered config; without the peer secret
// it would not (so the check means something for this config).
TEST_F(HelmChart, RenderedCredentialsPassLimiterdsOwnCheck) {
  const Manifests m = Default();
  const NodeConfigView v = View(m);
  Result<NodeConfig> config = LoadRendered(v, "credentials");
  ASSERT_TRUE(config) << config.error();
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("limiter_chart_credentials_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const YAML::Node secret = m.Named("Secret", kChartSecret);
  auto load = [&](const char* key, auth::SecretKind kind) {
    const fs::path file = dir / key;
    std::ofstream(file) << Base64Decode(secret["data"][key].as<std::string>());
    Result<auth::SecretSource> found = auth::FindSecrets(file.string(), kind);
    EXPECT_TRUE(found) << key << ": " << found.error();
    return found ? found->secrets : auth::Secrets{};
  };
  const auth::Secrets gateway = load("secret", auth::SecretKind::kGateway);
  const auth::Secrets peer = load("peer-secret", auth::SecretKind::kPeer);
  const auth::Secrets seed = load("key-seed", auth::SecretKind::kKeySeed);
  fs::remove_all(dir);
  EXPECT_EQ(gateway.values, std::vector<std::string>{kSecret});
  EXPECT_EQ(peer.values, std::vector<std::string>{kPeerSecret});
  EXPECT_EQ(seed.values, std::vector<std::string>{kKeySeed});
  const Status refused = CheckCredentials(*config, gateway, peer);
  EXPECT_TRUE(refused.ok()) << refused.error();
  EXPECT_FALSE(CheckCredentials(*config, gateway, auth::Secrets{}).ok());
}

// Whatever the chart gives gateways holds the gateway secret and nothing else: the gateway
// ConfigMap names it, the bench Job mounts that one key, and no object but the nodes' own
// (their StatefulSet and ConfigMap) and the Secret mentions the peer secret or the key seed.
TEST_F(HelmChart, GatewayObjectsGetTheGatewaySecretAlone) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    const NodeConfigView v = View(m);
    const std::string secret_file = v.config["secret_file"].as<std::string>();
    const std::string peer_file = v.config["peer_secret_file"].as<std::string>();
    const std::string seed_file = v.config["key_seed_file"].as<std::string>();

    const YAML::Node gateway = m.ConfigMap("gateway-config");
    const YAML::Node client = YAML::Load(gateway["data"]["client.yaml"].as<std::string>());
    EXPECT_EQ(client["secret_file"].as<std::string>(), secret_file);
    EXPECT_TRUE(Contains(gateway["data"]["client.env"].as<std::string>(),
                         "LIMITER_SECRET_FILE=" + secret_file + "\n"));
    EXPECT_EQ(gateway["metadata"]["annotations"]["limiter/secret-name"].as<std::string>(""),
              kChartSecret);
    EXPECT_EQ(gateway["metadata"]["annotations"]["limiter/secret-key"].as<std::string>(""),
              "secret");

    for (const YAML::Node& job : m.OfKind("Job")) {
      const YAML::Node spec = job["spec"]["template"]["spec"];
      std::vector<std::string> keys = MountedSecretKeys(spec);
      // With TLS, the bench's certificate too (kAllOn's tls.secretName).
      std::erase_if(keys, [](const std::string& k) { return k.rfind("limiter-tls/", 0) == 0; });
      EXPECT_EQ(keys, std::vector<std::string>{std::string(kChartSecret) + "/secret"});
      const std::string file = ArgAfter(spec["containers"][0], "--secret-file");
      EXPECT_EQ(file, secret_file);
      EXPECT_EQ(SecretKeyFor(VolumeMountedAt(spec, spec["containers"][0], Dir(file)), Base(file)),
                "secret");
    }

    // Names that only the nodes' objects may carry.
    const std::vector<std::string> node_only = {"peer-secret",  "key-seed",    Dir(peer_file),
                                                Dir(seed_file), "peer_secret", "key_seed"};
    const std::string node_config_map = v.config_map["metadata"]["name"].as<std::string>();
    for (const YAML::Node& object : m.All()) {
      const std::string kind = object["kind"].as<std::string>();
      const std::string name = object["metadata"]["name"].as<std::string>();
      if (kind == "StatefulSet" || kind == "Secret" ||
          (kind == "ConfigMap" && name == node_config_map)) {
        continue;
      }
      const std::string text = YAML::Dump(object);
      for (const std::string& word : node_only) {
        EXPECT_FALSE(Contains(text, word)) << kind << " " << name << " mentions " << word;
      }
    }
  }
}

// The gateway Deployment values.yaml shows in its comments (under `gateway:`), read as YAML:
// it mounts the gateway secret's key alone, and carries the label the NetworkPolicy lets in
// by default.
TEST(HelmValues, ExampleGatewayMountsTheGatewaySecretAlone) {
  std::ifstream in(testing::SourcePath("helm/values.yaml"));
  std::string line, example;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside) {
      inside = line == "#   template:";
      if (inside) example += line.substr(4) + "\n";
      continue;
    }
    if (line.rfind("#   ", 0) != 0) break;  // the block ends at the first other line
    example += line.substr(4) + "\n";
  }
  ASSERT_FALSE(example.empty()) << "no `#   template:` block in helm/values.yaml";
  const YAML::Node pod = YAML::Load(example)["template"];
  ASSERT_TRUE(pod["spec"]["volumes"].IsSequence()) << example;
  EXPECT_EQ(MountedSecretKeys(pod["spec"]), std::vector<std::string>{"FULLNAME-secret/secret"});
  EXPECT_EQ(pod["metadata"]["labels"]["limiter/gateway"].as<std::string>(""), "true");
  EXPECT_FALSE(Contains(example, "peer")) << example;
  EXPECT_FALSE(Contains(example, "seed")) << example;

  const YAML::Node values = YAML::LoadFile(testing::SourcePath("helm/values.yaml"));
  EXPECT_TRUE(Selects(values["networkPolicy"]["gateways"][0]["podSelector"]["matchLabels"],
                      pod["metadata"]["labels"]));
}

TEST_F(HelmChart, RenderingFailsWithoutAPeerSecretOrAKeySeed) {
  const std::vector<std::string> gateway = {"--set", std::string("secret.value=") + kSecret};
  const std::vector<std::string> peer = {"--set", std::string("secret.peerValue=") + kPeerSecret};
  const std::vector<std::string> seed = {"--set", std::string("secret.keySeedValue=") + kKeySeed};
  std::string err = FailureOf(With(gateway, seed));
  EXPECT_TRUE(Contains(err, "the peer secret is missing: set secret.peerValue")) << err;
  EXPECT_TRUE(Contains(err, "secret.existingSecret")) << err;
  err = FailureOf(With(gateway, peer));
  EXPECT_TRUE(Contains(err, "the key-id seed is missing: set secret.keySeedValue")) << err;
  err = FailureOf(With(peer, seed));
  EXPECT_TRUE(Contains(err, "the gateway secret is missing: set secret.value")) << err;
  // The bench alone needs no node credential, but it renders with the nodes, which do.
  err = FailureOf(With(gateway, {"--set", "bench.enabled=true"}));
  EXPECT_TRUE(Contains(err, "the peer secret is missing")) << err;
}

TEST_F(HelmChart, RenderingFailsWhenThePeerSecretIsTheGatewaySecret) {
  const std::string other = "other-0123456789abcdef0123456789";
  const std::string message =
      "secret.peerValue (the peer secret) shares a value with "
      "secret.value (the gateway secret)";
  const std::vector<std::string> seed = {"--set", std::string("secret.keySeedValue=") + kKeySeed};
  struct Case {
    std::string gateway, peer;
  };
  for (const Case& c : std::vector<Case>{{kSecret, kSecret},
                                         {kSecret, other + "\n" + kSecret},  // the next one
                                         {kSecret + ("\n" + other), other},  // a rotation
                                         {kSecret, std::string(" ") + kSecret + " \n"}}) {
    SCOPED_TRACE("gateway '" + c.gateway + "', peer '" + c.peer + "'");
    const std::string err = FailureOf(With(
        {"--set-string", "secret.value=" + c.gateway, "--set-string", "secret.peerValue=" + c.peer},
        seed));
    EXPECT_TRUE(Contains(err, message)) << err;
  }
  // Two of each, none shared: rendered, each Secret value as given.
  Output rotation = Template(
      With({"--set-string", std::string("secret.value=") + kSecret + "\n" + other, "--set-string",
            std::string("secret.peerValue=") + kPeerSecret + "\nnext-peer-0123456789abcdef012345"},
           seed));
  ASSERT_EQ(rotation.status, 0) << rotation.err;
  const YAML::Node secret = Manifests::Parse(rotation.out).Named("Secret", kChartSecret);
  EXPECT_EQ(Base64Decode(secret["data"]["secret"].as<std::string>()),
            std::string(kSecret) + "\n" + other);
  EXPECT_EQ(Base64Decode(secret["data"]["peer-secret"].as<std::string>()),
            std::string(kPeerSecret) + "\nnext-peer-0123456789abcdef012345");
}

// Values limiterd would refuse to start with fail rendering instead.
TEST_F(HelmChart, RenderingFailsOnCredentialValuesLimiterdWouldRefuse) {
  const std::string ok = "abcdefghijklmnop";  // 16 bytes, the least
  struct Case {
    std::string field, value, message;
  };
  for (const Case& c : std::vector<Case>{
           {"secret.value", "short", "secret.value (the gateway secret) must be 16 to 1024 bytes"},
           {"secret.peerValue", std::string(1025, 'p'),
            "secret.peerValue (the peer secret) must be 16 to 1024 bytes a line; a line has 1025"},
           {"secret.keySeedValue", "0123456789abcde",
            "secret.keySeedValue (the key-id seed) must be 16 to 1024 bytes"},
           {"secret.keySeedValue", ok + "\n" + ok + "x",
            "secret.keySeedValue (the key-id seed) is one value, which never rotates"},
           {"secret.value", ok + "1\n" + ok + "2\n" + ok + "3",
            "secret.value (the gateway secret) has 3 lines; at most two"}}) {
    SCOPED_TRACE(c.field + "=" + c.value.substr(0, 40));
    std::vector<std::string> args = {"--set",        std::string("secret.value=") + kSecret,
                                     "--set",        std::string("secret.peerValue=") + kPeerSecret,
                                     "--set",        std::string("secret.keySeedValue=") + kKeySeed,
                                     "--set-string", c.field + "=" + c.value};
    const std::string err = FailureOf(args);
    EXPECT_TRUE(Contains(err, c.message)) << err;
  }
  // The bounds themselves are fine.
  Output bounds = Template({"--set", "secret.value=" + ok, "--set",
                            "secret.peerValue=" + std::string(1024, 'p'), "--set",
                            "secret.keySeedValue=" + ok + "x"});
  EXPECT_EQ(bounds.status, 0) << bounds.err;
}

// secret.existingSecret holds every credential not given as a value, under the key names the
// values give; with all three there, the chart makes no Secret.
TEST_F(HelmChart, AnExistingSecretHoldsWhatNoValueGives) {
  Output run =
      Template({"--set", "secret.existingSecret=mine", "--set",
                "secret.existingSecretKey=cluster-secret", "--set", "secret.peerKey=node-secret",
                "--set", "secret.keySeedKey=seed", "--set", "bench.enabled=true"});
  ASSERT_EQ(run.status, 0) << run.err;
  const Manifests m = Manifests::Parse(run.out);
  EXPECT_TRUE(m.OfKind("Secret").empty());
  const NodeConfigView v = View(m);
  for (const auto& [field, key] :
       std::vector<std::pair<std::string, std::string>>{{"secret_file", "cluster-secret"},
                                                        {"peer_secret_file", "node-secret"},
                                                        {"key_seed_file", "seed"}}) {
    SCOPED_TRACE(field);
    const std::string file = v.config[field].as<std::string>();
    const YAML::Node volume = VolumeMountedAt(v.pod_spec, v.container, Dir(file));
    EXPECT_EQ(volume["secret"]["secretName"].as<std::string>(), "mine");
    EXPECT_EQ(SecretKeyFor(volume, Base(file)), key);
  }
  EXPECT_EQ(MountedSecretKeys(m.One("Job")["spec"]["template"]["spec"]),
            std::vector<std::string>{"mine/cluster-secret"});
  const YAML::Node annotations = m.ConfigMap("gateway-config")["metadata"]["annotations"];
  EXPECT_EQ(annotations["limiter/secret-name"].as<std::string>(""), "mine");
  EXPECT_EQ(annotations["limiter/secret-key"].as<std::string>(""), "cluster-secret");

  // The default key names.
  Output defaults = Template({"--set", "secret.existingSecret=mine"});
  ASSERT_EQ(defaults.status, 0) << defaults.err;
  EXPECT_EQ(MountedSecretKeys(View(Manifests::Parse(defaults.out)).pod_spec),
            (std::vector<std::string>{"mine/secret", "mine/peer-secret", "mine/key-seed"}));
}

// An existing Secret of the gateway secret alone (as before the peer secret), and the nodes'
// two credentials as values: the chart's Secret holds those two and nothing else.
TEST_F(HelmChart, AnExistingGatewaySecretMixesWithValuesForTheNodes) {
  Output run = Template({"--set", "secret.existingSecret=mine", "--set",
                         std::string("secret.peerValue=") + kPeerSecret, "--set",
                         std::string("secret.keySeedValue=") + kKeySeed});
  ASSERT_EQ(run.status, 0) << run.err;
  const Manifests m = Manifests::Parse(run.out);
  const YAML::Node secret = m.Named("Secret", kChartSecret);
  std::vector<std::string> keys;
  for (const auto& kv : secret["data"]) keys.push_back(kv.first.as<std::string>());
  EXPECT_EQ(keys, (std::vector<std::string>{"peer-secret", "key-seed"}));
  EXPECT_EQ(MountedSecretKeys(View(m).pod_spec),
            (std::vector<std::string>{"mine/secret", std::string(kChartSecret) + "/peer-secret",
                                      std::string(kChartSecret) + "/key-seed"}));
  EXPECT_EQ(m.ConfigMap("gateway-config")["metadata"]["annotations"]["limiter/secret-name"]
                .as<std::string>(""),
            "mine");
}

// NOTES.txt says where each credential is and how to get the admin token, with the files the
// nodes mount.
TEST_F(HelmChart, NotesSayHowToGetTheAdminTokenAndTheGatewaySecret) {
  std::vector<std::string> args = {"install",     "t",        kChartDir,
                                   "--namespace", kNamespace, "--dry-run=client"};
  args.insert(args.end(), kSecrets.begin(), kSecrets.end());
  Output run = Helm(args);
  ASSERT_EQ(run.status, 0) << run.err;
  const std::string notes = run.out.substr(std::min(run.out.find("NOTES:"), run.out.size()));
  ASSERT_FALSE(notes.empty()) << run.out;
  const NodeConfigView v = View(Default());
  const std::string peer_file = v.config["peer_secret_file"].as<std::string>();
  EXPECT_TRUE(Contains(notes, "limiterctl admin-token --peer-secret-file " + peer_file)) << notes;
  EXPECT_TRUE(Contains(notes, "limiterctl drain")) << notes;
  EXPECT_TRUE(
      Contains(notes, std::string("get secret ") + kChartSecret + " -o jsonpath='{.data.secret}'"))
      << notes;
  EXPECT_TRUE(Contains(notes, "t-limiter-secret/peer-secret")) << notes;
  EXPECT_TRUE(Contains(notes, "t-limiter-secret/key-seed")) << notes;
}

}  // namespace
}  // namespace limiter::chart
