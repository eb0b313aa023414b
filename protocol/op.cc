#include "protocol/op.h"

#include "protocol/wire.h"

namespace limiter {

OpSpec OpSpec::Check(std::string policy, std::string key, std::string tenant, std::string operation,
                     int64_t cost, const SubBucket& sub) {
  OpSpec op;
  op.kind = OpKind::kCheck;
  op.policy = std::move(policy);
  op.key = std::move(key);
  op.tenant = std::move(tenant);
  op.operation = std::move(operation);
  op.cost = op.operation.empty() ? cost : 1;
  op.sub = sub;
  return op;
}

OpSpec OpSpec::Lease(std::string policy, std::string key, std::string tenant, int64_t units,
                     const SubBucket& sub) {
  OpSpec op;
  op.kind = OpKind::kLease;
  op.policy = std::move(policy);
  op.key = std::move(key);
  op.tenant = std::move(tenant);
  op.cost = units;
  op.sub = sub;
  return op;
}

OpSpec OpSpec::Return(std::string policy, std::string key, std::string tenant, int64_t units,
                      int64_t leased_at_ms, uint64_t lease_id, const SubBucket& sub) {
  OpSpec op = Lease(std::move(policy), std::move(key), std::move(tenant), units, sub);
  op.kind = OpKind::kReturn;
  op.leased_at_ms = leased_at_ms;
  op.lease_id = lease_id;
  return op;
}

OpSpec OpSpec::Split(std::string policy, std::string key, int64_t sent) {
  OpSpec op;
  op.kind = OpKind::kSplit;
  op.policy = std::move(policy);
  op.key = std::move(key);
  op.cost = sent;
  return op;
}

OpSpec OpSpec::About(OpKind kind) {
  OpSpec op;
  op.kind = kind;
  return op;
}

void AddOp(RequestBuilder& b, uint64_t id, const OpSpec& op) {
  if (op.sub.k != 0) b.OnSubBucket(op.sub.k, op.sub.index, op.sub.epoch, op.sub.token_view());
  switch (op.kind) {
    case OpKind::kCheck:
      b.Check(id, op.policy, op.key, op.tenant, op.cost, op.operation);
      break;
    case OpKind::kLease:
      b.Lease(id, op.policy, op.key, op.tenant, op.cost);
      break;
    case OpKind::kReturn:
      b.Return(id, op.policy, op.key, op.tenant, op.cost, op.leased_at_ms, op.lease_id);
      break;
    case OpKind::kStats:
      b.Stats(id);
      break;
    case OpKind::kSplit:
      b.Split(id, op.policy, op.key, op.cost);
      break;
    case OpKind::kHotKeys:
      b.HotKeys(id);
      break;
    case OpKind::kMembers:
      b.Members(id);
      break;
  }
}

OpAnswer FromWire(const wire::OpReply& r) {
  OpAnswer a;
  switch (r.status()) {
    case wire::Status::Ok:
      a.status = OpAnswer::Status::kOk;
      break;
    case wire::Status::BadRequest:
      a.status = OpAnswer::Status::kBadRequest;
      break;
    case wire::Status::UnknownPolicy:
      a.status = OpAnswer::Status::kUnknownPolicy;
      break;
    case wire::Status::KeysExhausted:
      a.status = OpAnswer::Status::kKeysExhausted;
      break;
    case wire::Status::WrongOwner:
      a.status = OpAnswer::Status::kWrongOwner;
      break;
    case wire::Status::Split:
      a.status = OpAnswer::Status::kSplit;
      break;
    case wire::Status::Moving:
      a.status = OpAnswer::Status::kMoving;
      break;
    case wire::Status::StoreError:
      a.status = OpAnswer::Status::kStoreError;
      break;
    case wire::Status::SplitChanged:
      a.status = OpAnswer::Status::kSplitChanged;
      break;
    default:
      a.status = OpAnswer::Status::kBadRequest;
      a.error = "unknown status " + std::to_string(static_cast<int>(r.status()));
  }
  if (r.error()) a.error = r.error()->str();
  a.allowed = r.allowed();
  a.retry_after_ms = r.retry_after_ms();
  a.denied_by = r.denied_by();
  if (r.denied_policy()) a.denied_policy = r.denied_policy()->str();
  if (r.results()) {
    for (const wire::LimitResult* l : *r.results()) {
      a.results.push_back({l->allowed(), l->remaining(), l->retry_after_ms(), l->reset_ms()});
    }
  }
  a.granted = r.granted();
  a.granted_at_ms = r.granted_at_ms();
  a.lease_ttl_ms = r.lease_ttl_ms();
  a.suggested_lease = r.suggested_lease();
  a.lease_id = r.lease_id();
  a.ring_version = r.ring_version();
  if (r.members()) {
    for (const flatbuffers::String* m : *r.members()) a.members.push_back(m->str());
  }
  a.generation = r.generation();
  if (r.owner()) a.owner = r.owner()->str();
  a.split_k = r.split_k();
  a.split_epoch = r.split_epoch();
  a.split_valid_ms = r.split_valid_ms();
  if (const auto* token = r.split_token(); token && token->size() <= a.split_token.size()) {
    std::copy(token->begin(), token->end(), a.split_token.begin());
    a.split_token_bytes = static_cast<uint8_t>(token->size());
  }
  return a;
}

}  // namespace limiter
