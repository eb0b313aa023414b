// `limiter-bench regions`: several regions, each one local limiterd and its gateways (the
// client library), linked to each other through delay proxies (DelayProxy), sharing one
// `scope: global` limit. The demand moves: in each phase one region is hot and the others
// warm and cold, the hot one changing phase by phase. Every second it reports, per region,
// the share the region enforces (asked of its node with a REGIONS op), the demand its
// gateways offered and what they admitted, and the admissions of the whole fleet against L;
// and, over the run, the worst interval across regions against B + L*t/W.
#pragma once

#include <iosfwd>
#include <string>

#include "protocol/node_access.h"

namespace limiter::bench {

struct RegionsBenchOptions {
  NodeAccess access;     // the cluster secret (the environment) and TLS, as for `cluster`
  std::string limiterd;  // empty: DefaultLimiterdPath()
  int regions = 3;       // 2 to 8
  int delay_ms = 30;     // each way, between any two regions
  int64_t limit = 120;   // the global limit, per second
  int64_t burst = 12;
  double hot = 1000, warm = 50, cold = 10;  // requests/s offered by the regions of a phase
  double phase_s = 15;                      // seconds per phase
  int phases = 3;                           // the hot region moves to the next one each phase
  int64_t interval_ms = 2000;               // the nodes' rebalance_interval
  std::string json_file;                    // also write the report as JSON here
};

// Writes the report to `out`, errors to `err`. Returns 0, 1 when a node could not be started,
// or 3 when the fleet went over B + L*t/W.
int RunRegionsBench(const RegionsBenchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace limiter::bench
