// The Helm chart in helm/: renders it with the helm binary named by $LIMITER_HELM (dev.sh
// installs one into .cache/helm and sets it) and checks that the manifests fit together:
// selectors match the pods, ports agree from the Service to limiterd's own config, the config
// and secret are mounted where the config says, members_dns names the headless Service, and
// a policy change rolls the pods. The rendered config and policy file are also loaded with
// limiterd's own loaders, so a field the chart writes wrongly fails here, not in a cluster.
// The drain on the way out: handoff_deadline, a grace period that holds it, and the preStop
// hook, whose script is run against a stand-in for the admin port. docker-compose.yml's grace
// period is checked against its nodes' config too. The data dir (durable policies' keys): a
// writable volume at data_dir, an emptyDir or a claim per pod (persistence.enabled).
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cctype>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/duration.h"
#include "common/policy_file.h"
#include "server/config.h"
#include "test/support/build_paths.h"

namespace limiter {
namespace {

namespace fs = std::filesystem;

const std::string kChartDir = testing::SourcePath("helm");
const char kSecret[] = "0123456789abcdef0123456789abcdef";
const char kNamespace[] = "ns";

struct Output {
  int status = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
};

// Runs argv (no shell), capturing stdout and stderr separately.
Output RunProgram(const std::vector<std::string>& argv) {
  Output run;
  int out_pipe[2], err_pipe[2];
  if (::pipe(out_pipe) != 0 || ::pipe(err_pipe) != 0) {
    run.err = "pipe failed";
    return run;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::close(out_pipe[0]), ::close(out_pipe[1]), ::close(err_pipe[0]), ::close(err_pipe[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&run.out, &run.err};
  int open = 2;
  while (open > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[8192];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid) {
    run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return run;
}

// The helm binary: $LIMITER_HELM, which must exist. A missing helm fails the test rather than
// skipping it: a chart nobody renders is a chart nobody tests.
std::string HelmPath() {
  const char* helm = std::getenv("LIMITER_HELM");
  if (helm == nullptr || *helm == '\0') return {};
  return ::access(helm, X_OK) == 0 ? std::string(helm) : std::string();
}

// Helm's caches and config in a directory of the test's own, so that a run writes nothing
// outside it and reads no user's repositories or plugins.
fs::path HelmHome() {
  return fs::path(::testing::TempDir()) / ("limiter_helm_" + std::to_string(::getpid()));
}

void IsolateHelm() {
  const fs::path home = HelmHome();
  fs::create_directories(home);
  ::setenv("HELM_CACHE_HOME", (home / "cache").c_str(), 1);
  ::setenv("HELM_CONFIG_HOME", (home / "config").c_str(), 1);
  ::setenv("HELM_DATA_HOME", (home / "data").c_str(), 1);
}

Output Helm(std::vector<std::string> args) {
  args.insert(args.begin(), HelmPath());
  return RunProgram(args);
}

// `helm template t helm/ --namespace ns` with the given extra arguments.
Output Template(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"template", "t", kChartDir, "--namespace", kNamespace};
  args.insert(args.end(), extra.begin(), extra.end());
  return Helm(args);
}

const std::vector<std::string> kAllOn = {
    "--set", std::string("secret.value=") + kSecret, "--set", "tls.enabled=true",
    "--set", "tls.secretName=limiter-tls", "--set", "serviceMonitor.enabled=true",
    "--set", "bench.enabled=true", "--set", "bench.parallelism=3",
    "--set", "bench.outputClaim=limiter-bench-out"};

// The rendered objects, by kind and name.
class Manifests {
 public:
  static Manifests Parse(const std::string& text) {
    Manifests m;
    for (const YAML::Node& doc : YAML::LoadAll(text)) {
      if (!doc.IsMap()) continue;
      m.docs_.push_back(doc);
    }
    return m;
  }
  std::vector<YAML::Node> OfKind(const std::string& kind) const {
    std::vector<YAML::Node> found;
    for (const YAML::Node& d : docs_) {
      if (d["kind"].as<std::string>() == kind) found.push_back(d);
    }
    return found;
  }
  // The only object of a kind (an empty node, and a test failure, when not exactly one).
  YAML::Node One(const std::string& kind) const {
    std::vector<YAML::Node> found = OfKind(kind);
    EXPECT_EQ(found.size(), 1u) << "objects of kind " << kind;
    return found.size() == 1 ? found[0] : YAML::Node();
  }
  YAML::Node Named(const std::string& kind, const std::string& name) const {
    for (const YAML::Node& d : OfKind(kind)) {
      if (d["metadata"]["name"].as<std::string>() == name) return d;
    }
    ADD_FAILURE() << "no " << kind << " named " << name;
    return YAML::Node();
  }
  // A ConfigMap by its app.kubernetes.io/component label.
  YAML::Node ConfigMap(const std::string& component) const {
    for (const YAML::Node& d : OfKind("ConfigMap")) {
      if (d["metadata"]["labels"]["app.kubernetes.io/component"].as<std::string>() ==
          component) {
        return d;
      }
    }
    ADD_FAILURE() << "no ConfigMap of component " << component;
    return YAML::Node();
  }

 private:
  std::vector<YAML::Node> docs_;
};

std::map<std::string, std::string> StringMap(const YAML::Node& node) {
  std::map<std::string, std::string> m;
  if (node.IsMap()) {
    for (const auto& kv : node) m[kv.first.as<std::string>()] = kv.second.as<std::string>();
  }
  return m;
}

// Every label of `selector` is on `labels` with the same value.
::testing::AssertionResult Selects(const YAML::Node& selector, const YAML::Node& labels) {
  const std::map<std::string, std::string> want = StringMap(selector);
  const std::map<std::string, std::string> have = StringMap(labels);
  if (want.empty()) return ::testing::AssertionFailure() << "empty selector";
  for (const auto& [key, value] : want) {
    auto it = have.find(key);
    if (it == have.end() || it->second != value) {
      return ::testing::AssertionFailure()
             << "selector " << key << "=" << value << " does not match the labels "
             << YAML::Dump(labels);
    }
  }
  return ::testing::AssertionSuccess();
}

int PortOf(const std::string& host_port) {
  return std::atoi(host_port.substr(host_port.rfind(':') + 1).c_str());
}

// A container's argument following `flag`.
std::string ArgAfter(const YAML::Node& container, const std::string& flag) {
  const YAML::Node command = container["command"];
  for (size_t i = 0; i + 1 < command.size(); ++i) {
    if (command[i].as<std::string>() == flag) return command[i + 1].as<std::string>();
  }
  ADD_FAILURE() << "no " << flag << " in " << YAML::Dump(command);
  return {};
}

// The container's port number named `name`.
int ContainerPort(const YAML::Node& container, const std::string& name) {
  for (const YAML::Node& p : container["ports"]) {
    if (p["name"].as<std::string>() == name) return p["containerPort"].as<int>();
  }
  ADD_FAILURE() << "no container port named " << name;
  return -1;
}

// The pod volume mounted at exactly `dir` in `container`.
YAML::Node VolumeMountedAt(const YAML::Node& pod_spec, const YAML::Node& container,
                           const std::string& dir) {
  for (const YAML::Node& m : container["volumeMounts"]) {
    if (m["mountPath"].as<std::string>() != dir) continue;
    for (const YAML::Node& v : pod_spec["volumes"]) {
      if (v["name"].as<std::string>() == m["name"].as<std::string>()) return v;
    }
  }
  ADD_FAILURE() << "nothing is mounted at " << dir;
  return YAML::Node();
}

// The key of a secret volume that appears as `file` in its directory.
std::string SecretKeyFor(const YAML::Node& volume, const std::string& file) {
  const YAML::Node items = volume["secret"]["items"];
  if (!items) return file;  // every key, each as a file of its name
  for (const YAML::Node& item : items) {
    if (item["path"].as<std::string>() == file) return item["key"].as<std::string>();
  }
  ADD_FAILURE() << "secret volume " << volume["name"] << " holds no file " << file;
  return {};
}

std::string Dir(const std::string& path) { return fs::path(path).parent_path().string(); }
std::string Base(const std::string& path) { return fs::path(path).filename().string(); }

class HelmChart : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    IsolateHelm();
    if (HelmPath().empty()) return;
    default_ = new Output(Template({"--set", std::string("secret.value=") + kSecret}));
    all_on_ = new Output(Template(kAllOn));
  }
  static void TearDownTestSuite() {
    delete default_;
    delete all_on_;
    default_ = all_on_ = nullptr;
    std::error_code ignored;
    fs::remove_all(HelmHome(), ignored);
  }

  void SetUp() override {
    ASSERT_FALSE(HelmPath().empty())
        << "LIMITER_HELM must name the helm binary (it is "
        << (std::getenv("LIMITER_HELM") ? std::string("'") + std::getenv("LIMITER_HELM") +
                                              "', which is not an executable file"
                                        : std::string("unset"))
        << "); ./dev.sh test installs helm into .cache/helm and sets it";
    ASSERT_EQ(default_->status, 0) << default_->err;
    ASSERT_EQ(all_on_->status, 0) << all_on_->err;
  }

  static Manifests Default() { return Manifests::Parse(default_->out); }
  static Manifests AllOn() { return Manifests::Parse(all_on_->out); }

  // Both renderings, for the checks that hold whatever the options.
  static std::vector<std::pair<std::string, Manifests>> Both() {
    return {{"default values", Default()}, {"tls, serviceMonitor and bench on", AllOn()}};
  }

  static Output* default_;
  static Output* all_on_;
};

Output* HelmChart::default_ = nullptr;
Output* HelmChart::all_on_ = nullptr;

// The node config (limiterd.yaml) of the ConfigMap the StatefulSet's --config names.
struct NodeConfigView {
  YAML::Node statefulset, pod_spec, container, config_map, config;
  std::string config_path;
};

NodeConfigView View(const Manifests& m) {
  NodeConfigView v;
  v.statefulset = m.One("StatefulSet");
  v.pod_spec = v.statefulset["spec"]["template"]["spec"];
  EXPECT_EQ(v.pod_spec["containers"].size(), 1u);
  v.container = v.pod_spec["containers"][0];
  v.config_path = ArgAfter(v.container, "--config");
  const YAML::Node volume = VolumeMountedAt(v.pod_spec, v.container, Dir(v.config_path));
  v.config_map = m.Named("ConfigMap", volume["configMap"]["name"].as<std::string>());
  v.config = YAML::Load(v.config_map["data"][Base(v.config_path)].as<std::string>());
  return v;
}

TEST_F(HelmChart, LintPasses) {
  Output plain = Helm({"lint", kChartDir});
  EXPECT_EQ(plain.status, 0) << plain.out << plain.err;
  Output strict = Helm({"lint", "--strict", kChartDir, "--set",
                     std::string("secret.value=") + kSecret});
  EXPECT_EQ(strict.status, 0) << strict.out << strict.err;
  std::vector<std::string> all = {"lint", "--strict", kChartDir};
  all.insert(all.end(), kAllOn.begin(), kAllOn.end());
  Output all_on = Helm(all);
  EXPECT_EQ(all_on.status, 0) << all_on.out << all_on.err;
}

TEST_F(HelmChart, RenderingWithoutASecretFailsWithTheChartsMessage) {
  Output run = Template({});
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.err.find("the cluster secret is missing: set secret.existingSecret"),
            std::string::npos)
      << run.err;
  Output tls = Template({"--set", std::string("secret.value=") + kSecret, "--set",
                      "tls.enabled=true"});
  EXPECT_NE(tls.status, 0);
  EXPECT_NE(tls.err.find("tls.enabled needs tls.secretName"), std::string::npos) << tls.err;
}

TEST_F(HelmChart, RendersWhatItPromises) {
  const Manifests d = Default();
  EXPECT_EQ(d.OfKind("StatefulSet").size(), 1u);
  EXPECT_EQ(d.OfKind("Service").size(), 1u);  // the headless one only
  EXPECT_EQ(d.OfKind("ConfigMap").size(), 2u);
  EXPECT_EQ(d.OfKind("Secret").size(), 1u);
  EXPECT_EQ(d.OfKind("PodDisruptionBudget").size(), 1u);
  EXPECT_TRUE(d.OfKind("ServiceMonitor").empty());
  EXPECT_TRUE(d.OfKind("Job").empty());
  EXPECT_EQ(d.One("StatefulSet")["spec"]["replicas"].as<int>(), 3);
  EXPECT_EQ(d.One("PodDisruptionBudget")["spec"]["maxUnavailable"].as<int>(), 1);

  const Manifests a = AllOn();
  EXPECT_EQ(a.OfKind("ServiceMonitor").size(), 1u);
  ASSERT_EQ(a.OfKind("Job").size(), 1u);
  EXPECT_EQ(a.One("Job")["spec"]["parallelism"].as<int>(), 3);
}

// Three pods split the scenario: pod I runs --part I/3 (its index from the Indexed Job's
// annotation) and writes its partial report to the claim; without a claim the chart says why.
TEST_F(HelmChart, BenchPodsEachRunTheirPartIntoTheClaim) {
  const YAML::Node job = AllOn().One("Job");
  EXPECT_EQ(job["spec"]["completionMode"].as<std::string>(), "Indexed");
  const YAML::Node pod = job["spec"]["template"]["spec"];
  const YAML::Node c = pod["containers"][0];
  std::vector<std::string> command;
  for (const YAML::Node& a : c["command"]) command.push_back(a.as<std::string>());
  auto after = [&](const std::string& flag) {
    auto it = std::find(command.begin(), command.end(), flag);
    return it == command.end() || it + 1 == command.end() ? std::string() : *(it + 1);
  };
  EXPECT_EQ(after("--part"), "$(PART)/3");
  EXPECT_EQ(after("--json"), "/out/part-$(PART).json");
  bool part_env = false;
  for (const YAML::Node& e : c["env"]) {
    if (e["name"].as<std::string>() == "PART") {
      part_env = e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>() ==
                 "metadata.annotations['batch.kubernetes.io/job-completion-index']";
    }
  }
  EXPECT_TRUE(part_env);
  bool claim = false;
  for (const YAML::Node& v : pod["volumes"]) {
    if (v["name"].as<std::string>() == "out") {
      claim = v["persistentVolumeClaim"]["claimName"].as<std::string>() == "limiter-bench-out";
    }
  }
  EXPECT_TRUE(claim);
  const Output no_claim =
      Template({"--set", std::string("secret.value=") + kSecret, "--set", "bench.enabled=true",
                "--set", "bench.parallelism=2"});
  EXPECT_NE(no_claim.status, 0);
  EXPECT_NE(no_claim.err.find("set bench.outputClaim"), std::string::npos) << no_claim.err;
  // One pod runs the whole scenario: no --part.
  const Output one = Template({"--set", std::string("secret.value=") + kSecret, "--set",
                               "bench.enabled=true"});
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_EQ(one.out.find("--part"), std::string::npos);
}

TEST_F(HelmChart, SelectorsMatchThePods) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    const YAML::Node sts = m.One("StatefulSet");
    const YAML::Node pod_labels = sts["spec"]["template"]["metadata"]["labels"];
    EXPECT_TRUE(Selects(sts["spec"]["selector"]["matchLabels"], pod_labels));
    EXPECT_TRUE(Selects(m.One("Service")["spec"]["selector"], pod_labels));
    EXPECT_TRUE(
        Selects(m.One("PodDisruptionBudget")["spec"]["selector"]["matchLabels"], pod_labels));
    for (const YAML::Node& c : sts["spec"]["template"]["spec"]["topologySpreadConstraints"]) {
      EXPECT_EQ(c["topologyKey"].as<std::string>(), "kubernetes.io/hostname");
      EXPECT_TRUE(Selects(c["labelSelector"]["matchLabels"], pod_labels));
    }
    // Bench pods must not join the nodes' Service (they would become members by DNS).
    for (const YAML::Node& job : m.OfKind("Job")) {
      EXPECT_FALSE(Selects(m.One("Service")["spec"]["selector"],
                           job["spec"]["template"]["metadata"]["labels"]));
    }
    for (const YAML::Node& sm : m.OfKind("ServiceMonitor")) {
      EXPECT_TRUE(Selects(sm["spec"]["selector"]["matchLabels"],
                          m.One("Service")["metadata"]["labels"]));
      EXPECT_EQ(sm["spec"]["endpoints"][0]["port"].as<std::string>(), "admin");
      EXPECT_EQ(sm["spec"]["endpoints"][0]["path"].as<std::string>(), "/metrics");
    }
  }
}

