// A gateway request resolved against the policy file: its policy, its cost to each limit,
// whether it is spent from a lease, its limit's identity and its routing key (the rules are
// protocol.h's). Resolved once per request. A ResolvedRequest borrows the caller's strings
// and costs nothing to make; a request that has to wait for the network is made an
// OwnedRequest, once, which owns copies and is shared by the steps of its decision.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/policy.h"
#include "protocol/key_id.h"
#include "protocol/rules.h"

namespace limiter {

struct ResolvedRequest {
  const Policy* policy = nullptr;
  int index = 0;                     // of the policy in the policy set
  int64_t cost = 1;                  // what the policy itself is charged
  bool lease = false;                // spent from a local bucket (else one CHECK per request)
  bool never = false;                // costs more than some limit of its chain can ever admit
  const Policy* never_by = nullptr;  // that limit
  std::string_view key;
  std::string_view tenant;
  std::string_view operation;
  KeyId id;  // the limit's identity: its local bucket here, its state on the node

  std::string_view routing() const { return protocol::RoutingKey(*policy, key, tenant); }
  // The routing key's ring slot, which the id carries: the limit's owner under any ring.
  uint32_t slot() const { return RingSlotOf(id); }
};

class OwnedRequest {
 public:
  explicit OwnedRequest(const ResolvedRequest& r)
      : key_(r.key), tenant_(r.tenant), operation_(r.operation), r_(r) {
    r_.key = key_;
    r_.tenant = tenant_;
    r_.operation = operation_;
  }
  OwnedRequest(const OwnedRequest&) = delete;
  OwnedRequest& operator=(const OwnedRequest&) = delete;
  const ResolvedRequest& operator*() const { return r_; }
  const ResolvedRequest* operator->() const { return &r_; }

 private:
  const std::string key_, tenant_, operation_;
  ResolvedRequest r_;  // its views point into the strings above
};

using SharedRequest = std::shared_ptr<const OwnedRequest>;

inline SharedRequest Own(const ResolvedRequest& r) { return std::make_shared<OwnedRequest>(r); }

}  // namespace limiter
