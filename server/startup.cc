#include "server/startup.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include "common/policy_file.h"
#include "protocol/key_id.h"
#include "server/region_shares.h"
#include "server/server.h"
#include "server/store.h"

namespace limiter {
namespace {

// Whether `listen` (host:port) is a loopback address: localhost, 127/8 or ::1.
bool OnLoopback(const std::string& listen) {
  const std::optional<HostPort> hp = ParseHostPort(listen);
  if (!hp) return false;
  in_addr v4{};
  in6_addr v6{};
  return hp->host == "localhost" ||
         (::inet_pton(AF_INET, hp->host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127) ||
         (::inet_pton(AF_INET6, hp->host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6));
}

}  // namespace

Result<Startup> CheckStartup(NodeConfig config) {
  const bool in_cluster = !config.node.members.empty() || !config.server.members_dns.empty();
  if (in_cluster && config.node.self.empty()) {
    return Error{"a node in a cluster needs --self HOST:PORT (its own member entry)"};
  }
  if (!config.node.members.empty() &&
      std::find(config.node.members.begin(), config.node.members.end(), config.node.self) ==
          config.node.members.end()) {
    return Error{"--self " + config.node.self + " is not in the member list"};
  }
  if (config.policies_path.empty()) {
    return Error{"no policy file: give --policies FILE or policies: in --config"};
  }
  Startup s;
  {
    Result<PolicySet> loaded = LoadPolicyFile(config.policies_path);
    if (!loaded) return loaded.status();
    s.policies = std::move(loaded).value();
  }
  if (Result<std::vector<KeyBudget>> plan =
          Store::PlanBudgets(s.policies, config.node.store.max_keys);
      !plan) {
    return plan.status();
  }
  if (Status checked = RegionShares::Check(s.policies, config.node.regions); !checked.ok()) {
    return checked;
  }

  using auth::SecretKind;
  Result<auth::SecretSource> secret = auth::FindSecrets(config.secret_file, SecretKind::kGateway);
  if (!secret) return secret.status();
  Result<auth::SecretSource> peer_secret =
      auth::FindSecrets(config.peer_secret_file, SecretKind::kPeer);
  if (!peer_secret) return peer_secret.status();
  Result<auth::SecretSource> key_seed =
      auth::FindSecrets(config.key_seed_file, SecretKind::kKeySeed);
  if (!key_seed) return key_seed.status();
  if (Status s2 = CheckCredentials(config, secret->secrets, peer_secret->secrets); !s2.ok()) {
    return s2;
  }
  config.node.secrets = secret->secrets;
  config.node.peer_secrets = peer_secret->secrets;
  config.node.peer_tls = !config.server.tls.peer_ca_file.empty();

  // Every node of the cluster makes the same key id for a key (key_id.h), so that a node can
  // hand a key's state to another by id and find its durable records after a restart: the
  // seed comes from the key-id seed, a value of its own that never rotates. A node given none
  // derives it from its first gateway secret, as before there was one: rotating that secret
  // then changes the seed at the next restart (docs/features/security.md, rotation), so say so.
  std::string_view seed_value;
  if (!key_seed->secrets.empty()) {
    seed_value = key_seed->secrets.values.front();
  } else if (!secret->secrets.empty()) {
    seed_value = secret->secrets.values.front();
    s.warnings.push_back(
        "no key-id seed (--key-seed-file, key_seed_file:, $LIMITER_KEY_SEED_FILE): it is derived "
        "from the first gateway secret, so rotating that secret will change every key id at "
        "the next restart; put the current first secret into a key-seed file before you rotate");
  }
  s.key_id_seed = auth::KeyIdSeedOf(seed_value);
  config.node.join_gate = in_cluster && config.node.handoff_deadline_ms > 0;

  // Protected mode: a node that authenticates no gateway (no gateway secret, no client
  // certificates) lets every peer spend any key's allowance, so it stays on loopback.
  if (secret->secrets.empty() && config.server.tls.ca_file.empty() && !config.insecure &&
      !OnLoopback(config.server.listen)) {
    return Error{"listening on " + config.server.listen +
                 " without a cluster secret would trust every peer that reaches it; give "
                 "--secret-file (or $LIMITER_SECRET_FILE / $LIMITER_SECRET), client "
                 "certificates (--tls-client-ca), or --insecure"};
  }
  s.secret = std::move(secret).value();
  s.peer_secret = std::move(peer_secret).value();
  s.config = std::move(config);
  return s;
}

Result<std::unique_ptr<DurableStore>> OpenNodeStore(const Startup& startup, const Clock& clock) {
  SetKeyIdSeed(startup.key_id_seed);
  return OpenDurableStore(startup.policies, clock, startup.config.durable);
}

}  // namespace limiter
