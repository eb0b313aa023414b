// RequestResolver: a gateway request against the policy file, once (ResolvedRequest: its
// policy, cost, lease or strict, identity), and the decisions the gateway hands back for
// it: a bad request, one that can never be admitted, or the owner's answer. Immutable after
// construction; any thread.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>

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
  // filled in part even then: Denied names the policy it found.
  Status Resolve(const client::Request& req, ResolvedRequest& r) const;

  client::Decision Denied(const ResolvedRequest& r, std::string error) const;
  // Costs more than some limit of its chain can ever hold.
  client::Decision Never(const ResolvedRequest& r) const;
  client::Decision FromAnswer(const ResolvedRequest& r, const OpAnswer& a) const;

 private:
  const PolicySet& policies_;
  std::unordered_map<std::string_view, int> policy_index_;
};

}  // namespace limiter
