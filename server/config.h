// limiterd's configuration file (YAML). Flags on the command line override it.
//
//   name: node-1                 # shown in hello replies and metrics
//   listen: 127.0.0.1:7450       # port 0: any free port
//   admin: 127.0.0.1:7451        # /metrics /healthz /readyz; "" turns it off
//   policies: policies.yaml      # relative to this file
//   threads: 2                   # default: one per core
//   max_keys: 10000000
//   idle_timeout: 60s            # close connections silent this long
//   max_frame: 1048576           # bytes
//   members: [10.0.0.1:7450, 10.0.0.2:7450]   # the cluster; default: standalone
//   generation: 3                # of that list: raise it with every change (default 0)
//   members_dns: limiterd.ns.svc:7450         # or: one name, re-resolved every 5 s (its
//                                # generation is the time of the answer)
//   self: 10.0.0.1:7450          # this node among the members
//   hot_keys:                    # see HotKeyOptions in node.h
//     split_above: 10000         # ops/s on this node that split a key (0: never)
//     split_share: 0.25          # or this share of the node's ops (default off)
//     split: 4                   # sub-buckets, a power of two
//     merge_below: 2500          # ops/s, for 3 s, that merge it back
//     valid: 2s                  # how long a client may use a split before renewing
//     sample_every: 4            # count one op in this many
//     sketch: 256                # counters per worker
#pragma once

#include <string>

#include "common/result.h"
#include "server/node.h"
#include "server/server.h"

namespace limiter {

struct NodeConfig {
  NodeOptions node;
  ServerOptions server;
  std::string policies_path;
};

// Errors name file:line:column and the field, like the policy file's.
Result<NodeConfig> LoadNodeConfig(const std::string& path);

}  // namespace limiter
