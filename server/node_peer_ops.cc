// Node: the ops nodes send each other, each only from a session that proved the peer
// credential and speaks for itself (MayActAsPeer): member-list changes (MEMBERS), keys handed
// over (HANDOFF) and region reports (REGIONS). What they change is Ownership's, Handoff's and
// RegionShares'; asking for the list or a region's shares is anyone's.
#include <algorithm>
#include <string>

#include "common/limits.h"
#include "common/member_list.h"
#include "protocol/wire.h"
#include "server/node_internal.h"

namespace limiter {
namespace {

bool Lists(const Ring& ring, const std::string& member) {
  const auto& m = ring.members();
  return std::find(m.begin(), m.end(), member) != m.end();
}

// A member's name from the wire: absent is fine; malformed is an error.
Status CheckName(const flatbuffers::String* name, const char* field) {
  if (name != nullptr && (name->size() == 0 || name->size() > kMaxNameBytes)) {
    return Error{std::string(field) + ": a member is host:port, 1 to " +
                 std::to_string(kMaxNameBytes) + " bytes"};
  }
  return Status::Ok();
}

}  // namespace

void Node::MembersOp(Worker& w, OpResult& r) {
  const wire::Peer* peer = w.peer;
  const auto* list = peer ? peer->members() : nullptr;
  const bool whole = list != nullptr && list->size() > 0;
  const flatbuffers::String* leaving = peer ? peer->leaving() : nullptr;
  const flatbuffers::String* joining = peer ? peer->joining() : nullptr;
  if (int(whole) + int(leaving != nullptr) + int(joining != nullptr) > 1) {
    return r.Fail(wire::Status::BadRequest,
                  "members: give one of a list, `leaving` or `joining`, not several");
  }
  const uint64_t generation = peer ? peer->generation() : 0;
  if ((whole || leaving || joining) && generation > WallClockGeneration() + kMaxGenerationAheadMs) {
    return r.Fail(wire::Status::BadRequest,
                  "generation " + std::to_string(generation) +
                      " is more than 10 minutes ahead of this node's clock");
  }
  if (Status bad = CheckName(leaving, "leaving"); !bad.ok()) {
    return r.Fail(wire::Status::BadRequest, bad.error());
  }
  if (Status bad = CheckName(joining, "joining"); !bad.ok()) {
    return r.Fail(wire::Status::BadRequest, bad.error());
  }
  // Asking for the list is anyone's (a gateway that lost a node does); changing it is a
  // member's alone, and a leave or a join only the member's own. A standalone node (no
  // `self`) belongs to no cluster: it takes no change at all.
  if ((leaving || joining || whole) && options_.self.empty()) {
    return r.Fail(wire::Status::BadRequest,
                  "members: this node is standalone (no --self); it takes no member list");
  }
  if (leaving || joining) {
    const std::string named = (leaving ? leaving : joining)->str();
    if (Status allowed =
            MayActAsPeer(w, leaving ? "MEMBERS (leaving)" : "MEMBERS (joining)", &named);
        !allowed.ok()) {
      return r.Fail(wire::Status::Forbidden, allowed.error());
    }
  } else if (whole) {
    if (Status allowed = MayActAsPeer(w, "MEMBERS (a member list)", nullptr); !allowed.ok()) {
      return r.Fail(wire::Status::Forbidden, allowed.error());
    }
    const std::string& sender = w.session ? w.session->peer_name : std::string();
    if (!sender.empty() && !Lists(ownership_.current()->ring, sender)) {
      w.counters.peer_refusals.Add();
      return r.Fail(wire::Status::Forbidden, "members: " + sender +
                                                 " is not a member of this node's list; only a "
                                                 "member may send it another");
    }
  }
  const std::shared_ptr<const ClusterRing> before = ownership_.current();
  Status changed;
  if (leaving) {
    changed = ownership_.MemberLeaves(leaving->str(), generation);
  } else if (joining) {
    changed = ownership_.MemberJoins(joining->str(), generation);
  } else if (whole) {
    if (list->size() > Ring::kMaxMembers) {
      return r.Fail(wire::Status::BadRequest,
                    "members: at most " + std::to_string(Ring::kMaxMembers) + " are allowed, got " +
                        std::to_string(list->size()));
    }
    std::vector<std::string> members;
    for (flatbuffers::uoffset_t i = 0; i < list->size(); ++i) {
      const auto* m = list->Get(i);
      if (m == nullptr || !CheckName(m, "").ok()) {
        return r.Fail(wire::Status::BadRequest, "members[" + std::to_string(i) +
                                                    "]: a member is host:port, 1 to " +
                                                    std::to_string(kMaxNameBytes) + " bytes");
      }
      members.push_back(m->str());
    }
    changed = ownership_.SetMembers(std::move(members), generation);
    if (!changed.ok()) changed = Error{"members: " + changed.error()};
  }
  if (!changed.ok()) return r.Fail(wire::Status::BadRequest, changed.error());
  const std::shared_ptr<const ClusterRing> after = ownership_.current();
  // Remember who left and who came, for the DNS answers that lag behind (WithAnnounced).
  ownership_.NoteAnnounced(*before, *after);
  r.members = after;
}

void Node::HandoffOp(Worker& w, int64_t now, OpResult& r) {
  const wire::Handoff* h = w.peer ? w.peer->handoff() : nullptr;
  if (h == nullptr || h->from() == nullptr || h->from()->size() == 0) {
    return r.Fail(wire::Status::BadRequest,
                  "HANDOFF needs the frame's peer.handoff table, naming `from`");
  }
  const std::string from = h->from()->str().substr(0, kMaxNameBytes);
  // Only a peer, only for itself (and Handoff takes it only from a member it knew lately).
  if (Status allowed = MayActAsPeer(w, "HANDOFF", &from); !allowed.ok()) {
    return r.Fail(wire::Status::Forbidden, allowed.error());
  }
  auto received = handoff_.Receive(*h, from, now);
  if (const auto* refused = std::get_if<Handoff::Refused>(&received)) {
    return r.Fail(refused->status, refused->why);
  }
  const Handoff::Received& taken = std::get<Handoff::Received>(received);
  r.reply.granted = taken.taken;
  r.error = taken.error;
  r.durable_seq = taken.durable_seq;
}

void Node::RegionsOp(Worker& w, const wire::Op& op, const ClusterRing& m, int64_t now,
                     OpResult& r) {
  if (!regions_) {
    return r.Fail(wire::Status::BadRequest,
                  "this node belongs to no region (its config names no `region`)");
  }
  if (const wire::RegionReport* report = w.peer ? w.peer->report() : nullptr) {
    // A report only from a node of the region it names, speaking for itself.
    const std::string node = report->node() ? report->node()->str() : std::string();
    if (Status allowed = MayActAsPeer(w, "REGIONS (a region report)", &node); !allowed.ok()) {
      return r.Fail(wire::Status::Forbidden, allowed.error());
    }
    const std::string region = report->region() ? report->region()->str() : std::string();
    if (!auth_.trusts_everyone() && !regions_->IsMemberOf(region, node)) {
      w.counters.peer_refusals.Add();
      return r.Fail(wire::Status::Forbidden, "region report from " + node.substr(0, kMaxNameBytes) +
                                                 ", which is not a member of region '" +
                                                 region.substr(0, kMaxNameBytes) +
                                                 "' by this node's list of it");
    }
    Result<int64_t> taken =
        regions_->Receive(*report, table_.digest(), KeyIdSeedDigest(), m.ring, options_.self, now);
    if (!taken) return r.Fail(wire::Status::BadRequest, taken.error());
    r.reply.granted = *taken;
    return;
  }
  const bool about_key = op.limits() != nullptr && op.limits()->size() > 0;
  if (about_key) {
    // The key's owner answers (WrongOwner names it otherwise).
    if (!Resolve(w, op, m, /*single=*/true, CostUse::kNone, now, r)) return;
    const LimitEntry& e = w.entries.front();
    const Policy& p = table_.at(e.policy);
    if (p.scope != Scope::kGlobal) {
      return r.Fail(wire::Status::BadRequest,
                    "policy '" + p.name + "' is scope: region; only a global limit has shares");
    }
    w.region_views = regions_->ViewOf(e.policy, &e.id, now);
  } else {
    w.region_views = regions_->ViewOf(0, nullptr, now);
  }
  r.with_regions = true;
  r.reply.allowed = true;
}

}  // namespace limiter
