// Node: frames in, replies out. Verifying a frame, resolving each op's limits against the
// policies and the ring, and encoding the replies; what each op does to the store is in
// node_ops.cc, hot keys in hot_keys.cc, the counters in metrics.cc.
#include "server/node.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "common/limits.h"
#include "common/protocol.h"
#include "common/reply_encoding.h"
#include "common/wire.h"
#include "server/durable_store.h"
#include "server/node_internal.h"
#include "server/policy_clock.h"
#include "server/sub_bucket.h"

namespace limiter {

namespace {

constexpr auto kOpNames = std::to_array<std::string_view>(
    {"check", "lease", "return", "inspect", "stats", "split", "hot_keys", "members", "handoff",
     "regions", "unknown"});
static_assert(kOpNames.size() == kOpTypes + 1, "a name for every op type");

uint64_t RandomLeaseIdStart() {
  std::random_device rd;
  // The top bit clear: ids never wrap within a node's life.
  return ((uint64_t{rd()} << 32) | rd()) >> 1 | 1;
}

}  // namespace

std::string_view OpTypeName(int type) {
  return kOpNames[static_cast<size_t>(std::clamp(type, 0, kOpTypes))];
}

namespace {
Store::Options StoreOptions(const NodeOptions& node, const Clock& clock) {
  Store::Options o = node.store;
  o.clock = &clock;
  // Gateways send to a split's sub-buckets in turn: one idle for twice a view's validity has
  // no client left.
  o.sub_bucket_idle_ms = 2 * node.hot.split_valid_ms;
  return o;
}
}  // namespace

Node::Node(const PolicySet& policies, const Clock& clock, NodeOptions options,
           std::unique_ptr<DurableStore> durable)
    : policies_(policies),
      clock_(clock),
      options_(std::move(options)),
      store_(policies, StoreOptions(options_, clock)),
      durable_(std::move(durable)),
      requires_secret_(!options_.secrets.empty()),
      has_peer_secret_(!options_.peer_secrets.empty()),
      trust_all_(!requires_secret_ && !has_peer_secret_ && !options_.peer_tls),
      next_lease_id_(options_.lease_id_start != 0 ? options_.lease_id_start : RandomLeaseIdStart()),
      started_ms_(clock.NowMs()),
      pending_(std::make_unique<std::atomic<uint8_t>[]>(Ring::kSlots)),
      policy_digest_(PolicyDigest()) {
  for (size_t i = 0; i < policies.policies().size(); ++i) {
    policy_index_.emplace(policies.policies()[i].name, static_cast<int>(i));
  }
  secrets_.store(std::make_shared<const auth::Secrets>(options_.secrets));
  peer_secrets_.store(std::make_shared<const auth::Secrets>(options_.peer_secrets));
  membership_.store(
      std::make_shared<const Membership>(Membership{Ring(options_.members), options_.generation}));
  durable_policy_.assign(policies.policies().size(), false);
  for (size_t i = 0; i < policies.policies().size(); ++i) {
    durable_policy_[i] = durable_ != nullptr && policies.policies()[i].durable;
    calendars_ = calendars_ || policies.policies()[i].calendar != nullptr;
  }
  parents_.assign(policies.policies().size(), false);
  leased_.assign(policies.policies().size(), false);
  for (const Policy& p : policies.policies()) {
    if (p.parent_index >= 0) parents_[static_cast<size_t>(p.parent_index)] = true;
    if (p.mode != LeaseMode::kLease) continue;
    for (const Policy* q : policies.Chain(p)) {
      leased_[static_cast<size_t>(q - policies.policies().data())] = true;
    }
  }
  global_.assign(policies.policies().size(), false);
  if (!options_.regions.region.empty()) {
    regions_ = std::make_unique<RegionShares>(policies, options_.regions);
    for (size_t i = 0; i < policies.policies().size(); ++i) {
      global_[i] = policies.policies()[i].scope == Scope::kGlobal;
    }
  }
  sub_rates_.resize(policies.policies().size());
  for (size_t i = 0; i < policies.policies().size(); ++i) {
    if (!Splittable(static_cast<int>(i))) continue;
    for (int index = 0; index < options_.hot.split_k; ++index) {
      sub_rates_[i].push_back(*SubRate(policies.policies()[i], options_.hot.split_k, index));
    }
  }
  // Epochs name a split's sub-buckets, which must start drained: begin from the clock, so a
  // restarted node does not reuse the epochs of its previous life.
  split_epoch_.store(static_cast<uint32_t>(clock.NowMs()));
  last_tick_ms_ = clock.NowMs();
  if (options_.join_gate) {
    // Until Join or OpenGate: another member may hold keys this node owns by its list.
    for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) pending_[slot].store(kAnySource);
    pending_count_.store(static_cast<int64_t>(Ring::kSlots));
    waits_until_ms_ = clock.NowMs() + options_.handoff_deadline_ms;
  }
}

