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
#include <optional>
#include <string>
#include <string_view>

#include "common/key_id.h"
#include "common/limits.h"
#include "common/policy.h"

namespace limiter::protocol {

// The tenant when the policy nests under one, else the key.
std::string_view RoutingKey(const Policy& policy, std::string_view key, std::string_view tenant);
// Sub-bucket `index` of a split key lives on the owner of "key#index".
std::string SubBucketRoutingKey(std::string_view key, uint16_t index);
void AppendSubBucketRoutingKey(std::string& out, std::string_view key, uint16_t index);

KeyId LimitId(const Policy& policy, std::string_view key, std::string_view tenant);
KeyId AncestorId(const Policy& ancestor, std::string_view tenant);
// Sub-bucket `index` of a key split in split `epoch` (only keys that do not nest split).
KeyId SubBucketId(const Policy& policy, std::string_view key, uint32_t epoch, uint16_t index);

// Bounds. Each returns the error a request gets, naming `where` ("limits[0].key", "the key").
std::optional<std::string> KeyError(std::string_view key, std::string_view where);
std::optional<std::string> TenantError(std::string_view tenant);
// A cost, units of a LEASE or RETURN: 1 to kMaxCost.
std::optional<std::string> CostError(int64_t cost);
std::optional<std::string> OperationError(std::string_view operation);
std::optional<std::string> SplitError(uint16_t split_k, uint16_t split_index);
// A nested policy needs the request's tenant.
std::optional<std::string> MissingTenantError(const Policy& policy, std::string_view tenant);

}  // namespace limiter::protocol
