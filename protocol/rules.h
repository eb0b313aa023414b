// The wire protocol's rules, in one place for the node, the gateway library and the tools:
// which node a limit lives on (the routing key), what a limit is called (its identity, the
// key of its state on the node and of its local bucket on a gateway), and what one request
// may carry (its bounds, with the error each bound gives). Pure functions.
//
// Identity. A policy that nests under a tenant (`parent:`) is one limit per (policy, tenant,
// key): key "k" of tenant acme and key "k" of tenant zeta are two limits. A policy that does
// not nest is one limit per (policy, key), whatever tenant a request names. An ancestor is
// charged under the request's tenant: its key is the tenant.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/limits.h"
#include "common/policy.h"
#include "common/rate.h"
#include "limiter/status.h"
#include "protocol/key_id.h"

namespace limiter::protocol {

// The messages of the bounds below.
std::string TooLong(std::string_view what, size_t bytes, size_t most);
std::string CostOutOfRange(int64_t cost);
std::string MissingTenant(const Policy& policy);

// The tenant when the policy nests under one, else the key.
std::string_view RoutingKey(const Policy& policy, std::string_view key, std::string_view tenant);
// Sub-bucket `index` of a split key lives on the owner of "key#index".
std::string SubBucketRoutingKey(std::string_view key, uint16_t index);
void AppendSubBucketRoutingKey(std::string& out, std::string_view key, uint16_t index);

KeyId LimitId(const Policy& policy, std::string_view key, std::string_view tenant);
// The same without the policy at hand (a gateway's fast path): equal to LimitId for a
// request of a nested policy (which names its tenant) and for a request of one that does not
// nest that names no tenant.
KeyId LimitIdOfRequest(std::string_view policy, std::string_view key, std::string_view tenant);
KeyId AncestorId(const Policy& ancestor, std::string_view tenant);
// The same, for a caller that has the routing key's ring slot at hand (Ring::SlotOf of
// RoutingKey; the node, which needs it for ownership anyway): one hash fewer.
KeyId LimitIdInSlot(const Policy& policy, std::string_view key, std::string_view tenant,
                    uint32_t slot);
KeyId AncestorIdInSlot(const Policy& ancestor, std::string_view tenant, uint32_t slot);
// The same for a caller that keeps each policy's part of its ids (PolicyIdSeed, made after the
// process's key-id seed is set): the key hashed once, a nested policy's tenant once more.
uint64_t PolicyIdSeed(const Policy& policy);
inline KeyId LimitIdInSlot(uint64_t policy_seed, const Policy& policy, std::string_view key,
                           std::string_view tenant, uint32_t slot) {
  return policy.parent_index >= 0
             ? WithRingSlot(KeyIdOf(ChainKeyId(policy_seed, tenant), key), slot)
             : WithRingSlot(KeyIdOf(policy_seed, key), slot);
}
KeyId SubBucketIdInSlot(const Policy& policy, std::string_view key, uint32_t epoch, uint16_t index,
                        uint32_t slot);
// Sub-bucket `index` of a key split in split `epoch` (only keys that do not nest split).
KeyId SubBucketId(const Policy& policy, std::string_view key, uint32_t epoch, uint16_t index);

// Bounds. Each returns ok, or the error a request gets (naming `where`: "limits[0].key", "the
// key"); the checks are inline and the messages made only for bad requests.
inline bool KeyInBounds(std::string_view key) { return !key.empty() && key.size() <= kMaxKeyBytes; }
Status KeyError(std::string_view key, std::string_view where);
inline Status TenantError(std::string_view tenant) {
  if (tenant.size() <= kMaxKeyBytes) return Status::Ok();
  return Error{TooLong("the tenant", tenant.size(), kMaxKeyBytes)};
}
// A cost, units of a LEASE or RETURN: 1 to kMaxCost.
inline Status CostError(int64_t cost) {
  if (cost >= 1 && cost <= kMaxCost) return Status::Ok();
  return Error{CostOutOfRange(cost)};
}
inline Status OperationError(std::string_view operation) {
  if (operation.size() <= kMaxNameBytes) return Status::Ok();
  return Error{TooLong("the operation", operation.size(), kMaxNameBytes)};
}
Status SplitError(uint16_t split_k, uint16_t split_index);
// A nested policy needs the request's tenant.
inline Status MissingTenantError(const Policy& policy, std::string_view tenant) {
  if (policy.parent_index < 0 || !tenant.empty()) return Status::Ok();
  return Error{MissingTenant(policy)};
}

}  // namespace limiter::protocol
