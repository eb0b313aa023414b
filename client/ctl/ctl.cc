#include "client/ctl/ctl.h"

#include <CLI/CLI.hpp>

#include <ostream>

#include "client/ctl/commands.h"

namespace limiter::ctl {

int Run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"limiterctl: admin tool for the rate-limiter cluster"};
  app.require_subcommand(1);

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
  check_cmd->add_option("--policy", check.policy, "Policy name")->required();
  check_cmd->add_option("--key", check.key, "Key")->required();
  check_cmd->add_option("--tenant", check.tenant, "Tenant (for policies with a parent)");
  auto* cost = check_cmd->add_option("--cost", check.cost, "Cost of each check (default 1)");
  check_cmd->add_option("--op", check.op, "Operation name: the policy's cost for it")->excludes(cost);
  check_cmd->add_option("-n", check.count, "Number of checks (default 1)");
  check_cmd->add_option("--concurrency", check.concurrency, "Connections (default 1)");
  check_cmd->add_flag("--dry-run", check.dry_run, "Evaluate without charging (shadow mode)");
  check_cmd->add_flag("--json", check.json, "Print {\"allowed\", \"denied\", \"errors\"}");

  InspectArgs inspect;
  CLI::App* inspect_cmd = app.add_subcommand("inspect", "Show one key's state on a node");
  inspect_cmd->add_option("--server", inspect.server, "HOST:PORT of a limiterd node")->required();
  inspect_cmd->add_option("--policy", inspect.policy, "Policy name")->required();
  inspect_cmd->add_option("key", inspect.key, "Key")->required();
  inspect_cmd->add_flag("--json", inspect.json, "JSON output");

  StatsArgs stats;
  CLI::App* stats_cmd = app.add_subcommand("stats", "Show a node's counters");
  stats_cmd->add_option("--server", stats.server, "HOST:PORT of a limiterd node")->required();
  stats_cmd->add_flag("--json", stats.json, "JSON output");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, out, err);
  }
  if (replay_cmd->parsed()) return RunReplay(replay, out, err);
  if (check_cmd->parsed()) return RunCheck(check, out, err);
  if (inspect_cmd->parsed()) return RunInspect(inspect, out, err);
  if (stats_cmd->parsed()) return RunStats(stats, out, err);
  return 2;
}

}  // namespace limiter::ctl
