// The Helm chart in helm/, rendered with the helm binary named by $LIMITER_HELM (dev.sh
// installs one into .cache/helm and sets it): the manifests fit together. Selectors match the
// pods, ports agree from the Service to limiterd's own config, the config and secret are
// mounted where the config says, members_dns names the headless Service, and a policy change
// rolls the pods. The rendered config and policy file are also loaded with limiterd's own
// loaders, so a field the chart writes wrongly fails here, not in a cluster. The drain, the
// data dir, the credentials, the NetworkPolicy and docker-compose.yml have files of their own
// beside this one.

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/policy_file.h"
#include "test/deploy/chart_support.h"

namespace limiter::chart {
namespace {

TEST_F(HelmChart, LintPasses) {
  Output plain = Helm({"lint", kChartDir});
  EXPECT_EQ(plain.status, 0) << plain.out << plain.err;
  std::vector<std::string> with_secrets = {"lint", "--strict", kChartDir};
  with_secrets.insert(with_secrets.end(), kSecrets.begin(), kSecrets.end());
  Output strict = Helm(with_secrets);
  EXPECT_EQ(strict.status, 0) << strict.out << strict.err;
  std::vector<std::string> all = {"lint", "--strict", kChartDir};
  all.insert(all.end(), kAllOn.begin(), kAllOn.end());
  Output all_on = Helm(all);
  EXPECT_EQ(all_on.status, 0) << all_on.out << all_on.err;
}

TEST_F(HelmChart, RenderingWithoutASecretFailsWithTheChartsMessage) {
  Output run = Template({});
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.err.find("the gateway secret is missing: set secret.value"), std::string::npos)
      << run.err;
  Output tls = TemplateWithSecret({"--set", "tls.enabled=true"});
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
  EXPECT_EQ(d.OfKind("NetworkPolicy").size(), 1u);
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
      TemplateWithSecret({"--set", "bench.enabled=true", "--set", "bench.parallelism=2"});
  EXPECT_NE(no_claim.status, 0);
  EXPECT_NE(no_claim.err.find("set bench.outputClaim"), std::string::npos) << no_claim.err;
  // One pod runs the whole scenario: no --part.
  const Output one = TemplateWithSecret({"--set", "bench.enabled=true"});
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
      EXPECT_TRUE(
          Selects(sm["spec"]["selector"]["matchLabels"], m.One("Service")["metadata"]["labels"]));
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
  EXPECT_FALSE(v.config["tls"]["peer_ca"].IsDefined());

  // A CA of node certificates only (tls.peer_ca), from a Secret of its own.
  Output peer_ca =
      TemplateWithSecret({"--set", "tls.enabled=true", "--set", "tls.secretName=limiter-tls",
                          "--set", "tls.peerCaSecretName=limiter-peer-ca"});
  ASSERT_EQ(peer_ca.status, 0) << peer_ca.err;
  const NodeConfigView p = View(Manifests::Parse(peer_ca.out));
  const std::string file = p.config["tls"]["peer_ca"].as<std::string>("");
  ASSERT_FALSE(file.empty()) << p.config["tls"];
  const YAML::Node volume = VolumeMountedAt(p.pod_spec, p.container, Dir(file));
  EXPECT_EQ(volume["secret"]["secretName"].as<std::string>(), "limiter-peer-ca");
  EXPECT_EQ(SecretKeyFor(volume, Base(file)), "ca.crt");
  Result<NodeConfig> config = LoadRendered(p, "peer-ca");
  ASSERT_TRUE(config) << config.error();
  EXPECT_EQ(config->server.tls.peer_ca_file, file);
  Output without_tls = TemplateWithSecret({"--set", "tls.peerCaSecretName=limiter-peer-ca"});
  EXPECT_NE(without_tls.status, 0);
  EXPECT_NE(without_tls.err.find("tls.peerCaSecretName needs tls.enabled"), std::string::npos)
      << without_tls.err;
}

TEST_F(HelmChart, ChecksumAnnotationFollowsThePolicies) {
  const std::string base =
      "policies:\n  - name: a\n    algorithm: gcra\n    window: 1s\n"
      "    class: contract\n    limit: ";
  auto checksum = [&](const std::string& limit) {
    Output run = TemplateWithSecret({"--set-string", "policies=" + base + limit + "\n"});
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
    EXPECT_EQ(config->peer_secret_file, "/var/run/limiter/peer-secret/peer-secret");
    EXPECT_EQ(config->key_seed_file, "/var/run/limiter/key-seed/key-seed");
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

}  // namespace
}  // namespace limiter::chart
