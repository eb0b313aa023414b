// RequestResolver: a gateway request against the policy file, once (ResolvedRequest: its
// policy, cost, lease or strict, identity), and the decisions the gateway hands back for
// it: a bad request, one that can never be admitted, or the owner's answer. Immutable after
// construction; any thread.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "client/resolved_request.h"
#include "client/transport.h"
#include "common/policy.h"
#include "limiter/client/client.h"

namespace limiter {

class RequestResolver {
 public:
  // `policies` must outlive the resolver.
  explicit RequestResolver(const PolicySet& policies);

  // Fills `r` (borrowing the request's strings), or says why the request is denied. `r` is
  // filled in part even then: Denied names the policy it found. The key is hashed twice:
  // its ring slot and its identity (a nested policy's tenant makes the slot, then the key
  // the identity).
  Status Resolve(const client::Request& req, ResolvedRequest& r) const;

  client::Decision Denied(const ResolvedRequest& r, std::string error) const;
  // Costs more than some limit of its chain can ever hold.
  client::Decision Never(const ResolvedRequest& r) const;
  client::Decision FromAnswer(const ResolvedRequest& r, const OpAnswer& a) const;

 private:
  // The policy named `name`, or -1. Each thread remembers the last one it found (a gateway's
  // requests mostly name a few policies): one compare instead of a hash lookup.
  int Find(std::string_view name) const;

  // What a request without an operation needs of its policy, worked out once.
  struct Facts {
    uint64_t id_seed = 0;  // its part of its keys' ids (protocol::PolicyIdSeed)
    bool leases = false;   // every limit of its chain leases (PolicySet::LeasesAlike)
    int64_t most = 0;      // the largest cost every limit of its chain can ever admit
  };
  const PolicySet& policies_;
  const uint64_t instance_;  // tells this resolver's names apart in the threads' caches
  std::unordered_map<std::string_view, int> policy_index_;
  std::vector<Facts> facts_;  // per policy
};

}  // namespace limiter
