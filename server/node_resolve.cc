// Node: an op's limits resolved against the policies and the ring (Resolve), once, before the
// op runs: each limit's policy, identity, ring slot, rate and clock, its ancestors, and the
// request's bounds; an op on a sub-bucket is checked against the split it names.
#include <algorithm>
#include <cstring>

#include "common/limits.h"
#include "protocol/rules.h"
#include "server/node_internal.h"

namespace limiter {
namespace {

auth::Bytes BytesOf(const flatbuffers::Vector<uint8_t>* v) {
  return v ? auth::Bytes(v->data(), v->size()) : auth::Bytes();
}

}  // namespace

// Inlined in both callers, for every op: the compare is the common case.
__attribute__((always_inline)) inline int Node::FindPolicy(Worker& w, std::string_view name) const {
  if (w.last_policy >= 0 && name.size() == w.last_policy_name.size() &&
      std::memcmp(name.data(), w.last_policy_name.data(), name.size()) == 0) {
    return w.last_policy;
  }
  const int policy = table_.Find(name);
  if (policy >= 0) {
    w.last_policy = policy;
    w.last_policy_name = name;
  }
  return policy;
}

Node::Ahead Node::Lookahead(Worker& w, const wire::Op& op) const {
  Ahead a;
  const auto* limits = op.limits();
  if (limits == nullptr || limits->size() == 0 || op.split_k() != 0) return a;
  const wire::Limit* limit = limits->Get(0);
  const int policy = FindPolicy(w, limit->policy() ? limit->policy()->string_view() : "");
  if (policy < 0) return a;
  const Policy& p = table_.at(policy);
  const std::string_view key = limit->key() ? limit->key()->string_view() : "";
  const std::string_view tenant = op.tenant() ? op.tenant()->string_view() : std::string_view();
  // Nothing is hashed for an op Resolve refuses anyway.
  if (!protocol::KeyInBounds(key) || tenant.size() > kMaxKeyBytes) return a;
  a.op = &op;
  a.policy = policy;
  a.slot = Ring::SlotOf(protocol::RoutingKey(p, key, tenant));
  a.id = protocol::LimitIdInSlot(table_.id_seed(policy), p, key, tenant, a.slot);
  store_.Prefetch(a.policy, a.id);
  return a;
}

// Fills w.entries with the op's limits, then their ancestors keyed by the tenant, once each.
bool Node::Resolve(Worker& w, const wire::Op& op, const ClusterRing& m, bool single,
                   CostUse cost_use, int64_t now, OpResult& r) {
  const auto* limits = op.limits();
  const size_t n = limits ? limits->size() : 0;
  if (n == 0) {
    r.Fail(wire::Status::BadRequest, "the op names no limit");
    return false;
  }
  if (single && n != 1) {
    r.Fail(wire::Status::BadRequest, "the op takes exactly one limit, got " + std::to_string(n));
    return false;
  }
  if (n > kMaxLimitsPerCheck) {
    r.Fail(wire::Status::BadRequest, "the op names " + std::to_string(n) + " limits; at most " +
                                         std::to_string(kMaxLimitsPerCheck) + " are allowed");
    return false;
  }
  const std::string_view tenant = op.tenant() ? op.tenant()->string_view() : std::string_view();
  const std::string_view operation =
      op.operation() ? op.operation()->string_view() : std::string_view();
  const uint16_t split_k = op.split_k();
  const uint16_t split_index = op.split_index();
  // The first bound the op breaks, if any (each check inline; a message only when broken).
  const Status bounds = [&]() -> Status {
    if (Status s = protocol::TenantError(tenant); !s.ok()) return s;
    if (cost_use == CostUse::kUnits && !operation.empty()) {
      return Error{"operation applies to CHECK only; give units as cost"};
    }
    if (Status s = protocol::OperationError(operation); !s.ok()) return s;
    if (cost_use != CostUse::kNone && operation.empty()) {
      if (Status s = protocol::CostError(op.cost()); !s.ok()) return s;
    }
    if (split_k != 0) {
      if (Status s = protocol::SplitError(split_k, split_index); !s.ok()) return s;
      if (n != 1) return Error{"an op on a sub-bucket takes exactly one limit"};
    }
    return Status::Ok();
  }();
  if (!bounds.ok()) {
    r.Fail(wire::Status::BadRequest, bounds.error());
    return false;
  }
  // Inlined: called for every limit of every op (GCC leaves it out of line otherwise).
  // A calendar policy's time: the wall clock, read once per op and only for them.
  int64_t wall = INT64_MIN;
  auto add = [&](int policy, const KeyId& id, std::string_view key, bool ancestor)
      __attribute__((always_inline)) {
    for (const LimitEntry& e : w.entries) {
      if (e.policy == policy && e.id == id) return false;
    }
    LimitEntry& e = w.entries.emplace_back();
    e.policy = policy;
    e.id = id;
    e.key = key;
    e.tenant = tenant;
    e.ancestor = ancestor;
    const Policy& p = table_.at(policy);
    e.now = now;
    e.calendar = p.calendar.get();
    if (table_.calendars() && e.calendar) {
      if (wall == INT64_MIN) wall = clock_.WallMs();
      e.now = e.calendar->ToWindowTime(wall);
    }
    e.rate = p.rate;
    e.cost = operation.empty() ? op.cost() : p.CostOf(operation);
    return true;
  };
  for (size_t i = 0; i < n; ++i) {
    const wire::Limit* limit = limits->Get(static_cast<flatbuffers::uoffset_t>(i));
    const auto where = [i] { return "limits[" + std::to_string(i) + "]"; };  // errors only
    const std::string_view name = limit->policy() ? limit->policy()->string_view() : "";
    const bool ahead = i == 0 && w.ahead.op == &op;  // worked out already (Lookahead)
    int policy = w.ahead.policy;
    if (!ahead) {
      policy = FindPolicy(w, name);
      if (policy < 0) {
        r.Fail(wire::Status::UnknownPolicy, where() + ".policy: no policy named '" +
                                                std::string(name.substr(0, kMaxNameBytes)) + "'");
        return false;
      }
    }
    const Policy& p = table_.at(policy);
    const std::string_view key = limit->key() ? limit->key()->string_view() : "";
    if (!protocol::KeyInBounds(key)) {  // the message is made only when it is needed
      r.Fail(wire::Status::BadRequest, protocol::KeyError(key, where() + ".key").error());
      return false;
    }
    if (Status s = protocol::MissingTenantError(p, tenant); !s.ok()) {
      r.Fail(wire::Status::BadRequest, where() + ": " + s.error());
      return false;
    }
    // The routing key's ring slot: ownership, and the top bits of the key's id (key_id.h).
    std::string_view routing = protocol::RoutingKey(p, key, tenant);
    uint32_t slot = ahead ? w.ahead.slot : Ring::SlotOf(routing);
    const KeyId id =
        ahead ? w.ahead.id : protocol::LimitIdInSlot(table_.id_seed(policy), p, key, tenant, slot);
    if (!add(policy, id, key, false)) {
      r.Fail(wire::Status::BadRequest, where() + " repeats an earlier limit");
      return false;
    }
    if (split_k != 0) {
      const std::optional<Rate> share = hot_keys_.SubBucketRate(policy, split_k, split_index);
      if (!share) {
        r.Fail(wire::Status::BadRequest, where() + ": policy '" + p.name + "' cannot be split " +
                                             std::to_string(split_k) + " ways");
        return false;
      }
      if (!SubBucketValid(w, policy, key, op, m, now, r)) {
        r.error = where() + ": " + r.error;
        return false;
      }
      LimitEntry& e = w.entries.back();
      e.rate = *share;
      e.split_k = split_k;
      e.split_index = split_index;
      w.routing.clear();
      protocol::AppendSubBucketRoutingKey(w.routing, key, split_index);
      routing = w.routing;
      slot = Ring::SlotOf(routing);
      e.id = protocol::SubBucketIdInSlot(p, key, op.split_epoch(), split_index, slot);
    }
    const Ring& ring = m.ring;
    if (!ownership_.Owns(m, slot)) {
      r.wrong_owner = true;
      r.owner = ring.members()[ring.OwnerOfSlot(slot)];
      r.Fail(wire::Status::WrongOwner, where() + ": " + options_.self + " does not own '" +
                                           std::string(routing) + "'; " + r.owner + " does (ring " +
                                           std::to_string(ring.version()) + ", generation " +
                                           std::to_string(m.generation) + ")");
      return false;
    }
    if (ownership_.Waiting(slot)) {
      r.reply.retry_after_ms = 100;
      r.Fail(wire::Status::Moving, where() + ": '" + std::string(routing) +
                                       "' is being handed to " + options_.self +
                                       " by its last owner; retry shortly");
      return false;
    }
  }
  w.own_limits = n;
  // INSPECT looks at the named key alone; everything else charges its ancestors too.
  uint32_t tenant_slot = UINT32_MAX;  // computed once, if an ancestor needs it
  for (size_t i = 0; i < n && cost_use != CostUse::kNone; ++i) {
    const Policy& p = table_.at(w.entries[i].policy);
    for (int a = p.parent_index; a >= 0; a = table_.at(a).parent_index) {
      const Policy& ancestor = table_.at(a);
      if (tenant_slot == UINT32_MAX) tenant_slot = Ring::SlotOf(tenant);
      add(a, protocol::LimitIdInSlot(table_.id_seed(a), ancestor, tenant, tenant, tenant_slot),
          tenant, true);
    }
  }
  if (regions_ && op.type() != wire::OpType::Regions) {
    // The units asked for are the key's demand in this region, allowed or not.
    for (LimitEntry& e : w.entries) {
      if (!table_.global(e.policy)) continue;
      int64_t asked = 0;
      if (cost_use == CostUse::kCharge) {
        asked = e.cost;
      } else if (op.type() == wire::OpType::Lease) {
        asked = op.cost();
      }
      e.rate = regions_->Use(e.policy, e.id, asked, now);
    }
  }
  return true;
}

bool Node::SubBucketValid(Worker& w, int policy, std::string_view key, const wire::Op& op,
                          const ClusterRing& m, int64_t now, OpResult& r) {
  const Policy& p = table_.at(policy);
  const std::string_view key_routing = protocol::RoutingKey(p, key, {});
  if (m.ring.empty() || m.ring.Owner(key_routing) == options_.self) {
    // This node owns the key: its own record says whether the split is real. When it is not,
    // the gateway's view is out of date (the key merged, or split again): it gets the split
    // as it is now, as any op on the key would.
    std::optional<HotKeys::View> now_view;
    if (hot_keys_.SplitInForce(policy, key, op.split_k(), op.split_epoch(), now, now_view)) {
      return true;
    }
    std::string why = "the key is not split " + std::to_string(op.split_k()) + " ways in epoch " +
                      std::to_string(op.split_epoch()) + " on its owner; ";
    if (now_view) {
      r.PutSplit(*now_view);
      why += "it is split " + std::to_string(now_view->k) + " ways in epoch " +
             std::to_string(now_view->epoch) + " now";
    } else {
      why += "it is not split now";  // split_k 0
    }
    w.counters.split_changed.Add();
    r.Fail(wire::Status::SplitChanged, std::move(why));
    return false;
  }
  const Authenticator::TokenCheck token =
      auth_.CheckSplitToken(BytesOf(op.split_token()), p.name, key, op.split_k(), op.split_epoch());
  if (token.status.ok()) return true;
  if (token.lapsed) {
    // A token a member made has lapsed: the gateway's view is out of date, and the owner has
    // the split now (this node does not).
    w.counters.split_changed.Add();
    r.Fail(wire::Status::SplitChanged,
           token.status.error() + "; ask the key's owner for its split now");
    return false;
  }
  w.counters.split_refusals.Add();
  r.Fail(wire::Status::BadRequest, token.status.error());
  return false;
}

}  // namespace limiter
