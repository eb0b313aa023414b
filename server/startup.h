// Start-up: what limiterd checks and works out between its flags and its first frame, as
// library code that tests call. main.cc parses the flags, merges them into the config file's
// NodeConfig, and hands the result here; what comes back is everything it needs to wire the
// node, or the first thing wrong, in words that name it (limiterd prints them after
// "limiterd: ").
//
// Thread-safety: CheckStartup reads files and the environment and is otherwise pure;
// OpenNodeStore sets the process's key-id seed (protocol/key_id.h), so it runs once per
// process, before any key id is made.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/policy.h"
#include "limiter/status.h"
#include "protocol/auth.h"
#include "server/config.h"
#include "server/durable_store.h"

namespace limiter {

struct Startup {
  // The config completed: the secrets found, the peer TLS and the join gate set.
  NodeConfig config;
  PolicySet policies;
  // The gateway and the peer secret, each with the file it came from (watched for rotation
  // when there is one).
  auth::SecretSource secret;
  auth::SecretSource peer_secret;
  // The cluster's key-id seed: from the key-id seed, else from the first gateway secret.
  uint64_t key_id_seed = 0;
  // For stderr; the start goes on.
  std::vector<std::string> warnings;
};

// Checks `config` in this order, and stops at the first that fails: a node of a cluster names
// itself (--self) and is in its member list; there is a policy file, and it loads; the
// policies' key budgets fit max_keys (Store::PlanBudgets); the regions are sound
// (RegionShares::Check); the gateway secret, the peer secret and the key-id seed are found
// (auth::FindSecrets, files then the environment) and go together (CheckCredentials); and a
// node that authenticates no gateway (no gateway secret, no client certificates) listens on
// loopback only, unless config.insecure.
Result<Startup> CheckStartup(NodeConfig config);

// Sets the process's key-id seed to the startup's, then opens the database of its durable
// policies (OpenDurableStore: null when no policy is durable), on `clock`, which must outlive
// it. Records are kept by key id: the seed comes first.
Result<std::unique_ptr<DurableStore>> OpenNodeStore(const Startup& startup, const Clock& clock);

}  // namespace limiter
