// limiter-bench: load generator for limiterd. Flag parsing only; the harness is
// limiter_bench_lib (bench/node_bench.h).
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>

#include "bench/cluster_bench.h"
#include "bench/durable_bench.h"
#include "bench/fleet_sim.h"
#include "bench/hiccups.h"
#include "bench/hot_key_bench.h"
#include "bench/node_bench.h"
#include "bench/regions_bench.h"
#include "common/member_list.h"
#include "protocol/node_access.h"

int main(int argc, char** argv) {
  // A peer that goes away is an error reply from send(), not a signal.
  std::signal(SIGPIPE, SIG_IGN);

  CLI::App app{"limiter-bench: load generator for limiterd"};
  app.require_subcommand(1);
  // The access options (--secret-file, --tls-*) may come before or after the subcommand.
  app.fallthrough();
  limiter::bench::NodeBenchOptions o;
  o.policies = LIMITER_BENCH_POLICIES;
  bool start_node = false;

  CLI::App* node = app.add_subcommand(
      "node", "Drive one limiterd node with CHECK ops: checks/s, latency, memory per key");
  CLI::Option* server =
      node->add_option("--server", o.server, "HOST:PORT of the node (default: start one)");
  node->add_flag("--start-node", start_node,
                 "Start a local limiterd (what happens anyway without --server)")
      ->excludes(server);
  node->add_option("--limiterd", o.limiterd,
                   "limiterd binary for the local node (default: ../server/limiterd next to "
                   "this binary's directory)");
  node->add_option("--policies", o.policies,
                   "Policy file for the local node; the redis bucket uses the same numbers")
      ->capture_default_str();
  node->add_option("--node-threads", o.node_threads, "--threads of the local node")
      ->check(CLI::Range(1, 256));
  node->add_option("--policy", o.policy, "Policy the checks name")->capture_default_str();
  node->add_option("--connections", o.connections, "Connections")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  node->add_option("--depth", o.shape.depth, "Frames in flight per connection (closed loop)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  node->add_option("--batch", o.shape.batch, "CHECK ops per frame")
      ->capture_default_str()
      ->check(CLI::Range(1, 8192));
  node->add_option("--keys", o.shape.keys, "Keys, drawn uniformly")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  node->add_option("--duration", o.shape.duration_s, "Seconds of load")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0));
  node->add_option("--rate", o.shape.rate,
                   "Checks/s over all connections, open loop (default: closed loop)")
      ->check(CLI::Range(1.0, 1e9));
  node->add_option("--seed", o.shape.seed, "Seed of the key draws")->capture_default_str();
  node->add_flag("--vs-redis", o.vs_redis,
                 "Run the same load against a local redis-server Lua token bucket too");
  node->add_option("--redis-server", o.redis_server, "redis-server binary")->capture_default_str();
  node->add_flag("--json", o.json,
                 "One JSON object instead of the text report (one a line per run)");
  o.durable_policies = LIMITER_DURABLE_POLICIES;
  std::string durable_list = "off";
  node->add_option("--durable", durable_list,
                   "off (memory only), sync or interval: a local node with a temporary data "
                   "dir, driving --durable-policy; several comma-separated (off,sync,interval) "
                   "run in turn, each on a fresh node, and are compared")
      ->capture_default_str();
  node->add_option("--sync-interval-ms", o.sync_interval_ms,
                   "Durable runs: the node's --sync-interval-ms (default: the node's, 100)")
      ->check(CLI::Range(int64_t{1}, int64_t{60'000}));
  node->add_option("--durable-policies", o.durable_policies,
                   "Durable runs: the node's policy file (a durable policy makes a node without "
                   "a data dir refuse to start, so it is not --policies)")
      ->capture_default_str();
  node->add_option("--durable-policy", o.durable_policy, "Durable runs: the policy the checks name")
      ->capture_default_str();
  node->add_option("--data-parent", o.data_parent,
                   "Durable runs: where the temporary data dir goes (default $TMPDIR or /tmp)");

  limiter::bench::DurableRestartOptions d;
  d.policies = LIMITER_DURABLE_POLICIES;
  std::string restart_mode = "sync";
  CLI::App* restart = app.add_subcommand(
      "durable-restart",
      "Write N durable keys into a node, stop it, start it on the same data dir: start-up "
      "time, first read-through, disk bytes per key, and a verified sample of the keys");
  restart->add_option("--keys", d.keys, "Durable keys written, one check each")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{2}, uint64_t{1} << 32));
  restart
      ->add_option("--durable", restart_mode,
                   "The node's durability while writing: sync or interval")
      ->capture_default_str()
      ->check(CLI::IsMember({"sync", "interval"}));
  restart
      ->add_option("--sync-interval-ms", d.sync_interval_ms,
                   "The node's --sync-interval-ms (default: the node's, 100)")
      ->check(CLI::Range(int64_t{1}, int64_t{60'000}));
  restart->add_option("--batch", d.batch, "Checks a frame while writing")
      ->capture_default_str()
      ->check(CLI::Range(1, 8192));
  restart->add_option("--depth", d.depth, "Frames in flight while writing")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  restart
      ->add_option("--sample", d.sample,
                   "Written keys verified after the restart (and as many never written)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1'000'000));
  restart->add_option("--seed", d.seed, "Seed of the sample's draws")->capture_default_str();
  bool no_compact = false;
  restart->add_flag("--no-compact", no_compact,
                    "Skip the full compaction (done in this process on the stopped node's dir)");
  restart->add_option("--limiterd", d.limiterd, "limiterd binary (default: next to this one)");
  restart->add_option("--policies", d.policies, "The node's policy file")->capture_default_str();
  restart->add_option("--policy", d.policy, "The durable policy the keys are checked on")
      ->capture_default_str();
  restart->add_option("--data-parent", d.data_parent,
                      "Where the temporary data dir goes (default $TMPDIR or /tmp)");
  restart->add_flag("--json", d.json, "One JSON object instead of the text report");

  limiter::bench::HotKeyBenchOptions h;
  h.policies = LIMITER_BENCH_POLICIES;
  CLI::App* hot = app.add_subcommand(
      "hotkey",
      "One hot key on a local cluster: checks/s and each node's share, unsplit and split");
  hot->add_option("--limiterd", h.limiterd, "limiterd binary (default: next to this one)");
  hot->add_option("--policies", h.policies, "The nodes' policy file")->capture_default_str();
  hot->add_option("--policy", h.policy, "Policy the checks name")->capture_default_str();
  hot->add_option("--nodes", h.nodes, "Local nodes")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  hot->add_option("--node-threads", h.node_threads, "--threads of each node")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  hot->add_option("--connections", h.connections, "Load threads, each connected to every node")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  hot->add_option("--batch", h.batch, "Checks per frame")
      ->capture_default_str()
      ->check(CLI::Range(1, 8192));
  hot->add_option("--depth", h.depth, "Frames in flight per node per load thread")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  hot->add_option("--keys", h.keys, "Keys: the hot one and the others")
      ->capture_default_str()
      ->check(CLI::Range(2, 1000000));
  hot->add_option("--hot-ratio", h.hot_ratio, "The hot key's rate over each other key's")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1e6));
  hot->add_option("--duration", h.duration_s, "Seconds measured in each run")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  hot->add_option("--split", h.split_k, "Sub-buckets of the split key")
      ->capture_default_str()
      ->check(CLI::IsMember({2, 4, 8, 16, 32, 64}));
  hot->add_option("--split-above", h.split_above, "Ops/s of one key on a node that split it")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  hot->add_flag("--pin", h.pin, "Run node i on CPU i modulo the CPU count (taskset)");
  hot->add_option("--node-cpu", h.node_cpu,
                  "Limit each node to this many CPUs (a cgroup v1 CPU quota; needs root)")
      ->check(CLI::Range(0.01, 64.0));
  hot->add_option("--seed", h.seed, "Seed of the key draws")->capture_default_str();
  hot->add_flag("--json", h.json, "One JSON object instead of the table");

  limiter::bench::ClusterBenchOptions c;
  c.policies = LIMITER_CLUSTER_POLICIES;
  std::string cluster_list;
  CLI::App* cluster = app.add_subcommand(
      "cluster", "The 50k or 500k requests/s scenario end to end through the gateway library");
  cluster->add_option("--scenario", c.scenario, "50k or 500k")
      ->capture_default_str()
      ->check(CLI::IsMember({"50k", "500k"}));
  cluster->add_option("--duration", c.duration_s, "Seconds of arrivals")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 3600.0));
  cluster->add_option("--warmup", c.warmup_s, "Seconds of arrivals before the measurement")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 600.0));
  cluster->add_option("--nodes", c.nodes, "Local nodes to start")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cluster->add_option("--node-threads", c.node_threads, "--threads of each local node")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cluster->add_option("--gateways", c.gateways, "Gateways (default: the scenario's, 40 or 100)")
      ->check(CLI::Range(1, 10000));
  cluster->add_option("--rate", c.rate, "Requests/s (default: the scenario's)")
      ->check(CLI::Range(1.0, 1e8));
  cluster->add_option("--loops", c.loops, "Event-loop threads the gateways are spread over")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cluster->add_option("--deadline-us", c.deadline_us, "Each gateway's store-call deadline")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{60'000'000}));
  cluster->add_option("--cluster", cluster_list, "HOST:PORT,... of running nodes instead");
  cluster->add_option("--limiterd", c.limiterd, "limiterd binary (default: next to this one)");
  cluster->add_option("--policies", c.policies, "Policy file of nodes and gateways")
      ->capture_default_str();
  cluster
      ->add_option("--spread", c.spread,
                   "How requests reach gateways: even (round robin), random, or sticky (each key "
                   "from one gateway)")
      ->capture_default_str();
  cluster->add_option("--json", c.json_file, "Also write the report as JSON to this file");
  cluster->add_option("--report", c.report_dir,
                      "Also write report.md, per_second.tsv and chart.png (gnuplot) here");
  cluster->add_flag("--vs-redis", c.vs_redis,
                    "Then the same arrivals against redis-server, one EVALSHA per request");
  cluster->add_option("--redis-server", c.redis_server, "redis-server binary")
      ->capture_default_str();
  cluster->add_option("--seed", c.seed, "Seed of the arrivals")->capture_default_str();
  std::string part;
  cluster->add_option("--part", part,
                      "I/N: run gateways I, I+N, ... of the scenario against --cluster and write "
                      "a partial report (--json) for limiter-bench merge");
  cluster->add_flag("--find-max", c.find_max,
                    "Step the rate up by 25% from --rate (default 10000) until p99 > 1 ms or "
                    "under 99.9% achieved; report the highest that passed");

  limiter::bench::MergeOptions m;
  m.policies = LIMITER_CLUSTER_POLICIES;
  CLI::App* merge = app.add_subcommand(
      "merge", "Merge the partial reports of a cluster run split with --part into one report");
  merge->add_option("parts", m.parts, "Partial reports (JSON files; their .records beside them)")
      ->required();
  merge->add_option("--policies", m.policies, "The scenario's policy file")->capture_default_str();
  merge->add_option("--json", m.json_file, "Write the merged report as JSON to this file");
  merge->add_option("--report", m.report_dir,
                    "Also write report.md, per_second.tsv and chart.png into this directory");

  limiter::bench::RegionsBenchOptions g;
  limiter::bench::FleetSimOptions sim_o;
  sim_o.policies = LIMITER_CLUSTER_POLICIES;
  CLI::App* sim = app.add_subcommand(
      "sim",
      "The 50k or 500k scenario in simulated time: every gateway and node with the real "
      "code, modelled network and node queues, faults; deterministic");
  sim->add_option("--scenario", sim_o.scenario, "50k or 500k")
      ->capture_default_str()
      ->check(CLI::IsMember({"50k", "500k"}));
  sim->add_option("--gateways", sim_o.gateways, "Gateways (default: the scenario's, 40 or 100)")
      ->check(CLI::Range(1, 65535));
  sim->add_option("--nodes", sim_o.nodes, "Nodes (default: the scenario's, 3 or 4)")
      ->check(CLI::Range(1, 1024));
  sim->add_option("--rate", sim_o.rate, "Requests/s (default: the scenario's)")
      ->check(CLI::Range(1.0, 1e8));
  sim->add_option("--duration", sim_o.duration_s, "Simulated seconds measured")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 3600.0));
  sim->add_option("--warmup", sim_o.warmup_s, "Simulated seconds before the measurement")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  sim->add_option("--seed", sim_o.seed, "Seed of every random draw")->capture_default_str();
  sim->add_option("--faults", sim_o.faults,
                  "Fault schedule, e.g. \"kill node 1 at 4s, restart at 7s; hot tenant at 2s\" "
                  "(sim/faults.h)");
  sim->add_option("--policies", sim_o.policies, "Policy file of nodes and gateways")
      ->capture_default_str();
  sim->add_option("--deadline-us", sim_o.deadline_us, "Each gateway's store-call deadline")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{10'000'000}));
  sim->add_option("--spread", sim_o.spread, "How requests reach gateways: even, random, sticky")
      ->capture_default_str();
  sim->add_option("--delay-median-us", sim_o.model.one_way_median_us,
                  "Median one-way network delay (a round trip is two)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1e6));
  sim->add_option("--delay-sigma", sim_o.model.one_way_sigma,
                  "Log-normal shape of each delay: the tail")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3.0));
  sim->add_option("--node-frame-us", sim_o.model.frame_us,
                  "A node's service time per frame (from limiter-bench node --batch 1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  sim->add_option("--node-op-us", sim_o.model.op_us,
                  "A node's service time per op (from limiter-bench node --batch 64)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  sim->add_option("--node-threads", sim_o.model.threads, "Workers per node")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  sim->add_option("--json", sim_o.json_file, "Also write the report as JSON to this file");
  sim->add_option("--report", sim_o.report_dir,
                  "Also write report.md, per_second.tsv and chart.png into this directory");
  sim->add_flag("--quiet", sim_o.quiet, "No progress line per simulated second");

  CLI::App* regions = app.add_subcommand(
      "regions", "Regions sharing one global limit through delay proxies; demand that moves");
  regions->add_option("--regions", g.regions, "Regions, one local node each")
      ->capture_default_str()
      ->check(CLI::Range(2, 8));
  regions->add_option("--delay-ms", g.delay_ms, "Between any two regions, each way")
      ->capture_default_str()
      ->check(CLI::Range(0, 2000));
  regions->add_option("--limit", g.limit, "The global limit, per second")->capture_default_str();
  regions->add_option("--burst", g.burst, "Its burst")->capture_default_str();
  regions->add_option("--hot", g.hot, "Requests/s of the hot region")->capture_default_str();
  regions->add_option("--warm", g.warm, "Of the next one")->capture_default_str();
  regions->add_option("--cold", g.cold, "Of the others")->capture_default_str();
  regions->add_option("--phase", g.phase_s, "Seconds before the hot region moves on")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 3600.0));
  regions->add_option("--phases", g.phases, "Phases")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  regions->add_option("--interval-ms", g.interval_ms, "The nodes' rebalance_interval")
      ->capture_default_str()
      ->check(CLI::Range(100, 60000));
  regions->add_option("--limiterd", g.limiterd, "limiterd binary (default: next to this one)");
  regions->add_option("--json", g.json_file, "Also write the report as JSON to this file");

  limiter::bench::HiccupOptions hiccup_o;
  CLI::App* hiccups = app.add_subcommand(
      "hiccups", "The machine alone: how late a thread on each CPU wakes against its schedule");
  hiccups->add_option("--duration", hiccup_o.duration_s, "Seconds")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 86400.0));
  hiccups->add_option("--period-us", hiccup_o.period_us, "A wake-up every this many us")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{10}, int64_t{1'000'000}));
  hiccups->add_option("--stall-us", hiccup_o.stall_us, "Count wake-ups at least this late")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{60'000'000}));

  std::string secret_file, peer_secret_file;
  app.add_option("--secret-file", secret_file,
                 "The gateway secret's file (else $LIMITER_SECRET_FILE or $LIMITER_SECRET); "
                 "local nodes and gateways get it too");
  app.add_option("--peer-secret-file", peer_secret_file,
                 "The peer secret's file for the local nodes it starts (else "
                 "$LIMITER_PEER_SECRET_FILE or $LIMITER_PEER_SECRET; without one, and with a "
                 "gateway secret, its local nodes get a random peer secret of their own)");
  limiter::TlsOptions tls;
  app.add_option("--tls-ca", tls.ca_file, "TLS to the nodes (given by --server): their CA file");
  app.add_option("--tls-cert", tls.cert_file, "TLS: this client's certificate (mutual TLS)");
  app.add_option("--tls-key", tls.key_file, "TLS: the key of --tls-cert");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "limiter-bench: " << e.what() << " (see limiter-bench --help)\n";
    return 2;
  }
  // The machine alone: no node, no secret.
  if (hiccups->parsed()) return limiter::bench::RunHiccups(hiccup_o, std::cout, std::cerr);
  // Through the environment: the nodes it starts and the client library read it there.
  if (!secret_file.empty()) ::setenv("LIMITER_SECRET_FILE", secret_file.c_str(), 1);
  if (!peer_secret_file.empty()) ::setenv("LIMITER_PEER_SECRET_FILE", peer_secret_file.c_str(), 1);
  limiter::bench::GivePeerSecretToLocalNodes();
  limiter::Result<limiter::NodeAccess> access = limiter::LoadNodeAccess("", tls);
  if (!access) {
    std::cerr << "limiter-bench: " << access.error() << '\n';
    return 2;
  }
  o.access = h.access = c.access = g.access = d.access = *access;
  if (restart->parsed()) {
    d.mode = *limiter::ParseDurabilityMode(restart_mode);
    d.compact = !no_compact;
    return limiter::bench::RunDurableRestart(d, std::cout, std::cerr);
  }
  if (sim->parsed()) return limiter::bench::RunFleetSim(sim_o, std::cout, std::cerr);
  if (regions->parsed()) return limiter::bench::RunRegionsBench(g, std::cout, std::cerr);
  if (merge->parsed()) return limiter::bench::RunMerge(m, std::cout, std::cerr);
  if (cluster->parsed()) {
    if (!part.empty()) {
      const auto parsed = limiter::bench::ParsePart(part);
      if (!parsed) {
        std::cerr << "limiter-bench: --part: want I/N with 0 <= I < N, got '" << part << "'\n";
        return 2;
      }
      c.part = parsed->first;
      c.parts = parsed->second;
    }
    if (!cluster_list.empty()) {
      limiter::Result<std::vector<std::string>> list = limiter::ParseMemberList(cluster_list);
      if (!list) {
        std::cerr << "limiter-bench: --cluster: " << list.error() << '\n';
        return 2;
      }
      c.cluster = std::move(list).value();
    }
    return limiter::bench::RunClusterBench(c, std::cout, std::cerr);
  }
  if (hot->parsed()) return limiter::bench::RunHotKeyBench(h, std::cout, std::cerr);
  limiter::Result<std::vector<limiter::bench::NodeDurability>> durability =
      limiter::bench::ParseDurabilityList(durable_list);
  if (!durability) {
    std::cerr << "limiter-bench: --durable: " << durability.error() << '\n';
    return 2;
  }
  o.durability = std::move(durability).value();
  return limiter::bench::RunNodeBench(o, std::cout, std::cerr);
}