TEST_F(HelmChart, PortsAgreeFromServiceToConfig) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    const NodeConfigView v = View(m);
    const int data = ContainerPort(v.container, "data");
    const int admin = ContainerPort(v.container, "admin");
    EXPECT_EQ(data, 7450);
    EXPECT_EQ(admin, 7451);
    std::map<std::string, int> service_ports;
    for (const YAML::Node& p : m.One("Service")["spec"]["ports"]) {
      const std::string name = p["name"].as<std::string>();
      service_ports[name] = p["port"].as<int>();
      // targetPort by name, or by number: either way the container's port of that name.
      const std::string target = p["targetPort"].as<std::string>();
      EXPECT_TRUE(target == name || target == std::to_string(ContainerPort(v.container, name)))
          << "Service port " << name << " targets " << target;
    }
    EXPECT_EQ(service_ports, (std::map<std::string, int>{{"data", data}, {"admin", admin}}));
    for (const char* probe : {"readinessProbe", "livenessProbe"}) {
      const YAML::Node get = v.container[probe]["httpGet"];
      ASSERT_TRUE(get.IsDefined()) << probe;
      const std::string port = get["port"].as<std::string>();
      EXPECT_TRUE(port == "admin" || port == std::to_string(admin)) << probe << " port " << port;
    }
    EXPECT_EQ(v.container["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/readyz");
    EXPECT_EQ(v.container["livenessProbe"]["httpGet"]["path"].as<std::string>(), "/healthz");
    EXPECT_EQ(PortOf(v.config["listen"].as<std::string>()), data);
    EXPECT_EQ(PortOf(v.config["admin"].as<std::string>()), admin);
    EXPECT_EQ(ArgAfter(v.container, "--self"), "$(POD_IP):" + std::to_string(data));
  }
}

