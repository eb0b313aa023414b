// limiterd: the shard node. Wiring only: the flags parsed and merged into the config, the
// start-up checks (server/startup.h), the node, its secret watchers and its server; everything
// else is in the limiter_server library.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/member_list.h"
#include "protocol/auth.h"
#include "server/config.h"
#include "server/node.h"
#include "server/secret_watcher.h"
#include "server/server.h"
#include "server/startup.h"

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

// A CLI11 check that a flag's value lies in a config_bounds range (the config file's too).
CLI::Range InBound(limiter::config_bounds::Bound b) { return CLI::Range(b.min, b.max); }

}  // namespace

int main(int argc, char** argv) {
  using namespace limiter::config_bounds;
  CLI::App app{"limiterd: a shard node of the rate-limiter cluster"};
  std::string config_path, listen, admin, policies, name;
  int threads = 0;
  int64_t max_keys = 0;
  app.add_option("--config", config_path, "Config file (YAML); flags override it");
  app.add_option("--listen", listen, "HOST:PORT for clients (port 0: any free port)");
  app.add_option("--admin", admin, "HOST:PORT for /metrics, /healthz, /readyz");
  app.add_option("--policies", policies, "Policy file (YAML)");
  app.add_option("--threads", threads, "Worker threads (default: one per core)")
      ->check(InBound(kThreads));
  app.add_option("--max-keys", max_keys, "Most keys held at once")->check(InBound(kMaxKeys));
  app.add_option("--name", name, "Node name");
  int64_t max_connections = 0, frame_timeout_ms = 0;
  app.add_option("--max-connections", max_connections,
                 "Most client connections open at once; more are closed as soon as accepted "
                 "(default 10000)")
      ->check(InBound(kMaxConnections));
  app.add_option("--frame-timeout-ms", frame_timeout_ms,
                 "A frame begun must be whole within this, or its connection closes "
                 "(default 10000)")
      ->check(InBound(kFrameTimeoutMs));
  int64_t auth_timeout_ms = 0, max_preauth = 0, max_preauth_per_source = 0, reply_budget = 0;
  app.add_option("--auth-timeout-ms", auth_timeout_ms,
                 "A connection must finish its TLS handshake and prove its credential within "
                 "this, or it is closed (default 2000)")
      ->check(InBound(kAuthTimeoutMs));
  app.add_option("--max-preauth-connections", max_preauth,
                 "Connections not yet authenticated, over the node (default: a quarter of "
                 "--max-connections)")
      ->check(InBound(kMaxPreauth));
  app.add_option("--max-preauth-per-source", max_preauth_per_source,
                 "Connections not yet authenticated, per source address (default 64)")
      ->check(InBound(kMaxPreauth));
  app.add_option("--reply-budget-bytes", reply_budget,
                 "Bytes of replies buffered over all connections; past it reads pause and the "
                 "largest connections that do not read are closed (default 268435456)")
      ->check(InBound(kReplyBudgetBytes));
  std::string members, members_dns, self;
  int64_t generation = -1;
  app.add_option("--members", members,
                 "The cluster: HOST:PORT,HOST:PORT,... (default: standalone)");
  app.add_option("--generation", generation,
                 "Generation of --members: nodes and gateways adopt only a larger one (default 0)")
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
  app.add_option("--members-dns", members_dns, "Or NAME:PORT resolving to every node, re-resolved");
  app.add_option("--self", self, "This node's HOST:PORT among the members");
  int64_t handoff_deadline_ms = -1;
  app.add_option("--handoff-deadline-ms", handoff_deadline_ms,
                 "Hand-off on leave (SIGTERM) and join: how long keys may take to reach their "
                 "new owner, and a joining node waits for them, before they start fresh; 0 "
                 "turns the hand-off off (default 10000)")
      ->check(InBound(kHandoffDeadlineMs));
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
      ->check(InBound(kSyncIntervalMs));
  int64_t hot_split_above = -1;
  int hot_split = 0;
  app.add_option("--hot-split-above", hot_split_above,
                 "Split a key above this many ops/s on this node (0: never; default 10000)")
      ->check(InBound(kHotRate));
  app.add_option("--hot-split", hot_split, "Sub-buckets of a split key: 2, 4, ... 64")
      ->check(CLI::IsMember({2, 4, 8, 16, 32, 64}));
  std::string secret_file;
  int64_t secret_reload_ms = 0;
  bool insecure = false;
  int64_t max_ops_per_frame = 0;
  std::string peer_secret_file, key_seed_file;
  app.add_option("--secret-file", secret_file,
                 "The gateway secret: a file of one line (or two: current and next), re-read "
                 "for rotation; else $LIMITER_SECRET_FILE or $LIMITER_SECRET");
  app.add_option("--peer-secret-file", peer_secret_file,
                 "The peer secret, which only nodes hold: allows member-list changes, "
                 "hand-offs, region reports and admin actions; re-read like --secret-file; else "
                 "$LIMITER_PEER_SECRET_FILE or $LIMITER_PEER_SECRET");
  app.add_option("--key-seed-file", key_seed_file,
                 "The key-id seed: one value, the same on every node, that never rotates; else "
                 "$LIMITER_KEY_SEED_FILE or $LIMITER_KEY_SEED (without one: derived from the "
                 "first gateway secret, which then must not rotate)");
  app.add_option("--secret-reload-ms", secret_reload_ms,
                 "How often the secret files are re-read (default 5000)")
      ->check(InBound(kSecretReloadMs));
  app.add_flag("--insecure", insecure,
               "Serve beyond loopback without a cluster secret (every peer is trusted)");
  app.add_option("--max-ops-per-frame", max_ops_per_frame, "Ops one frame may carry (default 8192)")
      ->check(InBound(kMaxOpsPerFrame));
  limiter::TlsOptions tls;
  app.add_option("--tls-cert", tls.cert_file,
                 "TLS on the data port: this node's certificate chain (PEM)");
  app.add_option("--tls-key", tls.key_file, "The key of --tls-cert (PEM)");
  app.add_option("--tls-client-ca", tls.ca_file,
                 "Mutual TLS: clients must present a certificate this CA signed (PEM)");
  app.add_option("--tls-peer-ca", tls.peer_ca_file,
                 "The CA of node certificates only (PEM): a connection is a peer only with a "
                 "certificate it signed, and nodes verify each other against it");
  int64_t max_tls_handshakes = 0;
  app.add_option("--max-tls-handshakes", max_tls_handshakes,
                 "TLS handshakes in progress at once; more are closed (default 1000)")
      ->check(InBound(kMaxTlsHandshakes));
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
  if (auth_timeout_ms > 0) config.server.auth_timeout_ms = auth_timeout_ms;
  if (max_preauth > 0) config.server.max_preauth_connections = max_preauth;
  if (max_preauth_per_source > 0) config.server.max_preauth_per_source = max_preauth_per_source;
  if (reply_budget > 0) config.server.reply_budget_bytes = reply_budget;
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
  if (!secret_file.empty()) config.secret_file = secret_file;
  if (secret_reload_ms > 0) config.secret_reload_ms = secret_reload_ms;
  if (insecure) config.insecure = true;
  if (max_ops_per_frame > 0)
    config.node.max_ops_per_frame = static_cast<uint32_t>(max_ops_per_frame);
  if (!tls.cert_file.empty() || !tls.key_file.empty() || !tls.ca_file.empty() ||
      !tls.peer_ca_file.empty()) {
    config.server.tls = tls;  // the flags replace the file's tls: whole
  }
  if (max_tls_handshakes > 0) config.server.max_tls_handshakes = max_tls_handshakes;
  if (!peer_secret_file.empty()) config.peer_secret_file = peer_secret_file;
  if (!key_seed_file.empty()) config.key_seed_file = key_seed_file;

  limiter::Result<limiter::Startup> startup = limiter::CheckStartup(std::move(config));
  if (!startup) {
    std::cerr << "limiterd: " << startup.error() << '\n';
    return 1;
  }
  for (const std::string& warning : startup->warnings) {
    std::cerr << "limiterd: " << warning << '\n';
  }
  RaiseDescriptorLimit();
  limiter::SteadyClock clock;
  limiter::Result<std::unique_ptr<limiter::DurableStore>> durable =
      limiter::OpenNodeStore(*startup, clock);
  if (!durable) {
    std::cerr << "limiterd: " << durable.error() << '\n';
    return 1;
  }
  const limiter::NodeConfig& ready = startup->config;
  const limiter::PolicySet& policy_set = startup->policies;
  limiter::Node node(policy_set, clock, ready.node, std::move(durable).value());
  using limiter::auth::SecretKind;
  std::unique_ptr<limiter::SecretWatcher> watcher, peer_watcher;
  const limiter::auth::SecretSource& secret = startup->secret;
  const limiter::auth::SecretSource& peer_secret = startup->peer_secret;
  if (!secret.file.empty()) {
    watcher = std::make_unique<limiter::SecretWatcher>(
        node, secret.file, SecretKind::kGateway, secret.secrets,
        std::chrono::milliseconds(ready.secret_reload_ms));
  }
  if (!peer_secret.file.empty()) {
    peer_watcher = std::make_unique<limiter::SecretWatcher>(
        node, peer_secret.file, SecretKind::kPeer, peer_secret.secrets,
        std::chrono::milliseconds(ready.secret_reload_ms));
  }
  limiter::Server server(node, ready.server);
  if (limiter::Status started = server.Start(); !started.ok()) {
    std::cerr << "limiterd: " << started.error() << '\n';
    return 1;
  }
  std::printf("limiterd %s listening on %s admin %s threads %d policies %zu\n",
              ready.node.name.c_str(), server.listen_address().c_str(),
              server.admin_address().empty() ? "-" : server.admin_address().c_str(),
              server.threads(), policy_set.policies().size());
  std::fflush(stdout);
  server.Run();
  // Before the server's workers go: replies waiting for a commit are posted to them.
  if (node.durable() != nullptr) node.durable()->Flush();
  std::fprintf(stderr, "limiterd: stopped\n");
  return 0;
}