Node::~Node() = default;

std::optional<std::string> Node::SetMembers(std::vector<std::string> members, uint64_t generation) {
  std::lock_guard<std::mutex> change(change_mu_);
  const std::shared_ptr<const Membership> current = membership_.load();
  if (generation <= current->generation) return std::nullopt;  // not newer: keep ours
  auto next = std::make_shared<Membership>(Membership{Ring(std::move(members)), generation});
  const auto& m = next->ring.members();
  if (!next->ring.empty() && std::find(m.begin(), m.end(), options_.self) == m.end()) {
    return "this node (" + options_.self + ") is not in the member list";
  }
  if (leaving_.load()) return std::nullopt;  // it gives every key away whatever the list
  Adopt(nullptr, std::move(next));
  return std::nullopt;
}

std::shared_ptr<const Ring> Node::ring() const {
  std::shared_ptr<const Membership> m = membership_.load();
  return std::shared_ptr<const Ring>(m, &m->ring);
}

Node::Worker& Node::AddWorker() {
  std::lock_guard<std::mutex> guard(workers_mu_);
  workers_.push_back(
      std::make_unique<Worker>(policies_.policies().size(), options_.hot.sketch_capacity));
  return *workers_.back();
}

WorkerCounters& Node::CountersOf(Worker& worker) { return worker.counters; }

void Node::Count(Worker& w, int type, Outcome outcome) {
  w.counters.ops[static_cast<size_t>(type)][outcome].Add();
}

void Node::ErrorFrame(Worker& w, std::string_view error, std::vector<uint8_t>& out) {
  auto& fbb = w.fbb;
  fbb.Clear();
  const auto message = fbb.CreateString(error.data(), error.size());
  wire::ReplyBuilder reply(fbb);
  reply.add_error(message);
  fbb.Finish(reply.Finish());
  AppendFrame(out, {fbb.GetBufferPointer(), fbb.GetSize()});
}

uint32_t Node::FrameLimit(const Session& session) const {
  return session.authenticated ? options_.max_frame_bytes
                               : std::min(options_.max_frame_bytes, kMaxHelloFrameBytes);
}

void Node::HandleFrame(Worker& w, std::span<const uint8_t> body, std::vector<uint8_t>& out) {
  Session trusted;
  trusted.authenticated = true;
  trusted.peer = true;
  trusted.in_process = true;
  HandleFrame(w, trusted, body, out);
  if (const uint64_t seq = TakeSyncNeeded(w); seq != 0) durable_->WaitSynced(seq);
}

uint64_t Node::TakeSyncNeeded(Worker& w) { return std::exchange(w.durable_seq, 0); }

size_t Node::FrameOps(Worker& w) { return w.frame_ops; }

