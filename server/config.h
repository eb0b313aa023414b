// limiterd's configuration file (YAML). Flags on the command line override it.
//
//   name: node-1                 # shown in hello replies and metrics
//   listen: 127.0.0.1:7450       # port 0: any free port
//   admin: 127.0.0.1:7451        # /metrics /healthz /readyz; "" turns it off
//   policies: policies.yaml      # relative to this file
//   threads: 2                   # default: one per core
//   max_keys: 10000000
//   idle_timeout: 60s            # close connections silent this long
//   frame_timeout: 10s           # a frame begun must be whole this soon, or the connection
//                                # closes (a peer trickling bytes cannot hold it open)
//   max_connections: 10000       # over all workers; beyond it a new connection is closed
//                                # as soon as accepted
//   max_frame: 1048576           # bytes
//   members: [10.0.0.1:7450, 10.0.0.2:7450]   # the cluster; default: standalone
//   generation: 3                # of that list: raise it with every change (default 0)
//   members_dns: limiterd.ns.svc:7450         # or: one name, re-resolved every 5 s (its
//                                # generation is the time of the answer)
//   self: 10.0.0.1:7450          # this node among the members
//   secret_file: /run/secrets/limiter   # the gateway secret: one line, or two (current, next)
//   peer_secret_file: /run/secrets/peer # the peer secret, which only nodes hold (needed by a
//                                # node of a cluster that has a gateway secret); re-read too
//   key_seed_file: /run/secrets/key-seed  # the key-id seed: one value that never rotates
//   secret_reload: 5s            # how often the secret files are re-read (rotation)
//   insecure: false              # true: serve beyond loopback without a secret
//   auth_timeout: 2s             # the TLS handshake and the hello's proof within this
//   max_preauth_connections: 2500  # not yet authenticated, over the node (default: a
//                                # quarter of max_connections)
//   max_preauth_per_source: 64   # not yet authenticated, per source address (IPv6: per /64)
//   max_tls_handshakes_per_source: 16
//   reply_budget: 268435456      # bytes of replies buffered over all connections
//   max_ops_per_frame: 8192      # more in one frame: refused, connection closed
//   max_reply_bytes: 8388608     # a reply growing past this: refused, connection closed
//   tls:                         # TLS on the data port (files relative to this file)
//     cert: node.pem             # this node's certificate chain
//     key: node.key              # and its key
//     client_ca: ca.pem          # optional: clients must present a certificate it signed
//     peer_ca: peer-ca.pem       # optional: the CA of node certificates only; a session is
//                                # a peer only with a certificate it signed
//   max_tls_handshakes: 1000     # in progress at once (tens of KiB each); more: closed
//   handoff_deadline: 10s        # leaving (SIGTERM) or joining, keys reach their new owner
//                                # within this, or start fresh there; 0: no hand-off
//   region: us-east              # this node's region: `scope: global` limits are enforced
//                                # as this region's share (README "Regions")
//   regions:                     # the other regions, each by a list or a DNS name
//     - {name: eu-west, members: [10.1.0.1:7450, 10.1.0.2:7450]}
//     - {name: ap-south, members_dns: limiterd.ap.svc:7450}
//   rebalance_interval: 2s       # demand reports and new shares, on the wall clock's ticks
//   region_floor: 0.05           # each region's least share, of L (at least one unit)
//   region_max_keys: 100000      # global keys tracked; beyond, new ones get the floor
//   data_dir: /var/lib/limiterd  # RocksDB database for durable policies' keys (README
//                                # "Durability"); needed when any policy is durable
//   durability: sync             # sync: replies wait for the fsync (group commit);
//                                # interval: synced every sync_interval, replies do not wait
//   sync_interval: 100ms         # interval mode: at most this much of charges is lost
//   hot_keys:                    # see HotKeyOptions in node.h
//     split_above: 10000         # ops/s on this node that split a key (0: never)
//     split_share: 0.25          # or this share of the node's ops (default off)
//     split: 4                   # sub-buckets, a power of two
//     merge_below: 2500          # ops/s, for 3 s, that merge it back
//     valid: 2s                  # how long a client may use a split before renewing
//     sample_every: 4            # count one op in this many
//     sketch: 256                # counters per worker
#pragma once

#include <optional>
#include <string>

#include "limiter/status.h"
#include "protocol/auth.h"
#include "server/durable_store.h"
#include "server/node.h"
#include "server/server.h"

namespace limiter {

// The range of every number and duration in the config file and on limiterd's command line:
// one table, so that a value the file refuses is refused as a flag too (ms for durations).
namespace config_bounds {
struct Bound {
  int64_t min, max;
};
inline constexpr Bound kIdleTimeoutMs{100, 24 * 3'600'000};
inline constexpr Bound kFrameTimeoutMs{100, 600'000};
inline constexpr Bound kAuthTimeoutMs{100, 60'000};
inline constexpr Bound kSecretReloadMs{10, 3'600'000};
inline constexpr Bound kHandoffDeadlineMs{0, 600'000};
inline constexpr Bound kSyncIntervalMs{1, 60'000};
inline constexpr Bound kRebalanceIntervalMs{100, 600'000};
inline constexpr Bound kSplitValidMs{100, 3'600'000};
inline constexpr Bound kThreads{1, 256};
inline constexpr Bound kMaxKeys{1, 10'000'000'000};
inline constexpr Bound kRegionMaxKeys{1, 100'000'000};
inline constexpr Bound kMaxConnections{1, 10'000'000};
inline constexpr Bound kMaxPreauth{1, 10'000'000};
inline constexpr Bound kMaxTlsHandshakes{1, 1'000'000};
inline constexpr Bound kMaxOpsPerFrame{1, 1'000'000};
inline constexpr Bound kMaxFrameBytes{1024, 64 << 20};
inline constexpr Bound kMaxReplyBytes{4096, 1 << 30};
inline constexpr Bound kReplyBudgetBytes{1 << 20, int64_t{64} << 30};
inline constexpr Bound kHotRate{0, 1'000'000'000};  // split_above, merge_below: ops/s
inline constexpr Bound kSampleEvery{1, 1024};
inline constexpr Bound kSketch{1, 65536};
}  // namespace config_bounds

struct NodeConfig {
  NodeOptions node;
  ServerOptions server;
  std::string policies_path;
  DurableOptions durable;
  // The cluster secret's file (re-read every secret_reload_ms), else the environment
  // ($LIMITER_SECRET_FILE, $LIMITER_SECRET). Never a flag holding the secret itself.
  std::string secret_file;
  // The peer secret's file and the key-id seed's (the environment otherwise:
  // $LIMITER_PEER_SECRET_FILE, $LIMITER_KEY_SEED_FILE; protocol/auth.h).
  std::string peer_secret_file;
  std::string key_seed_file;
  int64_t secret_reload_ms = 5000;
  // Without a secret, a node refuses to listen beyond loopback unless this is set.
  bool insecure = false;
};

// Errors name file:line:column and the field, like the policy file's.
Result<NodeConfig> LoadNodeConfig(const std::string& path);

// Ok, or why a node with these secrets (found from `config`'s files or the environment) must
// not start. A peer secret that is also a gateway secret would make every gateway a
// node; and a node of a cluster (members, members_dns or regions) that authenticates its
// gateways (a gateway secret, client certificates) needs a peer credential of its own (a
// peer secret, or tls.peer_ca), or every gateway could change member lists, hand it keys and
// report region demand.
Status CheckCredentials(const NodeConfig& config, const auth::Secrets& gateway,
                        const auth::Secrets& peer);

}  // namespace limiter
