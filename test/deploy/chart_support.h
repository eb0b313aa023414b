// What the deployment tests share: running helm (the binary named by $LIMITER_HELM, with its
// caches in a folder of the test's own), the rendered objects by kind and name, lookups in a
// pod spec, and the HelmChart fixture that renders the chart once with the default values and
// once with every option on. Not thread-safe: a test's helpers run on its own thread.
#pragma once

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/config.h"

namespace limiter::chart {

namespace fs = std::filesystem;

extern const std::string kChartDir;  // helm/ in the checkout
// The three credentials the renders are given as values: the gateway secret, the peer secret
// and the key-id seed.
inline constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";
inline constexpr char kPeerSecret[] = "peer-0123456789abcdef0123456789";
inline constexpr char kKeySeed[] = "seed-0123456789abcdef0123456789";
inline constexpr char kNamespace[] = "ns";
// --set arguments giving all three as values (secret.value, peerValue, keySeedValue).
extern const std::vector<std::string> kSecrets;
// --set arguments turning on TLS, the ServiceMonitor and the bench Job.
extern const std::vector<std::string> kAllOn;

struct Output {
  int status = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
};

// Runs argv (no shell), capturing stdout and stderr separately.
Output RunProgram(const std::vector<std::string>& argv);

// The helm binary: $LIMITER_HELM, which must exist ("" otherwise). A missing helm fails the
// tests rather than skipping them: a chart nobody renders is a chart nobody tests.
std::string HelmPath();
// Helm's caches and config in a directory of the test's own, so that a run writes nothing
// outside it and reads no user's repositories or plugins.
fs::path HelmHome();
void IsolateHelm();
Output Helm(std::vector<std::string> args);
// `helm template t helm/ --namespace ns` with the given extra arguments.
Output Template(const std::vector<std::string>& extra);
// The same with the three credentials set (kSecrets), as every render but the credentials'
// own tests needs.
Output TemplateWithSecret(std::vector<std::string> extra);

// The rendered objects, by kind and name.
class Manifests {
 public:
  static Manifests Parse(const std::string& text);
  const std::vector<YAML::Node>& All() const { return docs_; }
  std::vector<YAML::Node> OfKind(const std::string& kind) const;
  // The only object of a kind (an empty node, and a test failure, when not exactly one).
  YAML::Node One(const std::string& kind) const;
  YAML::Node Named(const std::string& kind, const std::string& name) const;
  // A ConfigMap by its app.kubernetes.io/component label.
  YAML::Node ConfigMap(const std::string& component) const;

 private:
  std::vector<YAML::Node> docs_;
};

std::map<std::string, std::string> StringMap(const YAML::Node& node);
// Every label of `selector` is on `labels` with the same value.
::testing::AssertionResult Selects(const YAML::Node& selector, const YAML::Node& labels);
int PortOf(const std::string& host_port);
// A container's argument following `flag`.
std::string ArgAfter(const YAML::Node& container, const std::string& flag);
// The container's port number named `name`.
int ContainerPort(const YAML::Node& container, const std::string& name);
// The pod volume mounted at exactly `dir` in `container`.
YAML::Node VolumeMountedAt(const YAML::Node& pod_spec, const YAML::Node& container,
                           const std::string& dir);
// The key of a secret volume that appears as `file` in its directory.
std::string SecretKeyFor(const YAML::Node& volume, const std::string& file);
// The keys of Secrets a pod spec's volumes mount, as "SECRET/KEY" ("SECRET/*" for a volume
// that mounts every key of its Secret).
std::vector<std::string> MountedSecretKeys(const YAML::Node& pod_spec);
// RFC 4648 base64, as Secrets' data holds it ("" and a test failure when malformed).
std::string Base64Decode(const std::string& text);
std::string Dir(const std::string& path);
std::string Base(const std::string& path);

// The chart rendered with the default values (and the secret) and with kAllOn, once per test
// suite; each test fails at once when helm is missing or either rendering failed.
class HelmChart : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  void SetUp() override;

  static Manifests Default() { return Manifests::Parse(default_->out); }
  static Manifests AllOn() { return Manifests::Parse(all_on_->out); }
  // Both renderings, for the checks that hold whatever the options.
  static std::vector<std::pair<std::string, Manifests>> Both() {
    return {{"default values", Default()}, {"tls, serviceMonitor and bench on", AllOn()}};
  }

  static Output* default_;
  static Output* all_on_;
};

// The node config (limiterd.yaml) of the ConfigMap the StatefulSet's --config names.
struct NodeConfigView {
  YAML::Node statefulset, pod_spec, container, config_map, config;
  std::string config_path;
};
NodeConfigView View(const Manifests& m);

// The rendered config map's files written out as mounted, and the node config loaded from
// them by limiterd's own loader.
Result<NodeConfig> LoadRendered(const NodeConfigView& v, const std::string& tag);

}  // namespace limiter::chart