TEST_F(HelmChart, SelfIsThePodIpFromTheDownwardApi) {
  const NodeConfigView v = View(Default());
  bool found = false;
  for (const YAML::Node& e : v.container["env"]) {
    if (e["name"].as<std::string>() != "POD_IP") continue;
    found = true;
    EXPECT_EQ(e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(), "status.podIP");
  }
  EXPECT_TRUE(found) << "no POD_IP in the container's env";
}

TEST_F(HelmChart, ConfigMapIsMountedWhereConfigPointsAndHoldsThePolicies) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    const NodeConfigView v = View(m);
    EXPECT_EQ(v.config_path, "/etc/limiter/limiterd.yaml");
    ASSERT_TRUE(v.config.IsMap()) << v.config_map["data"];
    const std::string policies = v.config["policies"].as<std::string>();
    EXPECT_FALSE(fs::path(policies).is_absolute()) << "policies: is relative to the config";
    EXPECT_TRUE(v.config_map["data"][policies].IsDefined())
        << "policies: " << policies << " is not a key of ConfigMap "
        << v.config_map["metadata"]["name"];
    // The gateways load the very same policy file.
    EXPECT_EQ(m.ConfigMap("gateway-config")["data"]["policies.yaml"].as<std::string>(),
              v.config_map["data"][policies].as<std::string>());
  }
}

