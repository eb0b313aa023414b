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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, out, err);
  }
  if (replay_cmd->parsed()) return RunReplay(replay, out, err);
  return 2;
}

}  // namespace limiter::ctl
