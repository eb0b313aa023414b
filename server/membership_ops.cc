// Node: member-list changes that reach a node over its data port (MEMBERS ops), and the list
// corrections DNS needs. A change comes either as a whole list (adopted when its generation
// is newer) or as one member's own announcement that it leaves or joins, which is applied to
// this node's list: changes announced at once by several members then merge instead of
// undoing each other. See "Hand-off" in node.h for what a change does to the keys.
#include <algorithm>
#include <optional>
#include <string>

#include "common/limits.h"
#include "common/membership.h"
#include "common/wire.h"
#include "server/node_internal.h"

namespace limiter {
namespace {

bool Lists(const Ring& ring, const std::string& member) {
  const auto& m = ring.members();
  return std::find(m.begin(), m.end(), member) != m.end();
}

// A member's name from the wire: "" when absent; an error message when malformed.
std::optional<std::string> BadName(const flatbuffers::String* name, const char* field) {
  if (name != nullptr && (name->size() == 0 || name->size() > kMaxNameBytes)) {
    return std::string(field) + ": a member is host:port, 1 to " + std::to_string(kMaxNameBytes) +
           " bytes";
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> Node::MemberLeaves(const std::string& member, uint64_t generation) {
  if (member == options_.self) {
    return "leaving: this node (" + member + ") is the one named; a node announces its own leave";
  }
  std::lock_guard<std::mutex> change(change_mu_);
  const std::shared_ptr<const Membership> current = membership_.load();
  if (!Lists(current->ring, member)) return std::nullopt;  // gone already: nothing changes
  std::vector<std::string> rest;
  for (const std::string& m : current->ring.members()) {
    if (m != member) rest.push_back(m);
  }
  auto next = std::make_shared<const Membership>(
      Membership{Ring(std::move(rest)), std::max(current->generation + 1, generation)});
  if (leaving_.load()) {
    Rehome(std::move(next));
  } else {
    // The leaver says `done` at the generation it announced, whatever this node's is.
    Adopt(nullptr, std::move(next), generation);
  }
  return std::nullopt;
}

std::optional<std::string> Node::MemberJoins(const std::string& member, uint64_t generation) {
  if (member == options_.self) {
    return "joining: this node (" + member + ") is the one named; a node announces its own join";
  }
  std::lock_guard<std::mutex> change(change_mu_);
  const std::shared_ptr<const Membership> current = membership_.load();
  if (Lists(current->ring, member)) {
    // Listed already: whatever this node owed it went (or was lost) when it was added. Once
    // the jobs queued before this one have run, `done` tells it so.
    std::shared_ptr<const Membership> next = current;
    if (generation > current->generation) {
      next = std::make_shared<const Membership>(Membership{current->ring, generation});
    }
    std::lock_guard<std::mutex> lock(handoff_mu_);
    Publish(next);
    jobs_.push_back({current, std::move(next), member});
    handoff_counters_.jobs.fetch_add(1);
    jobs_cv_.notify_all();
    return std::nullopt;
  }
  if (current->ring.members().size() >= Ring::kMaxMembers) {
    return "joining: the list holds " + std::to_string(Ring::kMaxMembers) +
           " members, the most a ring takes";
  }
  std::vector<std::string> with = current->ring.members();
  with.push_back(member);
  auto next = std::make_shared<const Membership>(
      Membership{Ring(std::move(with)), std::max(current->generation + 1, generation)});
  if (leaving_.load()) {
    Rehome(std::move(next));
  } else {
    Adopt(nullptr, std::move(next));
  }
  return std::nullopt;
}

void Node::Rehome(std::shared_ptr<const Membership> next) {
  std::lock_guard<std::mutex> lock(handoff_mu_);
  const std::shared_ptr<const Membership> current = membership_.load();
  Publish(next);
  if (next->ring.empty()) return;  // nobody left to hand to
  jobs_.push_back({current, std::move(next), {}});
  handoff_counters_.jobs.fetch_add(1);
  jobs_cv_.notify_all();
}

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
  if (auto error = BadName(leaving, "leaving")) return r.Fail(wire::Status::BadRequest, *error);
  if (auto error = BadName(joining, "joining")) return r.Fail(wire::Status::BadRequest, *error);
  // Asking for the list is anyone's (a gateway that lost a node does); changing it is a
  // member's alone, and a leave or a join only the member's own. A standalone node (no
  // `self`) belongs to no cluster: it takes no change at all.
  if ((leaving || joining || whole) && options_.self.empty()) {
    return r.Fail(wire::Status::BadRequest,
                  "members: this node is standalone (no --self); it takes no member list");
  }
  if (leaving || joining) {
    const std::string named = (leaving ? leaving : joining)->str();
    if (auto refused = PeerOpRefusal(w, leaving ? "MEMBERS (leaving)" : "MEMBERS (joining)",
                                     &named)) {
      return r.Fail(wire::Status::Forbidden, *refused);
    }
  } else if (whole) {
    if (auto refused = PeerOpRefusal(w, "MEMBERS (a member list)", nullptr)) {
      return r.Fail(wire::Status::Forbidden, *refused);
    }
    const std::string& sender = w.session ? w.session->peer_name : std::string();
    if (!sender.empty() && !Lists(membership_.load()->ring, sender)) {
      w.counters.peer_refusals.Add();
      return r.Fail(wire::Status::Forbidden, "members: " + sender +
                                                 " is not a member of this node's list; only a "
                                                 "member may send it another");
    }
  }
  const std::shared_ptr<const Membership> before = membership_.load();
  std::optional<std::string> error;
  if (leaving) {
    error = MemberLeaves(leaving->str(), generation);
  } else if (joining) {
    error = MemberJoins(joining->str(), generation);
  } else if (whole) {
    if (list->size() > Ring::kMaxMembers) {
      return r.Fail(wire::Status::BadRequest, "members: at most " +
                                                  std::to_string(Ring::kMaxMembers) +
                                                  " are allowed, got " +
                                                  std::to_string(list->size()));
    }
    std::vector<std::string> members;
    for (flatbuffers::uoffset_t i = 0; i < list->size(); ++i) {
      const auto* m = list->Get(i);
      if (m == nullptr || BadName(m, "")) {
        return r.Fail(wire::Status::BadRequest, "members[" + std::to_string(i) +
                                                    "]: a member is host:port, 1 to " +
                                                    std::to_string(kMaxNameBytes) + " bytes");
      }
      members.push_back(m->str());
    }
    error = SetMembers(std::move(members), generation);
    if (error) error = "members: " + *error;
  }
  if (error) return r.Fail(wire::Status::BadRequest, *error);
  const std::shared_ptr<const Membership> after = membership_.load();
  if (after->ring.members() != before->ring.members()) {
    // Remember who left and who came, for the DNS answers that lag behind (WithAnnounced).
    std::lock_guard<std::mutex> lock(handoff_mu_);
    const int64_t now = clock_.NowMs();
    std::erase_if(announced_, [&](const auto& a) {
      return now - a.second.second > kAnnouncedHoldMs || announced_.size() > 4 * Ring::kMaxMembers;
    });
    for (const std::string& m : before->ring.members()) {
      if (!Lists(after->ring, m)) announced_[m] = {false, now};
    }
    for (const std::string& m : after->ring.members()) {
      if (!Lists(before->ring, m)) announced_[m] = {true, now};
    }
  }
  r.members = after;
}

std::vector<std::string> Node::WithAnnounced(std::vector<std::string> discovered) const {
  std::lock_guard<std::mutex> lock(handoff_mu_);
  const int64_t now = clock_.NowMs();
  for (const auto& [member, what] : announced_) {
    if (now - what.second > kAnnouncedHoldMs) continue;
    const auto it = std::find(discovered.begin(), discovered.end(), member);
    if (!what.first && it != discovered.end()) discovered.erase(it);
    if (what.first && it == discovered.end()) discovered.push_back(member);
  }
  return discovered;
}

}  // namespace limiter
