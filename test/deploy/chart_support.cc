#include "test/deploy/chart_support.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "test/support/build_paths.h"

namespace limiter::chart {

const std::string kChartDir = testing::SourcePath("helm");

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

std::string HelmPath() {
  const char* helm = std::getenv("LIMITER_HELM");
  if (helm == nullptr || *helm == '\0') return {};
  return ::access(helm, X_OK) == 0 ? std::string(helm) : std::string();
}

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

Output Template(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"template", "t", kChartDir, "--namespace", kNamespace};
  args.insert(args.end(), extra.begin(), extra.end());
  return Helm(args);
}

const std::vector<std::string> kSecrets = {"--set", std::string("secret.value=") + kSecret,
                                           "--set", std::string("secret.peerValue=") + kPeerSecret,
                                           "--set", std::string("secret.keySeedValue=") + kKeySeed};

Output TemplateWithSecret(std::vector<std::string> extra) {
  extra.insert(extra.begin(), kSecrets.begin(), kSecrets.end());
  return Template(extra);
}

const std::vector<std::string> kAllOn = {"--set", std::string("secret.value=") + kSecret,
                                         "--set", std::string("secret.peerValue=") + kPeerSecret,
                                         "--set", std::string("secret.keySeedValue=") + kKeySeed,
                                         "--set", "tls.enabled=true",
                                         "--set", "tls.secretName=limiter-tls",
                                         "--set", "serviceMonitor.enabled=true",
                                         "--set", "bench.enabled=true",
                                         "--set", "bench.parallelism=3",
                                         "--set", "bench.outputClaim=limiter-bench-out"};

Manifests Manifests::Parse(const std::string& text) {
  Manifests m;
  for (const YAML::Node& doc : YAML::LoadAll(text)) {
    if (!doc.IsMap()) continue;
    m.docs_.push_back(doc);
  }
  return m;
}

std::vector<YAML::Node> Manifests::OfKind(const std::string& kind) const {
  std::vector<YAML::Node> found;
  for (const YAML::Node& d : docs_) {
    if (d["kind"].as<std::string>() == kind) found.push_back(d);
  }
  return found;
}

YAML::Node Manifests::One(const std::string& kind) const {
  std::vector<YAML::Node> found = OfKind(kind);
  EXPECT_EQ(found.size(), 1u) << "objects of kind " << kind;
  return found.size() == 1 ? found[0] : YAML::Node();
}

YAML::Node Manifests::Named(const std::string& kind, const std::string& name) const {
  for (const YAML::Node& d : OfKind(kind)) {
    if (d["metadata"]["name"].as<std::string>() == name) return d;
  }
  ADD_FAILURE() << "no " << kind << " named " << name;
  return YAML::Node();
}

YAML::Node Manifests::ConfigMap(const std::string& component) const {
  for (const YAML::Node& d : OfKind("ConfigMap")) {
    if (d["metadata"]["labels"]["app.kubernetes.io/component"].as<std::string>() == component) {
      return d;
    }
  }
  ADD_FAILURE() << "no ConfigMap of component " << component;
  return YAML::Node();
}

std::map<std::string, std::string> StringMap(const YAML::Node& node) {
  std::map<std::string, std::string> m;
  if (node.IsMap()) {
    for (const auto& kv : node) m[kv.first.as<std::string>()] = kv.second.as<std::string>();
  }
  return m;
}

::testing::AssertionResult Selects(const YAML::Node& selector, const YAML::Node& labels) {
  const std::map<std::string, std::string> want = StringMap(selector);
  const std::map<std::string, std::string> have = StringMap(labels);
  if (want.empty()) return ::testing::AssertionFailure() << "empty selector";
  for (const auto& [key, value] : want) {
    auto it = have.find(key);
    if (it == have.end() || it->second != value) {
      return ::testing::AssertionFailure() << "selector " << key << "=" << value
                                           << " does not match the labels " << YAML::Dump(labels);
    }
  }
  return ::testing::AssertionSuccess();
}

int PortOf(const std::string& host_port) {
  return std::atoi(host_port.substr(host_port.rfind(':') + 1).c_str());
}

