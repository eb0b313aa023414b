// The limiterctl commands, behind the command-line parsing in ctl.cc.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include "protocol/node_access.h"

namespace limiter::ctl {

struct ReplayArgs {
  std::string trace;
  std::string algorithm;  // a name, "all", or empty to take the policy's
  std::optional<int64_t> limit;
  std::optional<std::string> window;  // ms, or a duration such as 1s
  std::optional<int64_t> burst;
  std::string policy_file;
  std::string policy;
  bool json = false;
};
int RunReplay(const ReplayArgs& args, std::ostream& out, std::ostream& err);

struct CheckArgs {
  std::string server;       // host:port of one node: CHECKs straight to it
  std::string cluster;      // or the members: decisions through the client library
  std::string policy_file;  // with --cluster: the policy file the nodes load
  double rate = 0;          // with --cluster: decisions per second in all (0: as fast as it can)
  int gateways = 1;         // with --cluster: N for contract fallback
  double deadline_ms = 2;   // with --cluster: the decision deadline (client::Options::deadline)
  std::string policy;
  std::string key;
  std::string tenant;
  int64_t cost = 1;
  std::string op;  // operation name: the policy's cost for it
  int64_t count = 1;
  int concurrency = 1;
  bool dry_run = false;
  bool json = false;
  NodeAccess access;        // the cluster secret and TLS (--secret-file, --tls-*, the environment)
  std::string secret_file;  // --secret-file, for the client library (--cluster)
  TlsOptions tls;           // --tls-*, for the client library (--cluster)
};
int RunCheck(const CheckArgs& args, std::ostream& out, std::ostream& err);
int RunClusterCheck(const CheckArgs& args, std::ostream& out, std::ostream& err);

struct InspectArgs {
  std::string server;   // one node
  std::string cluster;  // or the members: the key's owner, and its sub-buckets if split
  std::string policy;
  std::string key;
  std::string tenant;  // with --cluster: route by the tenant (policies with a parent)
  bool json = false;
  NodeAccess access;  // the cluster secret and TLS (--secret-file, --tls-*, the environment)
};
int RunInspect(const InspectArgs& args, std::ostream& out, std::ostream& err);
int RunClusterInspect(const InspectArgs& args, std::ostream& out, std::ostream& err);

struct StatsArgs {
  std::string server;   // one node
  std::string cluster;  // or every member, with ops/s over `interval_s`
  double interval_s = 1;
  bool json = false;
  NodeAccess access;  // the cluster secret and TLS (--secret-file, --tls-*, the environment)
};
int RunStats(const StatsArgs& args, std::ostream& out, std::ostream& err);
int RunClusterStats(const StatsArgs& args, std::ostream& out, std::ostream& err);

struct HotKeysArgs {
  std::string cluster;
  bool once = false;
  int64_t count = 0;  // refreshes before stopping; 0: until interrupted
  double interval_s = 1;
  size_t top = 20;
  bool clear_screen = false;  // refresh in place (set when stdout is a terminal)
  bool json = false;
  NodeAccess access;  // the cluster secret and TLS (--secret-file, --tls-*, the environment)
};
int RunHotKeys(const HotKeysArgs& args, std::ostream& out, std::ostream& err);

struct RingArgs {
  std::string cluster;
  bool json = false;
  NodeAccess access;  // the cluster secret and TLS (--secret-file, --tls-*, the environment)
};
int RunRing(const RingArgs& args, std::ostream& out, std::ostream& err);

struct RegionsArgs {
  std::string cluster;              // this region's nodes
  std::string policy, key, tenant;  // one global key; none: every node's links
  bool json = false;
  NodeAccess access;  // the cluster secret and TLS (--secret-file, --tls-*, the environment)
};
int RunRegions(const RegionsArgs& args, std::ostream& out, std::ostream& err);

// admin-token: the peer secret's admin token; drain: POST /drain with it to a node's admin
// port (the leave, as SIGTERM starts it).
struct AdminArgs {
  std::string admin;             // drain: HOST:PORT of the node's admin port
  std::string peer_secret_file;  // else $LIMITER_PEER_SECRET_FILE, $LIMITER_PEER_SECRET
};
int RunAdminToken(const AdminArgs& args, std::ostream& out, std::ostream& err);
int RunDrain(const AdminArgs& args, std::ostream& out, std::ostream& err);

}  // namespace limiter::ctl
