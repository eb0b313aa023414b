#include "protocol/op.h"

#include "protocol/wire.h"

namespace limiter {

void AddOp(RequestBuilder& b, uint64_t id, const OpSpec& op) {
  if (op.split_k != 0) {
    b.OnSubBucket(op.split_k, op.split_index, op.split_epoch,
                  {op.split_token.data(), op.split_token_bytes});
  }
  switch (op.kind) {
    case OpKind::kCheck: b.Check(id, op.policy, op.key, op.tenant, op.cost, op.operation); break;
    case OpKind::kLease: b.Lease(id, op.policy, op.key, op.tenant, op.cost); break;
    case OpKind::kReturn:
      b.Return(id, op.policy, op.key, op.tenant, op.cost, op.leased_at_ms, op.lease_id);
      break;
    case OpKind::kStats: b.Stats(id); break;
    case OpKind::kSplit: b.Split(id, op.policy, op.key, op.cost); break;
    case OpKind::kHotKeys: b.HotKeys(id); break;
    case OpKind::kMembers: b.Members(id); break;
  }
}

OpAnswer FromWire(const wire::OpReply& r) {
  OpAnswer a;
  switch (r.status()) {
    case wire::Status::Ok: a.status = OpAnswer::Status::kOk; break;
    case wire::Status::BadRequest: a.status = OpAnswer::Status::kBadRequest; break;
    case wire::Status::UnknownPolicy: a.status = OpAnswer::Status::kUnknownPolicy; break;
    case wire::Status::KeysExhausted: a.status = OpAnswer::Status::kKeysExhausted; break;
    case wire::Status::WrongOwner: a.status = OpAnswer::Status::kWrongOwner; break;
    case wire::Status::Split: a.status = OpAnswer::Status::kSplit; break;
    case wire::Status::Moving: a.status = OpAnswer::Status::kMoving; break;
    case wire::Status::StoreError: a.status = OpAnswer::Status::kStoreError; break;
    case wire::Status::SplitChanged: a.status = OpAnswer::Status::kSplitChanged; break;
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