Node::AfterFrame Node::HandleFrame(Worker& w, Session& session, std::span<const uint8_t> body,
                                   std::vector<uint8_t>& out) {
  const auto started = std::chrono::steady_clock::now();
  w.counters.frames.Add();
  w.frame_ops = 0;
  // Odd from here to the end of the frame (every return): see Export.
  struct InFrame {
    std::atomic<uint64_t>& seq;
    explicit InFrame(std::atomic<uint64_t>& s) : seq(s) { seq.fetch_add(1); }
    ~InFrame() { seq.fetch_add(1, std::memory_order_release); }
  } in_frame(w.counters.frame_seq);
  const wire::Request* request = VerifiedRequest(body, w.aligned);
  if (request == nullptr) {
    w.counters.bad_frames[static_cast<size_t>(BadFrame::kInvalid)].Add();
    ErrorFrame(w, "frame is not a valid Request (FlatBuffers verification failed)", out);
    // Before authentication, nothing but a valid hello is worth another chance.
    return session.authenticated ? AfterFrame::kContinue : AfterFrame::kClose;
  }
  if (session.secret_tag != 0 && !SessionValid(session)) {
    // Rotation removed the secret this connection proved: it proves the current one anew.
    w.counters.sessions_revoked.Add();
    ErrorFrame(w, "the secret this connection proved is no longer accepted (it was removed "
                  "from the node's secret file); reconnect with the current one", out);
    return AfterFrame::kClose;
  }
  std::optional<auth::Mac> node_proof;
  if (WantsHandshake(session, *request)) {
    switch (Authenticate(w, session, *request, out, node_proof)) {
      case Gate::kAnswered:
        return AfterFrame::kContinue;
      case Gate::kRefused:
        return AfterFrame::kClose;
      case Gate::kProceed:
        break;
    }
  }
  if (std::optional<std::string> error = FrameBoundError(*request)) {
    w.counters.frames_refused.Add();
    ErrorFrame(w, *error, out);
    return AfterFrame::kClose;
  }
  // Read once per frame, before any key's lock: the algorithms never let a key's time run
  // backwards when another worker has moved it on meanwhile.
  const int64_t now = clock_.NowMs();
  const std::shared_ptr<const Membership> membership = membership_.load();
  auto& fbb = w.fbb;
  fbb.Clear();
  flatbuffers::Offset<wire::HelloReply> hello;
  if (request->hello()) {
    const ReplyFields::Owner ring{
        membership->ring.members(), membership->ring.version(), membership->generation, {}};
    hello = EncodeHelloReply(fbb, options_.name, options_.max_frame_bytes, ring,
                             node_proof ? auth::Bytes(*node_proof) : auth::Bytes());
  }
  w.replies.clear();
  w.peer = request->peer();
  w.session = &session;
  w.ahead = {};
  if (const auto* ops = request->ops()) {
    w.frame_ops = ops->size();
    // Each op's key is worked out, and its slot prefetched, while the op before it runs.
    Ahead next = ops->size() > 0 ? Lookahead(*ops->Get(0)) : Ahead{};
    for (flatbuffers::uoffset_t i = 0; i < ops->size(); ++i) {
      const wire::Op* op = ops->Get(i);
      w.ahead = next;
      next = i + 1 < ops->size() ? Lookahead(*ops->Get(i + 1)) : Ahead{};
      OpResult r;
      w.results.clear();
      HandleOp(w, *op, *membership, now, r);
      w.durable_seq = std::max(w.durable_seq, r.durable_seq);
      EncodeReply(w, *op, *membership, r);
      if (fbb.GetSize() > options_.max_reply_bytes) {
        // What was done stays done (as for a client that drops a reply); the peer asked for
        // more than a reply may hold, and hears why.
        w.counters.frames_refused.Add();
        ErrorFrame(w, "the reply to this frame would exceed " +
                          std::to_string(options_.max_reply_bytes) + " bytes; send fewer ops",
                   out);
        return AfterFrame::kClose;
      }
    }
  }
  w.ahead = {};
  const auto ops = fbb.CreateVector(w.replies);
  wire::ReplyBuilder reply(fbb);
  if (!hello.IsNull()) reply.add_hello(hello);
  reply.add_ops(ops);
  fbb.Finish(reply.Finish());
  AppendFrame(out, {fbb.GetBufferPointer(), fbb.GetSize()});
  w.counters.frame_latency_us.Record(
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::steady_clock::now() - started)
                                .count()));
  return AfterFrame::kContinue;
}

