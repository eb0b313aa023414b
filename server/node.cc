// Node: frames in, replies out. Verifying a frame, dispatching its ops and encoding their
// replies; resolving an op's limits is in node_resolve.cc, what each op does to the store in
// node_ops.cc, the node-to-node ops in node_peer_ops.cc.
#include "server/node.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "common/limits.h"
#include "common/mutex.h"
#include "protocol/reply_encoding.h"
#include "protocol/wire.h"
#include "server/durable_store.h"
#include "server/node_internal.h"

namespace limiter {

namespace {

uint64_t RandomLeaseIdStart() {
  std::random_device rd;
  // The top bit clear: ids never wrap within a node's life.
  return ((uint64_t{rd()} << 32) | rd()) >> 1 | 1;
}

}  // namespace

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
      table_(policies, durable != nullptr, !options_.regions.region.empty()),
      store_(policies, StoreOptions(options_, clock)),
      durable_(std::move(durable)),
      regions_(options_.regions.region.empty()
                   ? nullptr
                   : std::make_unique<RegionShares>(policies, options_.regions)),
      auth_({options_.name, options_.max_frame_bytes, options_.secrets, options_.peer_secrets,
             options_.peer_tls, options_.clock_skew_ms}),
      ownership_(clock, {options_.self, options_.handoff_deadline_ms, options_.join_gate},
                 options_.members, options_.generation),
      handoff_(table_, clock, store_, durable_.get(), regions_.get(), ownership_,
               {options_.self, options_.max_frame_bytes, options_.handoff_deadline_ms},
               [this](std::chrono::steady_clock::time_point deadline) { WaitForFrames(deadline); }),
      hot_keys_(table_, clock, store_, auth_, options_.hot),
      metrics_({table_, clock, store_, ownership_, handoff_, durable_.get(), regions_.get(),
                [this](const std::function<void(const WorkerCounters&)>& visit) {
                  MutexLock guard(workers_mu_);
                  for (const auto& w : workers_) visit(w->counters);
                }}),
      tx_stores_{store_, durable_.get(), table_, regions_.get(), options_.sweep_budget},
      next_lease_id_(options_.lease_id_start != 0 ? options_.lease_id_start
                                                  : RandomLeaseIdStart()) {}

Node::~Node() = default;

Node::Worker& Node::AddWorker() {
  MutexLock guard(workers_mu_);
  workers_.push_back(std::make_unique<Worker>(table_.size(), hot_keys_.AddSampler()));
  return *workers_.back();
}

WorkerCounters& Node::CountersOf(Worker& worker) { return worker.counters; }

void Node::WaitForFrames(std::chrono::steady_clock::time_point deadline) {
  std::vector<std::pair<std::atomic<uint64_t>*, uint64_t>> busy;
  {
    MutexLock lock(workers_mu_);
    for (const auto& w : workers_) {
      const uint64_t seq = w->counters.frame_seq.load(std::memory_order_acquire);
      if (seq % 2 == 1) busy.emplace_back(&w->counters.frame_seq, seq);
    }
  }
  for (auto& [seq, seen] : busy) {
    while (seq->load(std::memory_order_acquire) == seen &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

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
  if (session.secret_tag != 0 && !auth_.SessionValid(session)) {
    // Rotation removed the secret this connection proved: it proves the current one anew.
    w.counters.sessions_revoked.Add();
    ErrorFrame(w,
               "the secret this connection proved is no longer accepted (it was removed "
               "from the node's secret file); reconnect with the current one",
               out);
    return AfterFrame::kClose;
  }
  std::optional<auth::Mac> node_proof;
  if (auth_.WantsHandshake(session, *request)) {
    Result<Authenticator::Step> step = auth_.Authenticate(session, *request, out, node_proof);
    if (!step) {
      w.counters.auth_failures.Add();
      ErrorFrame(w, step.error(), out);
      return AfterFrame::kClose;
    }
    if (*step == Authenticator::Step::kAnswered) return AfterFrame::kContinue;
  }
  if (Status bounds = FrameBounds(*request); !bounds.ok()) {
    w.counters.frames_refused.Add();
    ErrorFrame(w, bounds.error(), out);
    return AfterFrame::kClose;
  }
  // Read once per frame, before any key's lock: the algorithms never let a key's time run
  // backwards when another worker has moved it on meanwhile.
  const int64_t now = clock_.NowMs();
  const std::shared_ptr<const ClusterRing> membership = ownership_.current();
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
  w.last_policy = -1;  // its name pointed into the last frame
  w.peer = request->peer();
  w.session = &session;
  w.ahead = {};
  if (const auto* ops = request->ops()) {
    w.frame_ops = ops->size();
    // Each op's key is worked out, and its slot prefetched, while the op before it runs.
    Ahead next = ops->size() > 0 ? Lookahead(w, *ops->Get(0)) : Ahead{};
    for (flatbuffers::uoffset_t i = 0; i < ops->size(); ++i) {
      const wire::Op* op = ops->Get(i);
      w.ahead = next;
      next = i + 1 < ops->size() ? Lookahead(w, *ops->Get(i + 1)) : Ahead{};
      OpResult r;
      w.results.clear();
      HandleOp(w, *op, *membership, now, r);
      w.durable_seq = std::max(w.durable_seq, r.durable_seq);
      EncodeReply(w, *op, *membership, r);
      if (fbb.GetSize() > options_.max_reply_bytes) {
        // What was done stays done (as for a client that drops a reply); the peer asked for
        // more than a reply may hold, and hears why.
        w.counters.frames_refused.Add();
        ErrorFrame(w,
                   "the reply to this frame would exceed " +
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

void Node::EncodeReply(Worker& w, const wire::Op& op, const ClusterRing& m, OpResult& r) {
  ReplyFields& f = r.reply;
  f.error = r.error;
  if (f.denied_by >= 0) {
    const int policy = w.entries[static_cast<size_t>(f.denied_by)].policy;
    f.denied_policy = table_.at(policy).name;
  }
  f.results = w.results;
  // The rare parts, each only when asked for.
  ReplyFields::State state;
  if (r.inspected) {
    const LimitEntry& e = w.entries.front();
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
    w.hottest = hot_keys_.Top();
    w.hot.clear();
    for (const HotKeys::HotKey& k : w.hottest) {
      const int32_t permille = k.rate > 0 ? static_cast<int32_t>(k.denied * 1000 / k.rate) : 0;
      w.hot.push_back({k.policy, k.key, k.rate, permille, k.split_k});
    }
    f.hot_keys = &w.hot;
  }
  if (r.with_regions) {
    w.regions.clear();
    for (const RegionShares::View& v : w.region_views) {
      w.regions.push_back({v.region, v.share, v.demand, v.report_age_ms, v.link_age_ms,
                           v.pending_share, v.link_up});
    }
    f.regions = &w.regions;
  }
  w.replies.push_back(EncodeOpReply(w.fbb, op.id(), f));
}

void Node::HandleOp(Worker& w, const wire::Op& op, const ClusterRing& m, int64_t now, OpResult& r) {
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
      const Policy& p = table_.at(w.entries.front().policy);
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
      const Policy& p = table_.at(w.entries.front().policy);
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
      Return(w, op.cost(), op.lease_id(), op.leased_at_ms(), r);
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
      SplitOp(w, op.cost(), now, r);
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

size_t Node::Sweep(size_t share) {
  return store_.Sweep(clock_.NowMs(), options_.sweep_budget, share);
}

void Node::Tick() {
  ownership_.ExpireWaits(clock_.NowMs());
  hot_keys_.Tick();
}

Status Node::MayActAsPeer(Worker& w, std::string_view what, const std::string* member) {
  Status allowed = auth_.MayActAsPeer(w.session, what, member);
  if (!allowed.ok()) w.counters.peer_refusals.Add();
  return allowed;
}

Status Node::FrameBounds(const wire::Request& request) const {
  const auto* ops = request.ops();
  if (ops == nullptr) return Status::Ok();
  if (ops->size() > options_.max_ops_per_frame) {
    return Error{"the frame has " + std::to_string(ops->size()) + " ops; at most " +
                 std::to_string(options_.max_ops_per_frame) + " are allowed per frame"};
  }
  uint32_t stats = 0, hot = 0, inspects = 0;
  for (const wire::Op* op : *ops) {
    stats += op->type() == wire::OpType::Stats;
    hot += op->type() == wire::OpType::HotKeys;
    // A question about region shares costs what an INSPECT does.
    inspects += op->type() == wire::OpType::Inspect || op->type() == wire::OpType::Regions;
  }
  if (stats > 1) {
    return Error{"the frame asks for STATS " + std::to_string(stats) + " times; once at most"};
  }
  if (hot > 1) {
    return Error{"the frame asks for HOTKEYS " + std::to_string(hot) + " times; once at most"};
  }
  if (inspects > options_.max_inspects_per_frame) {
    return Error{"the frame has " + std::to_string(inspects) +
                 " INSPECT (or REGIONS) ops; at most " +
                 std::to_string(options_.max_inspects_per_frame) + " are allowed per frame"};
  }
  return Status::Ok();
}

}  // namespace limiter
