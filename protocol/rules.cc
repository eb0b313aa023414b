#include "protocol/rules.h"

#include <charconv>

#include "common/rate.h"
#include "protocol/ring.h"

namespace limiter::protocol {
namespace {

std::string_view Decimal(char (&buf)[24], uint64_t v) {
  const auto end = std::to_chars(buf, buf + sizeof(buf), v).ptr;
  return {buf, static_cast<size_t>(end - buf)};
}

}  // namespace

std::string_view RoutingKey(const Policy& policy, std::string_view key, std::string_view tenant) {
  return policy.parent_index >= 0 ? tenant : key;
}

void AppendSubBucketRoutingKey(std::string& out, std::string_view key, uint16_t index) {
  char buf[24];
  out.append(key);
  out += '#';
  out.append(Decimal(buf, index));
}

std::string SubBucketRoutingKey(std::string_view key, uint16_t index) {
  std::string out;
  AppendSubBucketRoutingKey(out, key, index);
  return out;
}

KeyId LimitId(const Policy& policy, std::string_view key, std::string_view tenant) {
  return LimitIdOfRequest(policy.name, key, policy.parent_index >= 0 ? tenant : "");
}

KeyId LimitIdOfRequest(std::string_view policy, std::string_view key, std::string_view tenant) {
  // The routing key is the tenant when there is one (RoutingKey): its slot goes in the id.
  return tenant.empty() ? WithRingSlot(MakeKeyId({policy, key}), Ring::SlotOf(key))
                        : WithRingSlot(MakeKeyId({policy, tenant, key}), Ring::SlotOf(tenant));
}

KeyId AncestorId(const Policy& ancestor, std::string_view tenant) {
  return LimitId(ancestor, tenant, tenant);
}

KeyId LimitIdInSlot(const Policy& policy, std::string_view key, std::string_view tenant,
                    uint32_t slot) {
  return policy.parent_index >= 0 ? WithRingSlot(MakeKeyId({policy.name, tenant, key}), slot)
                                  : WithRingSlot(MakeKeyId({policy.name, key}), slot);
}

uint64_t PolicyIdSeed(const Policy& policy) { return ChainKeyId(KeyIdSeed(), policy.name); }

KeyId AncestorIdInSlot(const Policy& ancestor, std::string_view tenant, uint32_t slot) {
  return LimitIdInSlot(ancestor, tenant, tenant, slot);
}

KeyId SubBucketId(const Policy& policy, std::string_view key, uint32_t epoch, uint16_t index) {
  std::string routing;
  AppendSubBucketRoutingKey(routing, key, index);
  return SubBucketIdInSlot(policy, key, epoch, index, Ring::SlotOf(routing));
}

KeyId SubBucketIdInSlot(const Policy& policy, std::string_view key, uint32_t epoch, uint16_t index,
                        uint32_t slot) {
  char e[24], i[24];
  return WithRingSlot(MakeKeyId({policy.name, key, Decimal(e, epoch), Decimal(i, index)}), slot);
}

Status KeyError(std::string_view key, std::string_view where) {
  if (key.empty()) return Error{std::string(where) + " is empty"};
  if (key.size() > kMaxKeyBytes) return Error{TooLong(where, key.size(), kMaxKeyBytes)};
  return Status::Ok();
}

std::string TooLong(std::string_view what, size_t bytes, size_t most) {
  return std::string(what) + " is " + std::to_string(bytes) + " bytes; at most " +
         std::to_string(most) + " are allowed";
}

std::string CostOutOfRange(int64_t cost) {
  return "cost must be between 1 and " + std::to_string(kMaxCost) + ", got " + std::to_string(cost);
}

std::string MissingTenant(const Policy& policy) {
  return "policy '" + policy.name + "' nests under '" + policy.parent +
         "'; the request needs a tenant";
}

Status SplitError(uint16_t split_k, uint16_t split_index) {
  if (split_k == 0) return Status::Ok();
  if (split_k < 2 || split_k > 64 || (split_k & (split_k - 1)) != 0) {
    return Error{"split_k must be a power of two from 2 to 64, got " + std::to_string(split_k)};
  }
  if (split_index >= split_k) {
    return Error{"split_index " + std::to_string(split_index) + " is not below split_k " +
                 std::to_string(split_k)};
  }
  return Status::Ok();
}

}  // namespace limiter::protocol