TEST_F(HelmChart, MembersDnsNamesTheHeadlessService) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    const NodeConfigView v = View(m);
    const YAML::Node service = m.One("Service");
    EXPECT_EQ(service["spec"]["clusterIP"].as<std::string>(), "None");
    EXPECT_TRUE(service["spec"]["publishNotReadyAddresses"].as<bool>());
    const std::string name = service["metadata"]["name"].as<std::string>();
    EXPECT_EQ(v.statefulset["spec"]["serviceName"].as<std::string>(), name);
    const std::string want = name + "." + kNamespace + ".svc.cluster.local:7450";
    EXPECT_EQ(v.config["members_dns"].as<std::string>(), want);

    const YAML::Node gateway = m.ConfigMap("gateway-config");
    const YAML::Node client = YAML::Load(gateway["data"]["client.yaml"].as<std::string>());
    EXPECT_EQ(client["members_dns"].as<std::string>(), want);
    EXPECT_NE(gateway["data"]["client.env"].as<std::string>().find("LIMITER_MEMBERS_DNS=" + want),
              std::string::npos);
    EXPECT_EQ(client["policy_file"].as<std::string>(), "/etc/limiter/policies.yaml");
    EXPECT_EQ(client["secret_file"].as<std::string>(), v.config["secret_file"].as<std::string>());
    for (const YAML::Node& job : m.OfKind("Job")) {
      EXPECT_EQ(ArgAfter(job["spec"]["template"]["spec"]["containers"][0], "--cluster"), want);
    }
  }
}

TEST_F(HelmChart, SecretIsMountedWhereSecretFilePoints) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    const NodeConfigView v = View(m);
    const std::string secret_file = v.config["secret_file"].as<std::string>();
    const YAML::Node volume = VolumeMountedAt(v.pod_spec, v.container, Dir(secret_file));
    ASSERT_TRUE(volume["secret"].IsDefined()) << "not a secret volume: " << volume;
    const YAML::Node secret =
        m.Named("Secret", volume["secret"]["secretName"].as<std::string>());
    EXPECT_TRUE(secret["data"][SecretKeyFor(volume, Base(secret_file))].IsDefined())
        << "the Secret has no key for " << secret_file;
    for (const YAML::Node& mount : v.container["volumeMounts"]) {
      // All read-only but the data dir, the one place a node writes.
      EXPECT_EQ(mount["readOnly"].as<bool>(false),
                mount["mountPath"].as<std::string>() != v.config["data_dir"].as<std::string>(""))
          << mount;
      EXPECT_FALSE(mount["subPath"].IsDefined()) << "a subPath mount never sees a rotation";
    }
    // The bench reads the secret the same way.
    for (const YAML::Node& job : m.OfKind("Job")) {
      const YAML::Node spec = job["spec"]["template"]["spec"];
      const std::string file = ArgAfter(spec["containers"][0], "--secret-file");
      const YAML::Node bench_volume = VolumeMountedAt(spec, spec["containers"][0], Dir(file));
      EXPECT_EQ(bench_volume["secret"]["secretName"].as<std::string>(),
                volume["secret"]["secretName"].as<std::string>());
      EXPECT_EQ(SecretKeyFor(bench_volume, Base(file)), SecretKeyFor(volume, Base(secret_file)));
    }
  }
}

TEST_F(HelmChart, AnExistingSecretIsUsedAndNoneIsCreated) {
  Output run = Template({"--set", "secret.existingSecret=mine", "--set",
                      "secret.existingSecretKey=cluster-secret"});
  ASSERT_EQ(run.status, 0) << run.err;
  const Manifests m = Manifests::Parse(run.out);
  EXPECT_TRUE(m.OfKind("Secret").empty());
  const NodeConfigView v = View(m);
  const std::string secret_file = v.config["secret_file"].as<std::string>();
  const YAML::Node volume = VolumeMountedAt(v.pod_spec, v.container, Dir(secret_file));
  EXPECT_EQ(volume["secret"]["secretName"].as<std::string>(), "mine");
  EXPECT_EQ(SecretKeyFor(volume, Base(secret_file)), "cluster-secret");
}

TEST_F(HelmChart, TlsFilesAreMountedWhereTheConfigPoints) {
  const Manifests m = AllOn();
  const NodeConfigView v = View(m);
  ASSERT_TRUE(v.config["tls"].IsMap());
  for (const char* field : {"cert", "key", "client_ca"}) {
    const std::string file = v.config["tls"][field].as<std::string>();
    const YAML::Node volume = VolumeMountedAt(v.pod_spec, v.container, Dir(file));
    EXPECT_EQ(volume["secret"]["secretName"].as<std::string>(), "limiter-tls") << field;
    EXPECT_FALSE(SecretKeyFor(volume, Base(file)).empty()) << field;
  }
  EXPECT_FALSE(View(Default()).config["tls"].IsDefined());
}