std::string ArgAfter(const YAML::Node& container, const std::string& flag) {
  const YAML::Node command = container["command"];
  for (size_t i = 0; i + 1 < command.size(); ++i) {
    if (command[i].as<std::string>() == flag) return command[i + 1].as<std::string>();
  }
  ADD_FAILURE() << "no " << flag << " in " << YAML::Dump(command);
  return {};
}

int ContainerPort(const YAML::Node& container, const std::string& name) {
  for (const YAML::Node& p : container["ports"]) {
    if (p["name"].as<std::string>() == name) return p["containerPort"].as<int>();
  }
  ADD_FAILURE() << "no container port named " << name;
  return -1;
}

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

std::string SecretKeyFor(const YAML::Node& volume, const std::string& file) {
  const YAML::Node items = volume["secret"]["items"];
  if (!items) return file;  // every key, each as a file of its name
  for (const YAML::Node& item : items) {
    if (item["path"].as<std::string>() == file) return item["key"].as<std::string>();
  }
  ADD_FAILURE() << "secret volume " << volume["name"] << " holds no file " << file;
  return {};
}

std::vector<std::string> MountedSecretKeys(const YAML::Node& pod_spec) {
  std::vector<std::string> keys;
  for (const YAML::Node& v : pod_spec["volumes"]) {
    std::vector<YAML::Node> sources;
    if (v["secret"]) sources.push_back(v["secret"]);
    if (v["projected"] && v["projected"]["sources"]) {
      for (const YAML::Node& p : v["projected"]["sources"]) {
        if (p["secret"]) sources.push_back(p["secret"]);
      }
    }
    for (const YAML::Node& secret : sources) {
      const std::string name =
          secret[secret["secretName"] ? "secretName" : "name"].as<std::string>();
      if (!secret["items"]) {
        keys.push_back(name + "/*");
        continue;
      }
      for (const YAML::Node& item : secret["items"]) {
        keys.push_back(name + "/" + item["key"].as<std::string>());
      }
    }
  }
  return keys;
}

std::string Base64Decode(const std::string& text) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t bits = 0;
  int held = 0;
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '=') --end;
  if (text.size() % 4 != 0 || text.size() - end > 2) {
    ADD_FAILURE() << "not base64: " << text;
    return {};
  }
  for (size_t i = 0; i < end; ++i) {
    const size_t v = kAlphabet.find(text[i]);
    if (v == std::string::npos) {
      ADD_FAILURE() << "not base64: " << text;
      return {};
    }
    bits = (bits << 6) | static_cast<uint32_t>(v);
    held += 6;
    if (held >= 8) {
      held -= 8;
      out.push_back(static_cast<char>((bits >> held) & 0xff));
    }
  }
  return out;
}

std::string Dir(const std::string& path) { return fs::path(path).parent_path().string(); }
std::string Base(const std::string& path) { return fs::path(path).filename().string(); }

void HelmChart::SetUpTestSuite() {
  IsolateHelm();
  if (HelmPath().empty()) return;
  default_ = new Output(TemplateWithSecret({}));
  all_on_ = new Output(Template(kAllOn));
}

void HelmChart::TearDownTestSuite() {
  delete default_;
  delete all_on_;
  default_ = all_on_ = nullptr;
  std::error_code ignored;
  fs::remove_all(HelmHome(), ignored);
}

void HelmChart::SetUp() {
  ASSERT_FALSE(HelmPath().empty())
      << "LIMITER_HELM must name the helm binary (it is "
      << (std::getenv("LIMITER_HELM") ? std::string("'") + std::getenv("LIMITER_HELM") +
                                            "', which is not an executable file"
                                      : std::string("unset"))
      << "); ./dev.sh test installs helm into .cache/helm and sets it";
  ASSERT_EQ(default_->status, 0) << default_->err;
  ASSERT_EQ(all_on_->status, 0) << all_on_->err;
}

Output* HelmChart::default_ = nullptr;
Output* HelmChart::all_on_ = nullptr;

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

Result<NodeConfig> LoadRendered(const NodeConfigView& v, const std::string& tag) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("limiter_chart_" + std::to_string(::getpid()) + "_" + tag);
  fs::create_directories(dir);
  for (const auto& kv : v.config_map["data"]) {
    std::ofstream(dir / kv.first.as<std::string>()) << kv.second.as<std::string>();
  }
  Result<NodeConfig> config = LoadNodeConfig((dir / Base(v.config_path)).string());
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return config;
}

}  // namespace limiter::chart
