// Node: the REGIONS op (region_shares.h). From a node of another region it carries that
// region's demand for the global keys this node owns; from anyone else (limiterctl regions) it
// asks what this node knows of the regions: for one global key it owns, or for the links.
#include "common/limits.h"
#include "server/node_internal.h"

namespace limiter {

void Node::RegionsOp(Worker& w, const wire::Op& op, const Membership& m, int64_t now,
                     OpResult& r) {
  if (!regions_) {
    return r.Fail(wire::Status::BadRequest,
                  "this node belongs to no region (its config names no `region`)");
  }
  if (const wire::RegionReport* report = w.peer ? w.peer->report() : nullptr) {
    // A report only from a node of the region it names, speaking for itself.
    const std::string node = report->node() ? report->node()->str() : std::string();
    if (auto refused = PeerOpRefusal(w, "REGIONS (a region report)", &node)) {
      return r.Fail(wire::Status::Forbidden, *refused);
    }
    const std::string region = report->region() ? report->region()->str() : std::string();
    if (!trust_all_ && !regions_->IsMemberOf(region, node)) {
      w.counters.peer_refusals.Add();
      return r.Fail(wire::Status::Forbidden,
                    "region report from " + node.substr(0, kMaxNameBytes) +
                        ", which is not a member of region '" + region.substr(0, kMaxNameBytes) +
                        "' by this node's list of it");
    }
    Result<int64_t> taken = regions_->Receive(*report, policy_digest_, KeyIdSeedDigest(), m.ring,
                                              options_.self, now);
    if (!taken) return r.Fail(wire::Status::BadRequest, taken.error());
    r.reply.granted = *taken;
    return;
  }
  const bool about_key = op.limits() != nullptr && op.limits()->size() > 0;
  if (about_key) {
    // The key's owner answers (WrongOwner names it otherwise).
    if (!Resolve(w, op, m, /*single=*/true, CostUse::kNone, now, r)) return;
    const Entry& e = w.entries.front();
    const Policy& p = policies_.policies()[static_cast<size_t>(e.policy)];
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