TEST_F(HelmChart, ChecksumAnnotationFollowsThePolicies) {
  const std::string base = "policies:\n  - name: a\n    algorithm: gcra\n    window: 1s\n"
                           "    class: contract\n    limit: ";
  auto checksum = [&](const std::string& limit) {
    Output run = Template({"--set", std::string("secret.value=") + kSecret, "--set-string",
                        "policies=" + base + limit + "\n"});
    EXPECT_EQ(run.status, 0) << run.err;
    const Manifests m = Manifests::Parse(run.out);
    const NodeConfigView v = View(m);
    EXPECT_EQ(v.config_map["data"]["policies.yaml"].as<std::string>(), base + limit + "\n");
    return v.statefulset["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        .as<std::string>("");
  };
  const std::string five = checksum("5");
  EXPECT_EQ(five.size(), 64u) << five;
  EXPECT_NE(checksum("6"), five);
  EXPECT_EQ(checksum("5"), five);
}

TEST_F(HelmChart, PodsAreLockedDown) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    std::vector<YAML::Node> pods = {m.One("StatefulSet")["spec"]["template"]["spec"]};
    for (const YAML::Node& job : m.OfKind("Job")) pods.push_back(job["spec"]["template"]["spec"]);
    for (const YAML::Node& pod : pods) {
      EXPECT_TRUE(pod["securityContext"]["runAsNonRoot"].as<bool>());
      EXPECT_EQ(pod["securityContext"]["runAsUser"].as<int>(), 65532);
      EXPECT_EQ(pod["securityContext"]["seccompProfile"]["type"].as<std::string>(),
                "RuntimeDefault");
      for (const YAML::Node& c : pod["containers"]) {
        const YAML::Node s = c["securityContext"];
        EXPECT_TRUE(s["runAsNonRoot"].as<bool>());
        EXPECT_EQ(s["runAsUser"].as<int>(), 65532);
        EXPECT_TRUE(s["readOnlyRootFilesystem"].as<bool>());
        EXPECT_FALSE(s["allowPrivilegeEscalation"].as<bool>(true));
        EXPECT_EQ(s["capabilities"]["drop"][0].as<std::string>(), "ALL");
        EXPECT_EQ(c["image"].as<std::string>(), "limiter:0.1.0");
      }
    }
  }
}

// The rendered config and policy file, written out as mounted, load with limiterd's own
// loaders and say what the chart meant.
TEST_F(HelmChart, RenderedConfigLoadsInLimiterd) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    const NodeConfigView v = View(m);
    const fs::path dir = fs::path(::testing::TempDir()) /
                         ("limiter_chart_" + std::to_string(::getpid())) / "etc-limiter";
    fs::create_directories(dir);
    for (const auto& kv : v.config_map["data"]) {
      std::ofstream(dir / kv.first.as<std::string>()) << kv.second.as<std::string>();
    }
    Result<NodeConfig> config = LoadNodeConfig((dir / Base(v.config_path)).string());
    ASSERT_TRUE(config) << config.error();
    EXPECT_EQ(config->server.listen, "0.0.0.0:7450");
    EXPECT_EQ(config->server.admin, "0.0.0.0:7451");
    EXPECT_EQ(config->server.members_dns, v.config["members_dns"].as<std::string>());
    EXPECT_EQ(config->secret_file, "/var/run/limiter/secret/secret");
    EXPECT_EQ(config->server.threads, 2);
    EXPECT_EQ(config->server.idle_timeout_ms, 60'000);
    EXPECT_EQ(config->server.frame_timeout_ms, 10'000);
    EXPECT_EQ(config->node.handoff_deadline_ms, 10'000);
    EXPECT_EQ(fs::path(config->policies_path), dir / "policies.yaml");
    Result<PolicySet> policies = LoadPolicyFile(config->policies_path);
    EXPECT_TRUE(policies) << policies.error();
    fs::remove_all(dir.parent_path());
  }
}

// --- The drain on the way out: handoff_deadline, the grace period and the preStop hook. ---

// handoff_deadline as limiterd reads it: 0 (off) or a duration; -1 when it is neither.
int64_t DeadlineMs(const std::string& text) {
  if (text == "0") return 0;
  return ParseDurationMs(text).value_or(-1);
}

// The port number a probe of the container targets (by name or by number).
int ProbePort(const YAML::Node& container, const std::string& probe) {
  const std::string port = container[probe]["httpGet"]["port"].as<std::string>("");
  if (!port.empty() && port.find_first_not_of("0123456789") == std::string::npos) {
    return std::atoi(port.c_str());
  }
  return ContainerPort(container, port);
}

// The node container's preStop hook, `bash -c SCRIPT`: SCRIPT ("" and a failure otherwise).
std::string PreStopScript(const YAML::Node& container) {
  const YAML::Node command = container["lifecycle"]["preStop"]["exec"]["command"];
  if (!command.IsSequence() || command.size() != 3 || command[0].as<std::string>() != "bash" ||
      command[1].as<std::string>() != "-c") {
    ADD_FAILURE() << "no preStop hook `bash -c SCRIPT` on the node container: "
                  << YAML::Dump(container["lifecycle"]);
    return {};
  }
  return command[2].as<std::string>();
}

// The rendered config map's files written out as mounted, and the node config loaded from
// them by limiterd's own loader.
Result<NodeConfig> LoadRendered(const NodeConfigView& v, const std::string& tag) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("limiter_chart_" + std::to_string(::getpid()) + "_" + tag);
  fs::create_directories(dir);
  for (const auto& kv : v.config_map["data"]) {
    std::ofstream(dir / kv.first.as<std::string>()) << kv.second.as<std::string>();
  }
  Result<NodeConfig> config = LoadNodeConfig((dir / Base(v.config_path)).string());
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return config;
}

