// limiterd: the shard node. Wiring only; everything else is in the limiter_server library.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "common/clock.h"
#include "common/membership.h"
#include "common/policy_file.h"
#include "server/config.h"

int main(int argc, char** argv) {
  CLI::App app{"limiterd: a shard node of the rate-limiter cluster"};
  std::string config_path, listen, admin, policies, name;
  int threads = 0;
  int64_t max_keys = 0;
  app.add_option("--config", config_path, "Config file (YAML); flags override it");
  app.add_option("--listen", listen, "HOST:PORT for clients (port 0: any free port)");
  app.add_option("--admin", admin, "HOST:PORT for /metrics, /healthz, /readyz");
  app.add_option("--policies", policies, "Policy file (YAML)");
  app.add_option("--threads", threads, "Worker threads (default: one per core)")
      ->check(CLI::Range(1, 256));
  app.add_option("--max-keys", max_keys, "Most keys held at once")->check(CLI::PositiveNumber);
  app.add_option("--name", name, "Node name");
  std::string members, members_dns, self;
  int64_t generation = -1;
  app.add_option("--members", members, "The cluster: HOST:PORT,HOST:PORT,... (default: standalone)");
  app.add_option("--generation", generation,
                 "Generation of --members: nodes and gateways adopt only a larger one (default 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--members-dns", members_dns, "Or NAME:PORT resolving to every node, re-resolved");
  app.add_option("--self", self, "This node's HOST:PORT among the members");
  int64_t hot_split_above = -1;
  int hot_split = 0;
  app.add_option("--hot-split-above", hot_split_above,
                 "Split a key above this many ops/s on this node (0: never; default 10000)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--hot-split", hot_split, "Sub-buckets of a split key: 2, 4, ... 64")
      ->check(CLI::IsMember({2, 4, 8, 16, 32, 64}));
  CLI11_PARSE(app, argc, argv);

  limiter::NodeConfig config;
  if (!config_path.empty()) {
    limiter::Result<limiter::NodeConfig> loaded = limiter::LoadNodeConfig(config_path);
    if (!loaded) {
      std::cerr << "limiterd: " << loaded.error() << '\n';
      return 1;
    }
    config = std::move(loaded).value();
  }
  if (!listen.empty()) config.server.listen = listen;
  if (app.count("--admin")) config.server.admin = admin;
  if (!policies.empty()) config.policies_path = policies;
  if (threads > 0) config.server.threads = threads;
  if (max_keys > 0) config.node.store.max_keys = max_keys;
  if (!name.empty()) config.node.name = name;
  if (!members.empty()) {
    limiter::Result<std::vector<std::string>> list = limiter::ParseMemberList(members);
    if (!list) {
      std::cerr << "limiterd: --members: " << list.error() << '\n';
      return 1;
    }
    config.node.members = std::move(list).value();
  }
  if (generation >= 0) config.node.generation = static_cast<uint64_t>(generation);
  if (!members_dns.empty()) config.server.members_dns = members_dns;
  if (!self.empty()) config.node.self = self;
  if (hot_split_above >= 0) config.node.hot.split_above = hot_split_above;
  if (hot_split > 0) config.node.hot.split_k = hot_split;
  if ((!config.node.members.empty() || !config.server.members_dns.empty()) &&
      config.node.self.empty()) {
    std::cerr << "limiterd: a node in a cluster needs --self HOST:PORT (its own member entry)\n";
    return 1;
  }
  if (!config.node.members.empty() &&
      std::find(config.node.members.begin(), config.node.members.end(), config.node.self) ==
          config.node.members.end()) {
    std::cerr << "limiterd: --self " << config.node.self << " is not in the member list\n";
    return 1;
  }
  if (config.policies_path.empty()) {
    std::cerr << "limiterd: no policy file: give --policies FILE or policies: in --config\n";
    return 1;
  }
  limiter::Result<limiter::PolicySet> policy_set = limiter::LoadPolicyFile(config.policies_path);
  if (!policy_set) {
    std::cerr << "limiterd: " << policy_set.error() << '\n';
    return 1;
  }

  limiter::SteadyClock clock;
  limiter::Node node(*policy_set, clock, config.node);
  limiter::Server server(node, config.server);
  if (auto error = server.Start()) {
    std::cerr << "limiterd: " << *error << '\n';
    return 1;
  }
  std::printf("limiterd %s listening on %s admin %s threads %d policies %zu\n",
              config.node.name.c_str(), server.listen_address().c_str(),
              server.admin_address().empty() ? "-" : server.admin_address().c_str(),
              server.threads(), policy_set->policies().size());
  std::fflush(stdout);
  server.Run();
  std::fprintf(stderr, "limiterd: stopped\n");
  return 0;
}
