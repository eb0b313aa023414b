#include "client/ctl/ctl.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <ostream>

#include "client/ctl/commands.h"

namespace limiter::ctl {

int Run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"limiterctl: admin tool for the rate-limiter cluster"};
  app.require_subcommand(1);
  // The access options below may come before or after the subcommand.
  app.fallthrough();
  std::string secret_file;
  app.add_option("--secret-file", secret_file,
                 "The cluster secret's file (else $LIMITER_SECRET_FILE or $LIMITER_SECRET)");
  TlsOptions tls;
  app.add_option("--tls-ca", tls.ca_file, "TLS to the nodes: the CA file that signed them");
  app.add_option("--tls-cert", tls.cert_file, "TLS: this client's certificate (mutual TLS)");
  app.add_option("--tls-key", tls.key_file, "TLS: the key of --tls-cert");

  ReplayArgs replay;
  CLI::App* replay_cmd = app.add_subcommand(
      "replay", "What-if: replay a recorded trace (CSV t_ms,key,cost,label) through a limit");
  replay_cmd->add_option("--trace", replay.trace, "Trace file")->required();
  replay_cmd->add_option("--algorithm", replay.algorithm,
                         "fixed_window, sliding_log, sliding_window, token_bucket, gcra, "
                         "leaky_bucket, or all (default: the policy's)");
  replay_cmd->add_option("--limit", replay.limit, "L: cost units per window");
  replay_cmd->add_option("--window", replay.window, "W: window in ms, or a duration like 1s");
  replay_cmd->add_option("--burst", replay.burst, "B: bucket capacity (default L)");
  replay_cmd->add_option("--policy-file", replay.policy_file, "Policy file (YAML)");
  replay_cmd->add_option("--policy", replay.policy, "Policy name in --policy-file");
  replay_cmd->add_flag("--json", replay.json, "One JSON object per algorithm, one per line");

  CheckArgs check;
  CLI::App* check_cmd =
      app.add_subcommand("check", "Send CHECKs for one key to a node and count the answers");
  auto* server = check_cmd->add_option("--server", check.server, "HOST:PORT of one limiterd node");
  auto* cluster = check_cmd->add_option(
      "--cluster", check.cluster, "HOST:PORT,HOST:PORT,...: decide through the client library");
  server->excludes(cluster);
  check_cmd->add_option("--policy-file", check.policy_file,
                        "With --cluster: the policy file the nodes load");
  check_cmd->add_option("--rate", check.rate, "With --cluster: decisions per second in all");
  check_cmd->add_option("--gateways", check.gateways,
                        "With --cluster: gateway count N (contract fallback at L/N)");
  check_cmd->add_option("--deadline-ms", check.deadline_ms,
                        "With --cluster: how long a decision may wait for its node (default 2)");
  check_cmd->add_option("--policy", check.policy, "Policy name")->required();
  check_cmd->add_option("--key", check.key, "Key")->required();
  check_cmd->add_option("--tenant", check.tenant, "Tenant (for policies with a parent)");
  auto* cost = check_cmd->add_option("--cost", check.cost, "Cost of each check (default 1)");
  check_cmd->add_option("--op", check.op, "Operation name: the policy's cost for it")
      ->excludes(cost);
  check_cmd->add_option("-n", check.count, "Number of checks (default 1)");
  check_cmd->add_option("--concurrency", check.concurrency, "Connections (default 1)");
  check_cmd->add_flag("--dry-run", check.dry_run, "Evaluate without charging (shadow mode)");
  check_cmd->add_flag("--json", check.json, "Print {\"allowed\", \"denied\", \"errors\"}");

  InspectArgs inspect;
  CLI::App* inspect_cmd =
      app.add_subcommand("inspect", "Show one key's state on its owner (and its sub-buckets)");
  auto* inspect_server =
      inspect_cmd->add_option("--server", inspect.server, "HOST:PORT of one limiterd node");
  inspect_cmd->add_option("--cluster", inspect.cluster, "HOST:PORT,...: ask the key's owner")
      ->excludes(inspect_server);
  inspect_cmd->add_option("--policy", inspect.policy, "Policy name")->required();
  inspect_cmd->add_option("--tenant", inspect.tenant,
                          "The key's tenant, for a policy that nests under one (--cluster "
                          "routes by it)");
  inspect_cmd->add_option("key", inspect.key, "Key")->required();
  inspect_cmd->add_flag("--json", inspect.json, "JSON output");

  StatsArgs stats;
  CLI::App* stats_cmd = app.add_subcommand("stats", "Show node counters");
  auto* stats_server =
      stats_cmd->add_option("--server", stats.server, "HOST:PORT of one limiterd node");
  stats_cmd->add_option("--cluster", stats.cluster, "HOST:PORT,...: a table of every node")
      ->excludes(stats_server);
  stats_cmd
      ->add_option("--interval", stats.interval_s,
                   "With --cluster: seconds over which ops/s are measured (default 1)")
      ->check(CLI::Range(0.05, 60.0));
  stats_cmd->add_flag("--json", stats.json, "JSON output");

  HotKeysArgs hot;
  CLI::App* hot_cmd =
      app.add_subcommand("hotkeys", "The hottest keys over the cluster, refreshed in place");
  hot_cmd->add_option("--cluster", hot.cluster, "HOST:PORT,HOST:PORT,...")->required();
  hot_cmd->add_flag("--once", hot.once, "Print once and exit");
  hot_cmd->add_option("--count", hot.count, "Refresh this many times, then exit");
  hot_cmd->add_option("--interval", hot.interval_s, "Seconds between refreshes (default 1)")
      ->check(CLI::Range(0.05, 3600.0));
  hot_cmd->add_option("--top", hot.top, "Rows (default 20)");
  hot_cmd->add_flag("--json", hot.json, "One JSON object per refresh");

  RingArgs ring;
  CLI::App* ring_cmd = app.add_subcommand(
      "ring", "The nodes, their slots and share of the key space, and the ring each node has");
  ring_cmd->add_option("--cluster", ring.cluster, "HOST:PORT,HOST:PORT,...")->required();
  ring_cmd->add_flag("--json", ring.json, "JSON output");

  RegionsArgs regions;
  CLI::App* regions_cmd = app.add_subcommand(
      "regions", "Each region's share of a global key, its demand, and the links between regions");
  regions_cmd->add_option("--cluster", regions.cluster, "HOST:PORT,...: this region's nodes")
      ->required();
  auto* regions_policy = regions_cmd->add_option("--policy", regions.policy, "A global policy");
  regions_cmd->add_option("--key", regions.key, "Its key (with --policy)")->needs(regions_policy);
  regions_cmd->add_option("--tenant", regions.tenant, "The key's tenant, if it nests under one");
  regions_cmd->add_flag("--json", regions.json, "JSON output (README: \"Regions\")");

  AdminArgs admin;
  CLI::App* token_cmd = app.add_subcommand(
      "admin-token", "Print the admin port's bearer token, made from the peer secret");
  token_cmd->add_option("--peer-secret-file", admin.peer_secret_file,
                        "The peer secret's file (else $LIMITER_PEER_SECRET_FILE or "
                        "$LIMITER_PEER_SECRET)");
  CLI::App* drain_cmd = app.add_subcommand(
      "drain", "Make a node leave its cluster (POST /drain on its admin port, with the token)");
  drain_cmd->add_option("--admin", admin.admin, "HOST:PORT of the node's admin port")->required();
  drain_cmd->add_option("--peer-secret-file", admin.peer_secret_file,
                        "The peer secret's file (else $LIMITER_PEER_SECRET_FILE or "
                        "$LIMITER_PEER_SECRET)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, out, err);
  }
  if (token_cmd->parsed()) return RunAdminToken(admin, out, err);
  if (drain_cmd->parsed()) return RunDrain(admin, out, err);
  Result<NodeAccess> access = LoadNodeAccess(secret_file, tls);
  if (!access) {
    err << "limiterctl: " << access.error() << '\n';
    return 2;
  }
  check.access = inspect.access = stats.access = hot.access = ring.access = regions.access =
      *access;
  check.secret_file = secret_file;
  check.tls = tls;
  if (replay_cmd->parsed()) return RunReplay(replay, out, err);
  if (check_cmd->parsed()) return RunCheck(check, out, err);
  if (inspect_cmd->parsed()) {
    if (!inspect.cluster.empty()) return RunClusterInspect(inspect, out, err);
    if (inspect.server.empty()) {
      err << "limiterctl inspect: give --server HOST:PORT or --cluster HOST:PORT,...\n";
      return 2;
    }
    return RunInspect(inspect, out, err);
  }
  if (stats_cmd->parsed()) {
    if (!stats.cluster.empty()) return RunClusterStats(stats, out, err);
    if (stats.server.empty()) {
      err << "limiterctl stats: give --server HOST:PORT or --cluster HOST:PORT,...\n";
      return 2;
    }
    return RunStats(stats, out, err);
  }
  if (hot_cmd->parsed()) {
    hot.clear_screen = !hot.once && !hot.json && &out == &std::cout && ::isatty(STDOUT_FILENO);
    return RunHotKeys(hot, out, err);
  }
  if (ring_cmd->parsed()) return RunRing(ring, out, err);
  if (regions_cmd->parsed()) return RunRegions(regions, out, err);
  return 2;
}

}  // namespace limiter::ctl
