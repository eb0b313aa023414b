// The chart's NetworkPolicy, read the way Kubernetes reads it: for a few sources (a node, a
// gateway, the bench, Prometheus, the kubelet, other pods, an outside address), whether the
// policy lets each reach the data port and the admin port of a node. The data port only from
// the nodes, the bench, the gateways and the extra peers; the admin port only from the kubelet
// and Prometheus; nothing else, and no rule without peers (which would admit everyone).

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "test/deploy/chart_support.h"

namespace limiter::chart {
namespace {

using Labels = std::map<std::string, std::string>;

// Where a connection comes from: a pod (its labels, its namespace and that namespace's
// labels) or an address outside any pod (a machine, the kubelet, another network).
struct Source {
  std::string what;
  Labels pod;  // empty with ip: not a pod
  std::string ns;
  std::string ip;
};

Source Pod(std::string what, Labels labels, std::string ns = kNamespace) {
  return {std::move(what), std::move(labels), std::move(ns), ""};
}
Source Address(std::string what, std::string ip) {
  return {std::move(what), {}, "", std::move(ip)};
}

// A label selector (matchLabels and matchExpressions; {} matches everything).
bool Matches(const YAML::Node& selector, const Labels& labels) {
  if (const YAML::Node match = selector["matchLabels"]) {
    for (const auto& [key, value] : StringMap(match)) {
      auto it = labels.find(key);
      if (it == labels.end() || it->second != value) return false;
    }
  }
  const YAML::Node expressions = selector["matchExpressions"];
  if (!expressions) return true;
  for (const YAML::Node& e : expressions) {
    const std::string key = e["key"].as<std::string>();
    const std::string op = e["operator"].as<std::string>();
    auto it = labels.find(key);
    bool listed = false;
    for (const YAML::Node& v : e["values"])
      listed |= it != labels.end() && it->second == v.as<std::string>();
    if ((op == "In" && !listed) || (op == "NotIn" && listed) ||
        (op == "Exists" && it == labels.end()) || (op == "DoesNotExist" && it != labels.end())) {
      return false;
    }
  }
  return true;
}

bool InCidr(const std::string& ip, const std::string& cidr) {
  const size_t slash = cidr.find('/');
  in_addr a{}, net{};
  if (slash == std::string::npos || ::inet_pton(AF_INET, ip.c_str(), &a) != 1 ||
      ::inet_pton(AF_INET, cidr.substr(0, slash).c_str(), &net) != 1) {
    ADD_FAILURE() << "not IPv4: " << ip << " in " << cidr;
    return false;
  }
  const int bits = std::stoi(cidr.substr(slash + 1));
  const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
  return (ntohl(a.s_addr) & mask) == (ntohl(net.s_addr) & mask);
}

// The namespaces' labels, as Kubernetes sets them (kubernetes.io/metadata.name) plus a few.
Labels NamespaceLabels(const std::string& ns) {
  Labels labels = {{"kubernetes.io/metadata.name", ns}};
  if (ns == "edge") labels["tier"] = "edge";
  return labels;
}

bool PeerMatches(const YAML::Node& peer, const Source& s) {
  if (peer["ipBlock"]) {
    if (s.ip.empty() || !InCidr(s.ip, peer["ipBlock"]["cidr"].as<std::string>())) return false;
    if (const YAML::Node excepts = peer["ipBlock"]["except"]) {
      for (const YAML::Node& except : excepts) {
        if (InCidr(s.ip, except.as<std::string>())) return false;
      }
    }
    return true;
  }
  if (!s.ip.empty()) return false;  // selectors pick pods only
  if (peer["namespaceSelector"]) {
    if (!Matches(peer["namespaceSelector"], NamespaceLabels(s.ns))) return false;
  } else if (s.ns != kNamespace) {
    return false;  // no namespaceSelector: the policy's own namespace
  }
  return !peer["podSelector"] || Matches(peer["podSelector"], s.pod);
}

// Whether `policy` lets `s` reach TCP `port` of the pods it selects.
bool Admits(const YAML::Node& policy, const Source& s, int port) {
  for (const YAML::Node& rule : policy["spec"]["ingress"]) {
    const YAML::Node ports = rule["ports"];
    bool port_listed = !ports || ports.size() == 0;
    for (size_t i = 0; ports && i < ports.size(); ++i) {
      port_listed |= ports[i]["port"].as<int>() == port &&
                     ports[i]["protocol"].as<std::string>("TCP") == "TCP";
    }
    if (!port_listed) continue;
    if (!rule["from"] || rule["from"].size() == 0) return true;
    for (const YAML::Node& peer : rule["from"]) {
      if (PeerMatches(peer, s)) return true;
    }
  }
  return false;
}

Labels PodLabels(const YAML::Node& workload) {
  return StringMap(workload["spec"]["template"]["metadata"]["labels"]);
}

struct Expect {
  Source source;
  bool data, admin;
};

void CheckAccess(const Manifests& m, const std::vector<Expect>& expected, int data = 7450,
                 int admin = 7451) {
  const YAML::Node policy = m.One("NetworkPolicy");
  ASSERT_TRUE(policy.IsMap());
  const YAML::Node sts = m.One("StatefulSet");
  // It covers the nodes' pods, and nothing else of the chart's.
  EXPECT_TRUE(Selects(policy["spec"]["podSelector"]["matchLabels"],
                      sts["spec"]["template"]["metadata"]["labels"]));
  for (const YAML::Node& job : m.OfKind("Job")) {
    EXPECT_FALSE(Matches(policy["spec"]["podSelector"], PodLabels(job)));
  }
  std::vector<std::string> types;
  for (const YAML::Node& t : policy["spec"]["policyTypes"]) types.push_back(t.as<std::string>());
  EXPECT_EQ(types, std::vector<std::string>{"Ingress"});
  // Every rule names its ports and its peers: a rule without either opens up to everyone.
  for (const YAML::Node& rule : policy["spec"]["ingress"]) {
    EXPECT_GT(rule["ports"].size(), 0u) << rule;
    EXPECT_GT(rule["from"].size(), 0u) << rule;
  }
  for (const Expect& e : expected) {
    EXPECT_EQ(Admits(policy, e.source, data), e.data) << e.source.what << ", the data port";
    EXPECT_EQ(Admits(policy, e.source, admin), e.admin) << e.source.what << ", the admin port";
  }
}

const Labels kGateway = {{"limiter/gateway", "true"}, {"app", "api"}};
const Labels kPrometheus = {{"app.kubernetes.io/name", "prometheus"}};

TEST_F(HelmChart, NetworkPolicyLetsInTheGatewaysAndTheScrapersOnly) {
  for (const auto& [what, m] : Both()) {
    SCOPED_TRACE(what);
    const bool bench = !m.OfKind("Job").empty();
    std::vector<Expect> expected = {
        {Pod("a node", PodLabels(m.One("StatefulSet"))), true, false},
        {Pod("a gateway", kGateway), true, false},
        {Pod("a gateway of another namespace", kGateway, "edge"), false, false},
        {Pod("another pod", {{"app", "api"}}), false, false},
        {Pod("a pod without labels", {}), false, false},
        {Pod("Prometheus", kPrometheus, "monitoring"), false, true},
        {Address("the kubelet (no kubeletCidrs)", "10.0.3.4"), false, false},
        {Address("an outside address", "203.0.113.9"), false, false},
    };
    for (const YAML::Node& job : m.OfKind("Job")) {
      expected.push_back({Pod("the bench", PodLabels(job)), true, false});
    }
    EXPECT_EQ(bench, what != "default values");
    CheckAccess(m, expected);
  }
}

TEST_F(HelmChart, NetworkPolicyFollowsItsValues) {
  Output run = TemplateWithSecret(
      {"--set", "networkPolicy.kubeletCidrs={10.0.0.0/16,10.1.0.0/16}", "--set-json",
       R"(networkPolicy.gateways=[{"podSelector":{"matchLabels":{"limiter/gateway":"true"}},)"
       R"("namespaceSelector":{"matchLabels":{"tier":"edge"}}}])",
       "--set-json",
       R"(networkPolicy.extraDataPeers=[{"ipBlock":{"cidr":"192.168.0.0/24",)"
       R"("except":["192.168.0.128/25"]}}])",
       "--set-json",
       R"(networkPolicy.prometheus=[{"podSelector":{"matchLabels":{"app":"scraper"}}}])", "--set",
       "ports.data=9450", "--set", "ports.admin=9451"});
  ASSERT_EQ(run.status, 0) << run.err;
  const Manifests m = Manifests::Parse(run.out);
  CheckAccess(m,
              {
                  {Pod("a node", PodLabels(m.One("StatefulSet"))), true, false},
                  // namespaceSelector and podSelector in one peer: both must match.
                  {Pod("a gateway in edge", kGateway, "edge"), true, false},
                  {Pod("another pod in edge", {{"app", "api"}}, "edge"), false, false},
                  {Pod("a gateway of the release's namespace", kGateway), false, false},
                  {Pod("the scraper", {{"app", "scraper"}}), false, true},
                  {Pod("the scraper elsewhere", {{"app", "scraper"}}, "monitoring"), false, false},
                  {Pod("Prometheus", kPrometheus, "monitoring"), false, false},
                  {Address("the kubelet", "10.0.3.4"), false, true},
                  {Address("the kubelet of another subnet", "10.1.200.1"), false, true},
                  {Address("a machine outside the CIDRs", "10.2.0.1"), false, false},
                  {Address("an extra peer", "192.168.0.7"), true, false},
                  {Address("an extra peer's exception", "192.168.0.200"), false, false},
              },
              9450, 9451);
}

// With no kubelet CIDR and no Prometheus, the admin port has no rule at all: closed to every
// source (a rule with no peers would be open to all).
TEST_F(HelmChart, NetworkPolicyWithoutAdminPeersClosesTheAdminPort) {
  Output run = TemplateWithSecret({"--set-json", "networkPolicy.prometheus=[]"});
  ASSERT_EQ(run.status, 0) << run.err;
  const Manifests m = Manifests::Parse(run.out);
  EXPECT_EQ(m.One("NetworkPolicy")["spec"]["ingress"].size(), 1u);
  CheckAccess(m, {{Pod("a gateway", kGateway), true, false},
                  {Pod("Prometheus", kPrometheus, "monitoring"), false, false},
                  {Address("the kubelet", "10.0.3.4"), false, false}});
  // Gateways picked by namespace alone: every pod there.
  Output by_namespace = TemplateWithSecret(
      {"--set-json",
       R"(networkPolicy.gateways=[{"namespaceSelector":{"matchLabels":{"tier":"edge"}}}])"});
  ASSERT_EQ(by_namespace.status, 0) << by_namespace.err;
  CheckAccess(Manifests::Parse(by_namespace.out),
              {{Pod("any pod in edge", {{"app", "x"}}, "edge"), true, false},
               {Pod("a gateway of the release's namespace", kGateway), false, false}});
}

TEST_F(HelmChart, NetworkPolicyIsOptionalAndItsValuesAreChecked) {
  Output off = TemplateWithSecret({"--set", "networkPolicy.enabled=false"});
  ASSERT_EQ(off.status, 0) << off.err;
  EXPECT_TRUE(Manifests::Parse(off.out).OfKind("NetworkPolicy").empty());
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--set", "networkPolicy.kubeletCidrs={10.0.0.0}"},
            "networkPolicy.kubeletCidrs: '10.0.0.0' is not a CIDR"},
           {{"--set-json", R"(networkPolicy.gateways=[{"podSelector":"app"}])"},
            "networkPolicy.gateways[0].podSelector must be a map"},
           {{"--set-json", R"(networkPolicy.prometheus=[{"selector":{"app":"x"}}])"},
            "networkPolicy.prometheus[0].selector: a NetworkPolicy peer has only podSelector, "
            "namespaceSelector and ipBlock"},
           {{"--set-json", R"(networkPolicy.gateways=[{}])"},
            "networkPolicy.gateways[0] must be a NetworkPolicy peer"},
           {{"--set-json", R"(networkPolicy.extraDataPeers=[{"ipBlock":{"cidr":"10.0.0.0"}}])"},
            "networkPolicy.extraDataPeers[0].ipBlock.cidr must be a CIDR"},
           {{"--set", "networkPolicy.extraDataPeers=10.0.0.0/8"},
            "networkPolicy.extraDataPeers must be a list of NetworkPolicy peers"}}) {
    Output run = TemplateWithSecret(c.args);
    EXPECT_NE(run.status, 0) << c.args[1];
    EXPECT_NE(run.err.find(c.message), std::string::npos) << c.args[1] << ": " << run.err;
  }
}

}  // namespace
}  // namespace limiter::chart