TEST_F(HelmChart, NodeConfigHasTheHandoffDeadline) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    EXPECT_EQ(View(m).config["handoff_deadline"].as<std::string>(""), "10s");
  }
  struct Case {
    std::string value;  // handoff.deadline
    std::string grace;  // terminationGracePeriodSeconds
    std::string rendered;
    int64_t ms;
  };
  for (const Case& c : std::vector<Case>{{"45s", "55", "45s", 45'000},
                                         {"2m", "130", "2m", 120'000},
                                         {"20", "30", "20s", 20'000},  // plain seconds
                                         {"0", "30", "0", 0}}) {       // off
    SCOPED_TRACE("handoff.deadline=" + c.value);
    Output run = Template({"--set", std::string("secret.value=") + kSecret, "--set-string",
                           "handoff.deadline=" + c.value, "--set",
                           "terminationGracePeriodSeconds=" + c.grace});
    ASSERT_EQ(run.status, 0) << run.err;
    const NodeConfigView v = View(Manifests::Parse(run.out));
    EXPECT_EQ(v.config["handoff_deadline"].as<std::string>(""), c.rendered);
    Result<NodeConfig> config = LoadRendered(v, "handoff");
    ASSERT_TRUE(config) << config.error();
    EXPECT_EQ(config->node.handoff_deadline_ms, c.ms);
  }
}

TEST_F(HelmChart, GracePeriodHoldsTheDrain) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    const NodeConfigView v = View(m);
    const int64_t deadline_ms = DeadlineMs(v.config["handoff_deadline"].as<std::string>(""));
    EXPECT_EQ(deadline_ms, 10'000);
    const int64_t grace_ms = v.pod_spec["terminationGracePeriodSeconds"].as<int64_t>(0) * 1000;
    EXPECT_GE(grace_ms, deadline_ms + 5'000) << "the least rendering allows";
    EXPECT_GE(grace_ms, deadline_ms + 10'000) << "the defaults leave the node time to exit";
  }
  // The least grace period the chart takes, and the same with a longer deadline.
  Output least = Template({"--set", std::string("secret.value=") + kSecret, "--set",
                           "terminationGracePeriodSeconds=15"});
  EXPECT_EQ(least.status, 0) << least.err;
  Output minutes = Template({"--set", std::string("secret.value=") + kSecret, "--set",
                             "handoff.deadline=1m", "--set", "terminationGracePeriodSeconds=65"});
  EXPECT_EQ(minutes.status, 0) << minutes.err;
}

TEST_F(HelmChart, RenderingFailsWhenTheGracePeriodCannotHoldTheDrain) {
  Output short_grace = Template({"--set", std::string("secret.value=") + kSecret, "--set",
                                 "terminationGracePeriodSeconds=14"});
  EXPECT_NE(short_grace.status, 0);
  EXPECT_NE(short_grace.err.find("terminationGracePeriodSeconds (14) must be at least "
                                 "handoff.deadline (10 s) + 5 s = 15"),
            std::string::npos)
      << short_grace.err;
  Output long_deadline = Template({"--set", std::string("secret.value=") + kSecret, "--set",
                                   "handoff.deadline=1m"});
  EXPECT_NE(long_deadline.status, 0);
  EXPECT_NE(long_deadline.err.find("terminationGracePeriodSeconds (30) must be at least "
                                   "handoff.deadline (60 s) + 5 s = 65"),
            std::string::npos)
      << long_deadline.err;
  // Only N, Ns and Nm are understood, up to limiterd's own 10m.
  for (const char* form : {"500ms", "1h", "1m30s", "soon"}) {
    Output run = Template({"--set", std::string("secret.value=") + kSecret, "--set-string",
                           std::string("handoff.deadline=") + form});
    EXPECT_NE(run.status, 0) << form;
    EXPECT_NE(run.err.find("handoff.deadline must be whole seconds or minutes"),
              std::string::npos)
        << form << ": " << run.err;
  }
  Output too_long = Template({"--set", std::string("secret.value=") + kSecret, "--set",
                              "handoff.deadline=11m", "--set",
                              "terminationGracePeriodSeconds=700"});
  EXPECT_NE(too_long.status, 0);
  EXPECT_NE(too_long.err.find("handoff.deadline is at most 10m"), std::string::npos)
      << too_long.err;
  // The chart sets handoff_deadline: config.extra must not repeat it.
  Output extra = Template({"--set", std::string("secret.value=") + kSecret, "--set",
                           "config.extra.handoff_deadline=5s"});
  EXPECT_NE(extra.status, 0);
  EXPECT_NE(extra.err.find("config.extra.handoff_deadline is set by the chart"),
            std::string::npos)
      << extra.err;
}

TEST_F(HelmChart, PreStopHookDrainsThroughTheProbesAdminPort) {
  Output moved = Template({"--set", std::string("secret.value=") + kSecret, "--set",
                           "ports.admin=9123"});
  ASSERT_EQ(moved.status, 0) << moved.err;
  std::vector<std::pair<std::string, Manifests>> renderings = Both();
  renderings.emplace_back("ports.admin=9123", Manifests::Parse(moved.out));
  for (const auto& [what, m] : renderings) {
    SCOPED_TRACE(what);
    const NodeConfigView v = View(m);
    const int admin = ProbePort(v.container, "readinessProbe");
    EXPECT_EQ(ProbePort(v.container, "livenessProbe"), admin);
    EXPECT_EQ(admin, what == "ports.admin=9123" ? 9123 : 7451);
    // The hook asks 127.0.0.1: the node's admin port must listen there.
    const std::string host = v.config["admin"].as<std::string>("");
    EXPECT_TRUE(host == "0.0.0.0:" + std::to_string(admin) ||
                host == "127.0.0.1:" + std::to_string(admin))
        << "admin: " << host;

    const std::string script = PreStopScript(v.container);
    EXPECT_NE(script.find("POST /drain"), std::string::npos) << script;
    // The admin port as a whole number in the hook (not a part of a longer one).
    const std::string port = std::to_string(admin);
    bool has_port = false;
    for (size_t p = script.find(port); p != std::string::npos && !has_port;
         p = script.find(port, p + 1)) {
      const bool digit_before = p > 0 && std::isdigit(static_cast<unsigned char>(script[p - 1]));
      const size_t after = p + port.size();
      const bool digit_after =
          after < script.size() && std::isdigit(static_cast<unsigned char>(script[after]));
      has_port = !digit_before && !digit_after;
    }
    EXPECT_TRUE(has_port) << "the admin port " << admin << " is not in the hook: " << script;
    size_t at = script.find("/dev/tcp/");
    EXPECT_NE(at, std::string::npos) << script;
    for (; at != std::string::npos; at = script.find("/dev/tcp/", at + 1)) {
      EXPECT_EQ(script.compare(at, 19, "/dev/tcp/127.0.0.1/"), 0) << script.substr(at, 40);
    }
    // Kubernetes' $(VAR) syntax stays out of the hook.
    EXPECT_EQ(script.find("$("), std::string::npos) << script;
  }
}

// A stand-in for limiterd's admin port on 127.0.0.1 (any free port): POST /drain answers
// `drain_status`; GET /healthz answers 200 `healthy` times (forever when not positive), and then
// the port closes, as when the node has handed its keys over and exited. Every request line
// is recorded.
class FakeAdminPort {
 public:
  FakeAdminPort(int drain_status, int healthy) : drain_status_(drain_status), healthy_(healthy) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeAdminPort() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Serve() {
    int healthy_left = healthy_;
    while (!stop_) {
      pollfd p = {fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      timeval timeout = {2, 0};
      ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
      std::string request;
      char buffer[1024];
      while (request.find("\r\n\r\n") == std::string::npos && request.size() < 8192) {
        const ssize_t n = ::recv(conn, buffer, sizeof buffer, 0);
        if (n <= 0) break;
        request.append(buffer, static_cast<size_t>(n));
      }
      const std::string line = request.substr(0, request.find("\r\n"));
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(line);
      }
      std::string reply;
      if (line.rfind("POST /drain ", 0) == 0) {
        reply = "HTTP/1.1 " + std::to_string(drain_status_) + " X\r\nContent-Length: 9\r\n\r\n" +
                "draining\n";
      } else if (line.rfind("GET /healthz ", 0) == 0) {
        reply = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
      } else {
        reply = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
      }
      // MSG_NOSIGNAL: the hook hangs up after the status line.
      ::send(conn, reply.data(), reply.size(), MSG_NOSIGNAL);
      ::close(conn);
      if (line.rfind("GET /healthz ", 0) == 0 && healthy_left > 0 && --healthy_left == 0) {
        ::close(fd_);  // the node has exited: connections are refused from now on
        fd_ = -1;
        return;
      }
    }
  }

  const int drain_status_;
  const int healthy_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> requests_;
};

struct HookRun {
  Output output;
  double seconds = 0;
};

// The preStop hook rendered for an admin port of `port` (and `extra` values), run by bash.
HookRun RunPreStopHook(int port, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"--set", std::string("secret.value=") + kSecret, "--set",
                                   "ports.admin=" + std::to_string(port)};
  args.insert(args.end(), extra.begin(), extra.end());
  Output rendered = Template(args);
  EXPECT_EQ(rendered.status, 0) << rendered.err;
  if (rendered.status != 0) return {};
  const std::string script = PreStopScript(View(Manifests::Parse(rendered.out)).container);
  const auto start = std::chrono::steady_clock::now();
  HookRun run;
  run.output = RunProgram({"/bin/bash", "-c", script});
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

TEST_F(HelmChart, PreStopHookPostsDrainAndWaitsUntilTheNodeHasExited) {
  FakeAdminPort admin(202, 3);
  const HookRun run = RunPreStopHook(admin.port());
  EXPECT_EQ(run.output.status, 0) << run.output.out << run.output.err;
  EXPECT_EQ(admin.requests(),
            (std::vector<std::string>{"POST /drain HTTP/1.0", "GET /healthz HTTP/1.0",
                                      "GET /healthz HTTP/1.0", "GET /healthz HTTP/1.0"}));
  // Three rounds of half a second, then the refused connection ends it.
  EXPECT_LT(run.seconds, 5.0);
}

TEST_F(HelmChart, PreStopHookWaitsAtMostTheDeadlinePlusFiveSeconds) {
  // A node that keeps answering: the hook gives up in time for the grace period.
  FakeAdminPort admin(202, -1);
  const HookRun run = RunPreStopHook(
      admin.port(), {"--set", "handoff.deadline=1s", "--set", "terminationGracePeriodSeconds=6"});
  EXPECT_EQ(run.output.status, 0) << run.output.out << run.output.err;
  EXPECT_LT(run.seconds, 1.0 + 5.0);
  EXPECT_GE(run.seconds, 1.0) << "it gave up before the deadline";
  EXPECT_GE(admin.requests().size(), 3u);
}

TEST_F(HelmChart, PreStopHookLeavesANodeWithoutDrainToTheSigterm) {
  // An image without /drain (404): the hook ends at once and SIGTERM does the stopping.
  FakeAdminPort admin(404, -1);
  const HookRun run = RunPreStopHook(admin.port());
  EXPECT_EQ(run.output.status, 0) << run.output.out << run.output.err;
  EXPECT_EQ(admin.requests(), (std::vector<std::string>{"POST /drain HTTP/1.0"}));
  EXPECT_LT(run.seconds, 2.0);
}

// --- The data dir: durable policies' keys, in RocksDB under data_dir. ---

// The volume mounted, writable, at exactly `dir` in the node container: a pod volume, or a
// claim template of the StatefulSet of that name (Kubernetes adds the pod's volume for it).
struct DataVolume {
  std::optional<YAML::Node> pod_volume, claim;
};

DataVolume DataVolumeAt(const NodeConfigView& v, const std::string& dir) {
  DataVolume found;
  std::string name;
  for (const YAML::Node& m : v.container["volumeMounts"]) {
    if (m["mountPath"].as<std::string>() != dir) continue;
    EXPECT_TRUE(name.empty()) << "two volumes mounted at " << dir;
    name = m["name"].as<std::string>();
    EXPECT_FALSE(m["readOnly"].as<bool>(false)) << "the data dir is mounted read-only";
    EXPECT_FALSE(m["subPath"].IsDefined()) << m;
  }
  EXPECT_FALSE(name.empty()) << "nothing is mounted at " << dir;
  for (const YAML::Node& vol : v.pod_spec["volumes"]) {
    if (vol["name"].as<std::string>() == name) found.pod_volume = vol;
  }
  for (const YAML::Node& t : v.statefulset["spec"]["volumeClaimTemplates"]) {
    if (t["metadata"]["name"].as<std::string>() == name) found.claim = t;
  }
  // Both would make Kubernetes refuse the StatefulSet.
  EXPECT_NE(found.pod_volume.has_value(), found.claim.has_value())
      << "volume " << name << ": a pod volume " << (found.pod_volume ? "and" : "nor")
      << " a claim template";
  return found;
}

TEST_F(HelmChart, DataDirIsAnEmptyDirWithoutPersistence) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    const NodeConfigView v = View(m);
    const std::string data_dir = v.config["data_dir"].as<std::string>("");
    EXPECT_EQ(data_dir, "/var/lib/limiterd");
    const DataVolume volume = DataVolumeAt(v, data_dir);
    ASSERT_TRUE(volume.pod_volume);
    EXPECT_TRUE((*volume.pod_volume)["emptyDir"].IsDefined()) << *volume.pod_volume;
    EXPECT_FALSE(v.statefulset["spec"]["volumeClaimTemplates"].IsDefined());
    // The volume belongs to the node's group: writable by uid 65532 on a read-only root.
    EXPECT_EQ(v.pod_spec["securityContext"]["fsGroup"].as<int>(0), 65532);
    Result<NodeConfig> config = LoadRendered(v, "emptydir");
    ASSERT_TRUE(config) << config.error();
    EXPECT_EQ(config->durable.data_dir, data_dir);
    EXPECT_EQ(config->durable.mode, DurabilityMode::kSync);
    EXPECT_EQ(config->durable.interval_ms, 100);
  }
}

TEST_F(HelmChart, DataDirIsAClaimPerPodWithPersistence) {
  struct Case {
    std::vector<std::string> values;
    std::string size;
    std::optional<std::string> storage_class;  // nullopt: no storageClassName (the default)
  };
  for (const Case& c : std::vector<Case>{
           {{}, "1Gi", std::nullopt},
           {{"--set", "persistence.size=5Gi", "--set", "persistence.storageClass=fast"},
            "5Gi",
            "fast"},
           {{"--set", "persistence.storageClass=-"}, "1Gi", ""}}) {  // "-": no class at all
    std::vector<std::string> args = {"--set", std::string("secret.value=") + kSecret, "--set",
                                     "persistence.enabled=true"};
    args.insert(args.end(), c.values.begin(), c.values.end());
    SCOPED_TRACE(::testing::PrintToString(args));
    Output run = Template(args);
    ASSERT_EQ(run.status, 0) << run.err;
    const Manifests m = Manifests::Parse(run.out);
    const NodeConfigView v = View(m);
    const std::string data_dir = v.config["data_dir"].as<std::string>("");
    EXPECT_EQ(data_dir, "/var/lib/limiterd");
    const DataVolume volume = DataVolumeAt(v, data_dir);
    ASSERT_TRUE(volume.claim) << YAML::Dump(v.statefulset["spec"]);
    const YAML::Node claim = *volume.claim;
    const YAML::Node spec = claim["spec"];
    ASSERT_EQ(spec["accessModes"].size(), 1u);
    EXPECT_EQ(spec["accessModes"][0].as<std::string>(), "ReadWriteOnce");
    EXPECT_EQ(spec["resources"]["requests"]["storage"].as<std::string>(""), c.size);
    if (c.storage_class) {
      EXPECT_EQ(spec["storageClassName"].as<std::string>("<none>"), *c.storage_class);
    } else {
      EXPECT_FALSE(spec["storageClassName"].IsDefined()) << spec;
    }
    // The claims carry the nodes' labels (kubectl get pvc -l ...).
    EXPECT_TRUE(Selects(v.statefulset["spec"]["selector"]["matchLabels"],
                        claim["metadata"]["labels"]));
    EXPECT_EQ(v.pod_spec["securityContext"]["fsGroup"].as<int>(0), 65532);
    Result<NodeConfig> config = LoadRendered(v, "claim");
    ASSERT_TRUE(config) << config.error();
    EXPECT_EQ(config->durable.data_dir, data_dir);
  }
  Output lint = Helm({"lint", "--strict", kChartDir, "--set",
                      std::string("secret.value=") + kSecret, "--set", "persistence.enabled=true"});
  EXPECT_EQ(lint.status, 0) << lint.out << lint.err;
}

TEST_F(HelmChart, DurabilityReachesTheNodeConfig) {
  Output run = Template({"--set", std::string("secret.value=") + kSecret, "--set",
                         "config.durability=interval", "--set", "config.syncInterval=250ms"});
  ASSERT_EQ(run.status, 0) << run.err;
  Result<NodeConfig> config = LoadRendered(View(Manifests::Parse(run.out)), "durability");
  ASSERT_TRUE(config) << config.error();
  EXPECT_EQ(config->durable.mode, DurabilityMode::kInterval);
  EXPECT_EQ(config->durable.interval_ms, 250);

  Output bad = Template({"--set", std::string("secret.value=") + kSecret, "--set",
                         "config.durability=fast"});
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("config.durability must be sync or interval; got 'fast'"),
            std::string::npos)
      << bad.err;
  // The chart sets data_dir: config.extra must not repeat it.
  Output extra = Template({"--set", std::string("secret.value=") + kSecret, "--set",
                           "config.extra.data_dir=/tmp"});
  EXPECT_NE(extra.status, 0);
  EXPECT_NE(extra.err.find("config.extra.data_dir is set by the chart"), std::string::npos)
      << extra.err;
}

// docker-compose.yml's limiterd service and the host file of the config its --config names
// (by the volume mounted there). Not the chart, but a deployment all the same; no helm needed.
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
}  // namespace limiter