void Node::EncodeReply(Worker& w, const wire::Op& op, const Membership& m, OpResult& r) {
  ReplyFields& f = r.reply;
  f.error = r.error;
  if (f.denied_by >= 0) {
    const int policy = w.entries[static_cast<size_t>(f.denied_by)].policy;
    f.denied_policy = policies_.policies()[static_cast<size_t>(policy)].name;
  }
  f.results = w.results;
  // The rare parts, each only when asked for.
  ReplyFields::State state;
  if (r.inspected) {
    const Entry& e = w.entries.front();
    w.state_fields = e.limiter.Fields();
    state = {AlgorithmName(e.limiter.algorithm()), r.tracked, w.state_fields};
    f.state = &state;
  }
  if (r.with_stats) {
    w.stats = Stats();
    f.stats = &w.stats;
  }
  ReplyFields::Owner owner;
  if (r.wrong_owner) {
    owner = {m.ring.members(), m.ring.version(), m.generation, r.owner};
    f.wrong_owner = &owner;
  } else if (r.members) {
    owner = {r.members->ring.members(), r.members->ring.version(), r.members->generation, {}};
    f.wrong_owner = &owner;
  }
  if (r.with_hot_keys) {
    w.hottest = HotKeys();
    w.hot.clear();
    for (const HotKey& k : w.hottest) {
      const int32_t permille = k.rate > 0 ? static_cast<int32_t>(k.denied * 1000 / k.rate) : 0;
      w.hot.push_back({k.policy, k.key, k.rate, permille, k.split_k});
    }
    f.hot_keys = &w.hot;
  }
  if (r.with_regions) {
    w.regions.clear();
    for (const RegionShares::View& v : w.region_views) {
      w.regions.push_back(
          {v.region, v.share, v.demand, v.report_age_ms, v.link_age_ms, v.pending_share,
           v.link_up});
    }
    f.regions = &w.regions;
  }
  w.replies.push_back(EncodeOpReply(w.fbb, op.id(), f));
}

void Node::HandleOp(Worker& w, const wire::Op& op, const Membership& m, int64_t now, OpResult& r) {
  w.entries.clear();
  const int type = static_cast<int>(op.type());
  switch (op.type()) {
    case wire::OpType::Check: {
      if (!Resolve(w, op, m, /*single=*/false, CostUse::kCharge, now, r)) break;
      Check(w, op.dry_run(), now, r);
      break;
    }
    case wire::OpType::Lease: {
      if (!Resolve(w, op, m, /*single=*/true, CostUse::kUnits, now, r)) break;
      const Policy& p = policies_.policies()[static_cast<size_t>(w.entries.front().policy)];
      if (p.mode == LeaseMode::kStrict) {
        r.Fail(wire::Status::BadRequest,
               "policy '" + p.name + "' is mode: strict; it takes CHECK, not LEASE");
        break;
      }
      Lease(w, op.cost(), now, r);
      break;
    }
    case wire::OpType::Return: {
      if (!Resolve(w, op, m, /*single=*/true, CostUse::kUnits, now, r)) break;
      const Policy& p = policies_.policies()[static_cast<size_t>(w.entries.front().policy)];
      if (p.mode == LeaseMode::kStrict) {
        r.Fail(wire::Status::BadRequest, "policy '" + p.name +
                                             "' is mode: strict; nothing of it is ever leased, "
                                             "so nothing can be returned");
        break;
      }
      if (op.lease_id() == 0) {
        r.Fail(wire::Status::BadRequest,
               "RETURN needs the lease_id of the LEASE its units came from");
        break;
      }
      // On the named limit's clock, as the grant's time was.
      if (op.leased_at_ms() > w.entries.front().now || op.leased_at_ms() < 0) {
        r.Fail(wire::Status::BadRequest, "leased_at_ms " + std::to_string(op.leased_at_ms()) +
                                             " is not a time this node granted a lease");
        break;
      }
      Return(w, op.cost(), op.lease_id(), op.leased_at_ms(), now, r);
      break;
    }
    case wire::OpType::Inspect: {
      if (!Resolve(w, op, m, /*single=*/true, CostUse::kNone, now, r)) break;
      Inspect(w, now, r);
      break;
    }
    case wire::OpType::Stats:
      r.with_stats = true;
      break;
    case wire::OpType::Split: {
      if (!Resolve(w, op, m, /*single=*/true, CostUse::kNone, now, r)) break;
      if (op.cost() < 0 || op.cost() > kMaxCost || w.entries.front().split_k != 0) {
        r.Fail(wire::Status::BadRequest,
               "SPLIT takes the key itself and the ops sent to its sub-buckets, 0 to " +
                   std::to_string(kMaxCost));
        break;
      }
      SplitInfo(w, op.cost(), now, r);
      break;
    }
    case wire::OpType::HotKeys:
      r.with_hot_keys = true;
      break;
    case wire::OpType::Members:
      MembersOp(w, r);
      break;
    case wire::OpType::Handoff:
      HandoffOp(w, now, r);
      break;
    case wire::OpType::Regions:
      RegionsOp(w, op, m, now, r);
      break;
    default:
      r.Fail(wire::Status::BadRequest, "unknown op type " + std::to_string(type));
      Count(w, kOpTypes, kError);
      return;
  }
  if (r.reply.status == wire::Status::Split) {
    w.counters.split_redirects.Add();
  } else if (r.reply.status == wire::Status::SplitChanged) {
    // Not an error: counted in split_changed where Resolve found the view out of date.
  } else if (r.reply.status == wire::Status::Moving) {
    w.counters.moving.Add();
  } else if (r.reply.status != wire::Status::Ok) {
    Count(w, type, kError);
  } else {
    Count(w, type, r.reply.allowed || op.type() >= wire::OpType::Return ? kAllowed : kDenied);
  }
}

