// limiterd: the shard node. Wiring only; everything else is in the limiter_server library.
#include <arpa/inet.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>

#include "common/auth.h"
#include "common/clock.h"
#include "common/key_id.h"
#include "common/membership.h"
#include "common/policy_file.h"
#include "server/config.h"
#include "server/secret_watcher.h"
#include "server/store.h"

namespace {

// Every connection is a descriptor, and the default soft limit (often 1024) is far below
// max_connections. Raising it to the hard limit needs no privilege; a node that cannot still
// runs, and out of descriptors it backs off from accepting.
void RaiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    std::fprintf(stderr, "limiterd: cannot raise the descriptor limit to %llu: %s\n",
                 static_cast<unsigned long long>(limit.rlim_max), std::strerror(errno));
  }
}

}  // namespace

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
  int64_t max_connections = 0, frame_timeout_ms = 0;
  app.add_option("--max-connections", max_connections,
                 "Most client connections open at once; more are closed as soon as accepted "
                 "(default 10000)")
      ->check(CLI::PositiveNumber);
  app.add_option("--frame-timeout-ms", frame_timeout_ms,
                 "A frame begun must be whole within this, or its connection closes "
                 "(default 10000)")
      ->check(CLI::PositiveNumber);
  std::string members, members_dns, self;
  int64_t generation = -1;
  app.add_option("--members", members,
                 "The cluster: HOST:PORT,HOST:PORT,... (default: standalone)");
  app.add_option("--generation", generation,
                 "Generation of --members: nodes and gateways adopt only a larger one (default 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--members-dns", members_dns, "Or NAME:PORT resolving to every node, re-resolved");
  app.add_option("--self", self, "This node's HOST:PORT among the members");
  int64_t handoff_deadline_ms = -1;
  app.add_option("--handoff-deadline-ms", handoff_deadline_ms,
                 "Hand-off on leave (SIGTERM) and join: how long keys may take to reach their "
                 "new owner, and a joining node waits for them, before they start fresh; 0 "
                 "turns the hand-off off (default 10000)")
      ->check(CLI::Range(int64_t{0}, int64_t{600'000}));
  std::string data_dir, durability;
  int64_t sync_interval_ms = 0;
  app.add_option("--data-dir", data_dir,
                 "RocksDB database for the keys of durable policies (needed when any is)");
  app.add_option("--durability", durability,
                 "sync: a durable change is fsynced before its reply (group commit); interval: "
                 "synced every --sync-interval-ms, replies do not wait (default sync)")
      ->check(CLI::IsMember({"sync", "interval"}));
  app.add_option("--sync-interval-ms", sync_interval_ms,
                 "Interval durability: how often queued changes are synced (default 100)")
      ->check(CLI::Range(int64_t{1}, int64_t{60'000}));
  int64_t hot_split_above = -1;
  int hot_split = 0;
  app.add_option("--hot-split-above", hot_split_above,
                 "Split a key above this many ops/s on this node (0: never; default 10000)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--hot-split", hot_split, "Sub-buckets of a split key: 2, 4, ... 64")
      ->check(CLI::IsMember({2, 4, 8, 16, 32, 64}));
  std::string secret_file;
  int64_t secret_reload_ms = 0;
  bool insecure = false;
  int64_t max_ops_per_frame = 0;
  app.add_option("--secret-file", secret_file,
                 "The cluster secret: a file of one line (or two: current and next), re-read "
                 "for rotation; else $LIMITER_SECRET_FILE or $LIMITER_SECRET");
  app.add_option("--secret-reload-ms", secret_reload_ms,
                 "How often the secret file is re-read (default 5000)")
      ->check(CLI::Range(int64_t{10}, int64_t{3'600'000}));
  app.add_flag("--insecure", insecure,
               "Serve beyond loopback without a cluster secret (every peer is trusted)");
  app.add_option("--max-ops-per-frame", max_ops_per_frame,
                 "Ops one frame may carry (default 8192)")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}));
  limiter::TlsOptions tls;
  app.add_option("--tls-cert", tls.cert_file,
                 "TLS on the data port: this node's certificate chain (PEM)");
  app.add_option("--tls-key", tls.key_file, "The key of --tls-cert (PEM)");
  app.add_option("--tls-client-ca", tls.ca_file,
                 "Mutual TLS: clients must present a certificate this CA signed (PEM)");
  int64_t max_tls_handshakes = 0;
  app.add_option("--max-tls-handshakes", max_tls_handshakes,
                 "TLS handshakes in progress at once; more are closed (default 1000)")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}));
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
  if (max_connections > 0) config.server.max_connections = max_connections;
  if (frame_timeout_ms > 0) config.server.frame_timeout_ms = frame_timeout_ms;
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
  if (handoff_deadline_ms >= 0) config.node.handoff_deadline_ms = handoff_deadline_ms;
  if (hot_split_above >= 0) config.node.hot.split_above = hot_split_above;
  if (!data_dir.empty()) config.durable.data_dir = data_dir;
  if (!durability.empty()) config.durable.mode = *limiter::ParseDurabilityMode(durability);
  if (sync_interval_ms > 0) config.durable.interval_ms = sync_interval_ms;
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

  RaiseDescriptorLimit();
  if (auto plan = limiter::Store::PlanBudgets(*policy_set, config.node.store.max_keys); !plan) {
    std::cerr << "limiterd: " << plan.error() << '\n';
    return 1;
  }
  if (auto error = limiter::RegionShares::Check(*policy_set, config.node.regions)) {
    std::cerr << "limiterd: " << *error << '\n';
    return 1;
  }
  if (!secret_file.empty()) config.secret_file = secret_file;
  if (secret_reload_ms > 0) config.secret_reload_ms = secret_reload_ms;
  if (insecure) config.insecure = true;
  if (max_ops_per_frame > 0) config.node.max_ops_per_frame = static_cast<uint32_t>(max_ops_per_frame);
  if (!tls.cert_file.empty() || !tls.key_file.empty() || !tls.ca_file.empty()) {
    config.server.tls = tls;  // the flags replace the file's tls: whole
  }
  if (max_tls_handshakes > 0) config.server.max_tls_handshakes = max_tls_handshakes;
  limiter::Result<limiter::auth::SecretSource> secret = limiter::auth::FindSecrets(config.secret_file);
  if (!secret) {
    std::cerr << "limiterd: " << secret.error() << '\n';
    return 1;
  }
  config.node.secrets = secret->secrets;
  // Every node of the cluster makes the same key id for a key (key_id.h), so that a node can
  // hand a key's state to another by id: the seed comes from the cluster secret the node
  // starts with (a constant without one, a cluster that trusts every peer anyway).
  limiter::SetKeyIdSeed(limiter::auth::KeyIdSeedOf(
      secret->secrets.empty() ? std::string_view() : secret->secrets.values.front()));
  const bool in_cluster = !config.node.members.empty() || !config.server.members_dns.empty();
  config.node.join_gate = in_cluster && config.node.handoff_deadline_ms > 0;
  if (secret->secrets.empty() && config.server.tls.ca_file.empty() && !config.insecure) {
    // Protected mode: a node that authenticates nobody (no secret, no client certificates)
    // trusts every peer, so it stays on loopback.
    const std::optional<limiter::HostPort> hp = limiter::ParseHostPort(config.server.listen);
    in_addr v4{};
    in6_addr v6{};
    const bool loopback =
        hp && (hp->host == "localhost" ||
               (::inet_pton(AF_INET, hp->host.c_str(), &v4) == 1 &&
                (ntohl(v4.s_addr) >> 24) == 127) ||
               (::inet_pton(AF_INET6, hp->host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6)));
    if (!loopback) {
      std::cerr << "limiterd: listening on " << config.server.listen
                << " without a cluster secret would trust every peer that reaches it; give "
                   "--secret-file (or $LIMITER_SECRET_FILE / $LIMITER_SECRET), client "
                   "certificates (--tls-client-ca), or --insecure\n";
      return 1;
    }
  }
  limiter::SteadyClock clock;
  // After the key-id seed: records are kept by key id.
  limiter::Result<std::unique_ptr<limiter::DurableStore>> durable =
      limiter::OpenDurableStore(*policy_set, clock, config.durable);
  if (!durable) {
    std::cerr << "limiterd: " << durable.error() << '\n';
    return 1;
  }
  limiter::Node node(*policy_set, clock, config.node, std::move(durable).value());
  std::unique_ptr<limiter::SecretWatcher> watcher;
  if (!secret->file.empty()) {
    watcher = std::make_unique<limiter::SecretWatcher>(
        node, secret->file, secret->secrets, std::chrono::milliseconds(config.secret_reload_ms));
  }
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
  // Before the server's workers go: replies waiting for a commit are posted to them.
  if (node.durable() != nullptr) node.durable()->Flush();
  std::fprintf(stderr, "limiterd: stopped\n");
  return 0;
}
