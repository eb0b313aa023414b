// The data dir of durable policies' keys (RocksDB under data_dir), as the chart sets it up: a
// writable volume mounted at data_dir, an emptyDir or a claim per pod
// (persistence.enabled), and the durability settings reaching the node config.

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

#include "test/deploy/chart_support.h"

namespace limiter::chart {
namespace {

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
    std::vector<std::string> args = {"--set", "persistence.enabled=true"};
    args.insert(args.end(), c.values.begin(), c.values.end());
    SCOPED_TRACE(::testing::PrintToString(args));
    Output run = TemplateWithSecret(args);
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
    EXPECT_TRUE(
        Selects(v.statefulset["spec"]["selector"]["matchLabels"], claim["metadata"]["labels"]));
    EXPECT_EQ(v.pod_spec["securityContext"]["fsGroup"].as<int>(0), 65532);
    Result<NodeConfig> config = LoadRendered(v, "claim");
    ASSERT_TRUE(config) << config.error();
    EXPECT_EQ(config->durable.data_dir, data_dir);
  }
  std::vector<std::string> args = {"lint", "--strict", kChartDir, "--set",
                                   "persistence.enabled=true"};
  args.insert(args.end(), kSecrets.begin(), kSecrets.end());
  Output lint = Helm(args);
  EXPECT_EQ(lint.status, 0) << lint.out << lint.err;
}

TEST_F(HelmChart, DurabilityReachesTheNodeConfig) {
  Output run = TemplateWithSecret(
      {"--set", "config.durability=interval", "--set", "config.syncInterval=250ms"});
  ASSERT_EQ(run.status, 0) << run.err;
  Result<NodeConfig> config = LoadRendered(View(Manifests::Parse(run.out)), "durability");
  ASSERT_TRUE(config) << config.error();
  EXPECT_EQ(config->durable.mode, DurabilityMode::kInterval);
  EXPECT_EQ(config->durable.interval_ms, 250);

  Output bad = TemplateWithSecret({"--set", "config.durability=fast"});
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("config.durability must be sync or interval; got 'fast'"),
            std::string::npos)
      << bad.err;
  // The chart sets data_dir: config.extra must not repeat it.
  Output extra = TemplateWithSecret({"--set", "config.extra.data_dir=/tmp"});
  EXPECT_NE(extra.status, 0);
  EXPECT_NE(extra.err.find("config.extra.data_dir is set by the chart"), std::string::npos)
      << extra.err;
}

}  // namespace
}  // namespace limiter::chart