Node::Ahead Node::Lookahead(const wire::Op& op) const {
  Ahead a;
  const auto* limits = op.limits();
  if (limits == nullptr || limits->size() == 0 || op.split_k() != 0) return a;
  const wire::Limit* limit = limits->Get(0);
  const auto it = policy_index_.find(limit->policy() ? limit->policy()->string_view() : "");
  if (it == policy_index_.end()) return a;
  const Policy& p = policies_.policies()[static_cast<size_t>(it->second)];
  const std::string_view key = limit->key() ? limit->key()->string_view() : "";
  const std::string_view tenant = op.tenant() ? op.tenant()->string_view() : std::string_view();
  // Nothing is hashed for an op Resolve refuses anyway.
  if (!protocol::KeyInBounds(key) || tenant.size() > kMaxKeyBytes) return a;
  a.op = &op;
  a.policy = it->second;
  a.slot = Ring::SlotOf(protocol::RoutingKey(p, key, tenant));
  a.id = protocol::LimitIdInSlot(p, key, tenant, a.slot);
  store_.Prefetch(a.policy, a.id);
  return a;
}

// Fills w.entries with the op's limits, then their ancestors keyed by the tenant, once each.
bool Node::Resolve(Worker& w, const wire::Op& op, const Membership& m, bool single,
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
  const std::optional<std::string> bad = [&]() -> std::optional<std::string> {
    if (auto e = protocol::TenantError(tenant)) return e;
    if (cost_use == CostUse::kUnits && !operation.empty()) {
      return "operation applies to CHECK only; give units as cost";
    }
    if (auto e = protocol::OperationError(operation)) return e;
    if (cost_use != CostUse::kNone && operation.empty()) {
      if (auto e = protocol::CostError(op.cost())) return e;
    }
    if (split_k != 0) {
      if (auto e = protocol::SplitError(split_k, split_index)) return e;
      if (n != 1) return "an op on a sub-bucket takes exactly one limit";
    }
    return std::nullopt;
  }();
  if (bad) {
    r.Fail(wire::Status::BadRequest, *bad);
    return false;
  }
  // Inlined: called for every limit of every op (GCC leaves it out of line otherwise).
  // A calendar policy's time: the wall clock, read once per op and only for them.
  int64_t wall = INT64_MIN;
  auto add = [&](int policy, const KeyId& id, std::string_view key, bool ancestor)
                 __attribute__((always_inline)) {
    for (const Entry& e : w.entries) {
      if (e.policy == policy && e.id == id) return false;
    }
    Entry& e = w.entries.emplace_back();
    e.policy = policy;
    e.id = id;
    e.key = key;
    e.tenant = tenant;
    e.ancestor = ancestor;
    const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
    e.now = now;
    e.calendar = p.calendar.get();
    if (calendars_ && e.calendar) {
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
      const auto it = policy_index_.find(name);
      if (it == policy_index_.end()) {
        r.Fail(wire::Status::UnknownPolicy, where() + ".policy: no policy named '" +
                                                std::string(name.substr(0, kMaxNameBytes)) + "'");
        return false;
      }
      policy = it->second;
    }
    const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
    const std::string_view key = limit->key() ? limit->key()->string_view() : "";
    if (!protocol::KeyInBounds(key)) {  // the message is made only when it is needed
      r.Fail(wire::Status::BadRequest, *protocol::KeyError(key, where() + ".key"));
      return false;
    }
    if (auto error = protocol::MissingTenantError(p, tenant)) {
      r.Fail(wire::Status::BadRequest, where() + ": " + *error);
      return false;
    }
    // The routing key's ring slot: ownership, and the top bits of the key's id (key_id.h).
    std::string_view routing = protocol::RoutingKey(p, key, tenant);
    uint32_t slot = ahead ? w.ahead.slot : Ring::SlotOf(routing);
    if (!add(policy, ahead ? w.ahead.id : protocol::LimitIdInSlot(p, key, tenant, slot), key,
             false)) {
      r.Fail(wire::Status::BadRequest, where() + " repeats an earlier limit");
      return false;
    }
    if (split_k != 0) {
      const std::vector<Rate>& cached = sub_rates_[static_cast<size_t>(policy)];
      const std::optional<Rate> share =
          split_k == options_.hot.split_k && split_index < cached.size()
              ? std::optional<Rate>(cached[split_index])
              : SubRate(p, split_k, split_index);
      if (cached.empty() || !share) {  // empty: the policy cannot split
        r.Fail(wire::Status::BadRequest, where() + ": policy '" + p.name + "' cannot be split " +
                                             std::to_string(split_k) + " ways");
        return false;
      }
      if (std::optional<SplitRefusal> refused = SplitError(policy, p, key, op, m, now, r)) {
        if (refused->status == wire::Status::SplitChanged) {
          w.counters.split_changed.Add();
        } else {
          w.counters.split_refusals.Add();
        }
        r.Fail(refused->status, where() + ": " + refused->why);
        return false;
      }
      Entry& e = w.entries.back();
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
    if (!ring.empty() && ring.members()[ring.OwnerOfSlot(slot)] != options_.self) {
      r.wrong_owner = true;
      r.owner = ring.members()[ring.OwnerOfSlot(slot)];
      r.Fail(wire::Status::WrongOwner, where() + ": " + options_.self + " does not own '" +
                                           std::string(routing) + "'; " + r.owner + " does (ring " +
                                           std::to_string(ring.version()) + ", generation " +
                                           std::to_string(m.generation) + ")");
      return false;
    }
    if (Waiting(slot)) {
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
    const Policy& p = policies_.policies()[static_cast<size_t>(w.entries[i].policy)];
    for (int a = p.parent_index; a >= 0;
         a = policies_.policies()[static_cast<size_t>(a)].parent_index) {
      const Policy& ancestor = policies_.policies()[static_cast<size_t>(a)];
      if (tenant_slot == UINT32_MAX) tenant_slot = Ring::SlotOf(tenant);
      add(a, protocol::AncestorIdInSlot(ancestor, tenant, tenant_slot), tenant, true);
    }
  }
  if (regions_ && op.type() != wire::OpType::Regions) {
    // The units asked for are the key's demand in this region, allowed or not.
    for (Entry& e : w.entries) {
      if (!global_[static_cast<size_t>(e.policy)]) continue;
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

size_t Node::Sweep(size_t share) {
  return store_.Sweep(clock_.NowMs(), options_.sweep_budget, share);
}

}  // namespace limiter
