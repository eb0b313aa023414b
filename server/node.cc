#include "server/node.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <fstream>
#include <unistd.h>

#include "common/hot_key_sketch.h"
#include "common/limits.h"
#include "common/wire.h"
#include "server/node_internal.h"
#include "server/sub_bucket.h"

namespace limiter {

namespace {

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

constexpr auto kOpNames = std::to_array<std::string_view>(
    {"check", "lease", "return", "inspect", "stats", "split", "hot_keys", "unknown"});
static_assert(kOpNames.size() == kOpTypes + 1, "a name for every op type");
constexpr std::array<std::string_view, 3> kOutcomeNames = {"allowed", "denied", "error"};
constexpr std::array<std::string_view, kBadFrameKinds> kBadFrameNames = {"too_large", "empty",
                                                                        "invalid", "truncated"};

}  // namespace

std::string_view OpTypeName(int type) {
  return kOpNames[static_cast<size_t>(std::clamp(type, 0, kOpTypes))];
}

Node::Node(const PolicySet& policies, const Clock& clock, NodeOptions options)
    : policies_(policies),
      clock_(clock),
      options_(std::move(options)),
      store_(policies, options_.store),
      started_ms_(clock.NowMs()) {
  for (size_t i = 0; i < policies.policies().size(); ++i) {
    policy_index_.emplace(policies.policies()[i].name, static_cast<int>(i));
  }
  ring_.store(std::make_shared<const Ring>(options_.members));
  parents_.assign(policies.policies().size(), false);
  for (const Policy& p : policies.policies()) {
    if (p.parent_index >= 0) parents_[static_cast<size_t>(p.parent_index)] = true;
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
}

std::optional<std::string> Node::SetMembers(std::vector<std::string> members) {
  auto ring = std::make_shared<const Ring>(std::move(members));
  const auto& m = ring->members();
  if (!ring->empty() && std::find(m.begin(), m.end(), options_.self) == m.end()) {
    return "this node (" + options_.self + ") is not in the member list";
  }
  ring_.store(std::move(ring));
  return std::nullopt;
}

Node::~Node() = default;

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

void Node::HandleFrame(Worker& w, std::span<const uint8_t> body, std::vector<uint8_t>& out) {
  const auto started = std::chrono::steady_clock::now();
  w.counters.frames.Add();
  const wire::Request* request = VerifiedRequest(body, w.aligned);
  if (request == nullptr) {
    w.counters.bad_frames[static_cast<size_t>(BadFrame::kInvalid)].Add();
    ErrorFrame(w, "frame is not a valid Request (FlatBuffers verification failed)", out);
    return;
  }
  const int64_t now = clock_.NowMs();
  const std::shared_ptr<const Ring> ring = ring_.load();
  auto& fbb = w.fbb;
  fbb.Clear();
  auto members = [&] {
    std::vector<flatbuffers::Offset<flatbuffers::String>> list;
    for (const std::string& m : ring->members()) list.push_back(fbb.CreateString(m));
    return fbb.CreateVector(list);
  };
  flatbuffers::Offset<wire::HelloReply> hello;
  if (request->hello()) {
    const auto name = fbb.CreateString(options_.name);
    const auto list = members();
    hello = wire::CreateHelloReply(fbb, kProtocolVersion, ring->version(), name,
                                   options_.max_frame_bytes, list);
  }
  w.replies.clear();
  if (const auto* ops = request->ops()) {
    for (const wire::Op* op : *ops) {
      OpResult r;
      w.results.clear();
      HandleOp(w, *op, *ring, now, r);
      const auto error = r.error.empty() ? 0 : fbb.CreateString(r.error);
      const auto denied_policy =
          r.denied_by >= 0
              ? fbb.CreateString(
                    policies_.policies()[static_cast<size_t>(w.entries[static_cast<size_t>(r.denied_by)].policy)].name)
              : 0;
      const auto results = w.results.empty() ? 0 : fbb.CreateVectorOfStructs(w.results);
      flatbuffers::Offset<wire::KeyState> state;
      if (r.inspected) {
        const Entry& e = w.entries.front();
        std::vector<flatbuffers::Offset<wire::Stat>> fields;
        for (const auto& [name, value] : e.limiter.Fields()) {
          fields.push_back(wire::CreateStat(fbb, fbb.CreateString(name.data(), name.size()), value));
        }
        state = wire::CreateKeyState(
            fbb, fbb.CreateString(std::string(AlgorithmName(e.limiter.algorithm()))), r.tracked,
            fbb.CreateVector(fields));
      }
      flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> owners;
      if (r.wrong_owner) owners = members();
      flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::HotKey>>> hot;
      if (r.with_hot_keys) {
        std::vector<flatbuffers::Offset<wire::HotKey>> list;
        for (const HotKey& k : HotKeys()) {
          const int32_t permille = k.rate > 0 ? static_cast<int32_t>(k.denied * 1000 / k.rate) : 0;
          list.push_back(wire::CreateHotKey(fbb, fbb.CreateString(k.policy),
                                            fbb.CreateString(k.key), k.rate, permille, k.split_k));
        }
        hot = fbb.CreateVector(list);
      }
      flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::Stat>>> stats;
      if (r.with_stats) {
        std::vector<flatbuffers::Offset<wire::Stat>> list;
        for (const auto& [name, value] : Stats()) {
          list.push_back(wire::CreateStat(fbb, fbb.CreateString(name), value));
        }
        stats = fbb.CreateVector(list);
      }
      wire::OpReplyBuilder b(fbb);
      b.add_id(op->id());
      b.add_status(r.status);
      if (!error.IsNull()) b.add_error(error);
      b.add_allowed(r.allowed);
      b.add_retry_after_ms(r.retry_after_ms);
      b.add_denied_by(r.denied_by);
      if (!denied_policy.IsNull()) b.add_denied_policy(denied_policy);
      if (!results.IsNull()) b.add_results(results);
      b.add_granted(r.granted);
      b.add_granted_at_ms(r.granted_at_ms);
      b.add_lease_ttl_ms(r.lease_ttl_ms);
      b.add_suggested_lease(r.suggested_lease);
      if (!state.IsNull()) b.add_state(state);
      if (!stats.IsNull()) b.add_stats(stats);
      if (r.wrong_owner) {
        b.add_ring_version(ring->version());
        b.add_members(owners);
      }
      if (r.split_k != 0) {
        b.add_split_k(r.split_k);
        b.add_split_epoch(r.split_epoch);
        b.add_split_valid_ms(r.split_valid_ms);
      }
      if (!hot.IsNull()) b.add_hot_keys(hot);
      w.replies.push_back(b.Finish());
    }
  }
  const auto ops = fbb.CreateVector(w.replies);
  wire::ReplyBuilder reply(fbb);
  if (!hello.IsNull()) reply.add_hello(hello);
  reply.add_ops(ops);
  fbb.Finish(reply.Finish());
  AppendFrame(out, {fbb.GetBufferPointer(), fbb.GetSize()});
  w.counters.frame_latency_us.Record(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                            started)
          .count()));
}

void Node::HandleOp(Worker& w, const wire::Op& op, const Ring& ring, int64_t now,
                    OpResult& r) {
  w.entries.clear();
  const int type = static_cast<int>(op.type());
  switch (op.type()) {
    case wire::OpType::Check: {
      if (!Resolve(w, op, ring, /*single=*/false, CostUse::kCharge, r)) break;
      Check(w, op.dry_run(), now, r);
      break;
    }
    case wire::OpType::Lease: {
      if (!Resolve(w, op, ring, /*single=*/true, CostUse::kUnits, r)) break;
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
      if (!Resolve(w, op, ring, /*single=*/true, CostUse::kUnits, r)) break;
      if (op.leased_at_ms() > now || op.leased_at_ms() < 0) {
        r.Fail(wire::Status::BadRequest, "leased_at_ms " + std::to_string(op.leased_at_ms()) +
                                             " is not a time this node granted a lease");
        break;
      }
      Return(w, op.cost(), op.leased_at_ms(), now, r);
      break;
    }
    case wire::OpType::Inspect: {
      if (!Resolve(w, op, ring, /*single=*/true, CostUse::kNone, r)) break;
      Inspect(w, now, r);
      break;
    }
    case wire::OpType::Stats:
      r.with_stats = true;
      break;
    case wire::OpType::Split: {
      if (!Resolve(w, op, ring, /*single=*/true, CostUse::kNone, r)) break;
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
    default:
      r.Fail(wire::Status::BadRequest, "unknown op type " + std::to_string(type));
      Count(w, kOpTypes, kError);
      return;
  }
  if (r.status == wire::Status::Split) {
    w.counters.split_redirects.Add();
  } else if (r.status != wire::Status::Ok) {
    Count(w, type, kError);
  } else {
    Count(w, type, r.allowed || op.type() >= wire::OpType::Return ? kAllowed : kDenied);
  }
}

// Fills w.entries with the op's limits, then their ancestors keyed by the tenant, once each.
bool Node::Resolve(Worker& w, const wire::Op& op, const Ring& ring, bool single,
                   CostUse cost_use, OpResult& r) {
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
    r.Fail(wire::Status::BadRequest, "the op names " + std::to_string(n) +
                                         " limits; at most " +
                                         std::to_string(kMaxLimitsPerCheck) + " are allowed");
    return false;
  }
  const std::string_view tenant = op.tenant() ? op.tenant()->string_view() : std::string_view();
  if (tenant.size() > kMaxKeyBytes) {
    r.Fail(wire::Status::BadRequest,
           "tenant is longer than " + std::to_string(kMaxKeyBytes) + " bytes");
    return false;
  }
  const std::string_view operation =
      op.operation() ? op.operation()->string_view() : std::string_view();
  if (cost_use == CostUse::kUnits && !operation.empty()) {
    r.Fail(wire::Status::BadRequest, "operation applies to CHECK only; give units as cost");
    return false;
  }
  if (operation.size() > kMaxNameBytes) {
    r.Fail(wire::Status::BadRequest,
           "operation is longer than " + std::to_string(kMaxNameBytes) + " bytes");
    return false;
  }
  if (cost_use != CostUse::kNone && operation.empty() && (op.cost() < 1 || op.cost() > kMaxCost)) {
    r.Fail(wire::Status::BadRequest, "cost must be between 1 and " + std::to_string(kMaxCost) +
                                         ", got " + std::to_string(op.cost()));
    return false;
  }
  const uint16_t split_k = op.split_k();
  const uint16_t split_index = op.split_index();
  if (split_k != 0) {
    if (n != 1) {
      r.Fail(wire::Status::BadRequest, "an op on a sub-bucket takes exactly one limit");
      return false;
    }
    if (split_k < 2 || split_k > 64 || (split_k & (split_k - 1)) != 0) {
      r.Fail(wire::Status::BadRequest,
             "split_k must be a power of two from 2 to 64, got " + std::to_string(split_k));
      return false;
    }
    if (split_index >= split_k) {
      r.Fail(wire::Status::BadRequest, "split_index " + std::to_string(split_index) +
                                           " is not below split_k " + std::to_string(split_k));
      return false;
    }
  }
  auto add = [&](int policy, std::string_view key) {
    const KeyId id = Store::Id(policies_.policies()[static_cast<size_t>(policy)].name, key);
    for (const Entry& e : w.entries) {
      if (e.policy == policy && e.id == id) return false;
    }
    Entry& e = w.entries.emplace_back();
    e.policy = policy;
    e.id = id;
    e.key = key;
    const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
    e.rate = p.rate;
    e.cost = operation.empty() ? op.cost() : p.CostOf(operation);
    return true;
  };
  for (size_t i = 0; i < n; ++i) {
    const wire::Limit* limit = limits->Get(static_cast<flatbuffers::uoffset_t>(i));
    const auto where = [i] { return "limits[" + std::to_string(i) + "]"; };  // errors only
    const std::string_view name = limit->policy() ? limit->policy()->string_view() : "";
    const auto it = policy_index_.find(name);
    if (it == policy_index_.end()) {
      r.Fail(wire::Status::UnknownPolicy, where() + ".policy: no policy named '" +
                                              std::string(name.substr(0, kMaxNameBytes)) + "'");
      return false;
    }
    const std::string_view key = limit->key() ? limit->key()->string_view() : "";
    if (key.empty()) {
      r.Fail(wire::Status::BadRequest, where() + ".key is empty");
      return false;
    }
    if (key.size() > kMaxKeyBytes) {
      r.Fail(wire::Status::BadRequest, where() + ".key is " + std::to_string(key.size()) +
                                           " bytes; at most " + std::to_string(kMaxKeyBytes) +
                                           " are allowed");
      return false;
    }
    if (!add(it->second, key)) {
      r.Fail(wire::Status::BadRequest, where() + " repeats an earlier limit");
      return false;
    }
    // The routing key: the tenant when the policy nests under one, else the key; a
    // sub-bucket's is "key#i".
    const bool nested = policies_.policies()[static_cast<size_t>(it->second)].parent_index >= 0;
    std::string_view routing = nested && !tenant.empty() ? tenant : key;
    if (split_k != 0) {
      const Policy& p = policies_.policies()[static_cast<size_t>(it->second)];
      const std::vector<Rate>& cached = sub_rates_[static_cast<size_t>(it->second)];
      const std::optional<Rate> share =
          split_k == options_.hot.split_k && split_index < cached.size()
              ? std::optional<Rate>(cached[split_index])
              : SubRate(p, split_k, split_index);
      if (cached.empty() || !share) {  // empty: the policy cannot split
        r.Fail(wire::Status::BadRequest, where() + ": policy '" + p.name +
                                             "' cannot be split " + std::to_string(split_k) +
                                             " ways");
        return false;
      }
      Entry& e = w.entries.back();
      e.rate = *share;
      e.split_k = split_k;
      e.split_index = split_index;
      char epoch[16], index[8];
      const auto epoch_end = std::to_chars(epoch, epoch + sizeof(epoch), op.split_epoch()).ptr;
      const auto index_end = std::to_chars(index, index + sizeof(index), split_index).ptr;
      e.id = MakeKeyId({p.name, key, std::string_view(epoch, epoch_end - epoch),
                        std::string_view(index, index_end - index)});
      w.routing.assign(key);
      w.routing += '#';
      w.routing.append(index, index_end);
      routing = w.routing;
    }
    if (!ring.empty() && ring.Owner(routing) != options_.self) {
      r.wrong_owner = true;
      r.Fail(wire::Status::WrongOwner, where() + ": " + options_.self + " does not own '" +
                                           std::string(routing) + "'; " + ring.Owner(routing) +
                                           " does (ring " + std::to_string(ring.version()) + ")");
      return false;
    }
  }
  w.own_limits = n;
  // INSPECT looks at the named key alone; everything else charges its ancestors too.
  for (size_t i = 0; i < n && cost_use != CostUse::kNone; ++i) {
    const Policy& p = policies_.policies()[static_cast<size_t>(w.entries[i].policy)];
    for (int a = p.parent_index; a >= 0; a = policies_.policies()[static_cast<size_t>(a)].parent_index) {
      if (tenant.empty()) {
        r.Fail(wire::Status::BadRequest, "limits[" + std::to_string(i) + "]: policy '" + p.name +
                                             "' nests under '" + p.parent +
                                             "'; the op needs a tenant");
        return false;
      }
      add(a, tenant);
    }
  }
  return true;
}

bool Node::Save(Worker& w, const Store::StripeLock& lock, int64_t now) {
  auto new_keys = [&] {
    int64_t n = 0;
    for (const Entry& e : w.entries) n += e.slot == nullptr;
    return n;
  };
  if (const int64_t fresh = new_keys(); fresh > 0 && !store_.TryReserve(fresh)) {
    // At the bound: expired keys go first. Reclaiming moves slots, and may take this op's
    // own keys if they had expired, so find them again and count anew.
    store_.ReclaimLocked(lock, now, options_.sweep_budget);
    for (Entry& e : w.entries) e.slot = store_.Find(e.policy, e.id);
    if (!store_.TryReserve(new_keys())) {
      w.counters.refusals.Add();
      return false;
    }
  }
  // Existing keys first: an insert may move every slot of its table.
  for (Entry& e : w.entries) {
    if (e.slot) store_.Pack(e.policy, std::move(e.limiter), e.slot);
  }
  for (Entry& e : w.entries) {
    if (!e.slot) store_.Pack(e.policy, std::move(e.limiter), store_.Insert(e.policy, e.id));
  }
  return true;
}

// The stripes of the op's entries, sorted and once each: the order to lock them in.
void Node::CollectStripes(Worker& w) {
  w.stripes.clear();
  for (const Entry& e : w.entries) w.stripes.push_back(store_.StripeOf(e.id));
  std::sort(w.stripes.begin(), w.stripes.end());
  w.stripes.erase(std::unique(w.stripes.begin(), w.stripes.end()), w.stripes.end());
}

// With the entries' stripes locked: each entry's slot and state. A sub-bucket not yet made
// starts drained: a split hands out no allowance the key had not already.
void Node::Load(Worker& w, int64_t now) {
  w.made_drained = false;
  for (Entry& e : w.entries) {
    e.slot = store_.Find(e.policy, e.id);
    e.limiter = store_.Unpack(e.policy, e.slot);
    if (e.slot == nullptr && e.split_k != 0) {
      e.limiter.Decide(e.rate, now, FullAllowance(e.limiter.algorithm(), e.rate));
      w.made_drained = true;  // must be kept, allowed or not: a fresh state is full
    }
  }
}

void Node::Check(Worker& w, bool dry_run, int64_t now, OpResult& r) {
  auto& entries = w.entries;
  CollectStripes(w);
  bool charged = false;
  {
    Store::StripeLock lock(store_, w.stripes);
    if (RedirectToSplit(w, now, r)) return;
    Load(w, now);
    bool all = true;
    if (entries.size() == 1 && !dry_run) {
      // One limit: decide in place; a denial changes nothing worth saving.
      Entry& e = entries.front();
      e.decision = e.limiter.Decide(e.rate, now, e.cost);
      all = e.decision.allowed;
    } else {
      for (Entry& e : entries) {
        e.decision = e.limiter.Peek(e.rate, now, e.cost);
        all = all && e.decision.allowed;
      }
      if (all && !dry_run) {
        for (Entry& e : entries) e.decision = e.limiter.Decide(e.rate, now, e.cost);
      }
    }
    if ((all && !dry_run) || w.made_drained) {
      if (!Save(w, lock, now)) {
        r.Fail(wire::Status::KeysExhausted,
               "the node holds its maximum of " + std::to_string(store_.max_keys()) +
                   " keys; new keys are refused");
        return;
      }
      charged = all && !dry_run;
    }
    r.allowed = all;
  }
  Record(w, !r.allowed);
  for (size_t i = 0; i < entries.size(); ++i) {
    Decision d = entries[i].decision;
    // Nothing was charged: a limit that passed still has its whole remaining.
    if (d.allowed && !charged) d.remaining += entries[i].cost;
    w.results.emplace_back(d.remaining, d.retry_after_ms, d.reset_after_ms, d.allowed);
    w.counters.decisions[static_cast<size_t>(entries[i].policy)][d.allowed ? 0 : 1].Add();
    if (!d.allowed) {
      if (r.denied_by < 0) r.denied_by = static_cast<int>(i);
      r.retry_after_ms = std::max(r.retry_after_ms, d.retry_after_ms);
    }
  }
}

void Node::Lease(Worker& w, int64_t units, int64_t now, OpResult& r) {
  auto& entries = w.entries;
  CollectStripes(w);
  const Policy& leaf = policies_.policies()[static_cast<size_t>(entries.front().policy)];
  {
    Store::StripeLock lock(store_, w.stripes);
    if (RedirectToSplit(w, now, r)) return;
    Load(w, now);
    int64_t grant = units;
    for (Entry& e : entries) grant = std::min(grant, e.limiter.Available(e.rate, now));
    for (Entry& e : entries) {
      e.decision = grant > 0 ? e.limiter.Decide(e.rate, now, grant) : e.limiter.Peek(e.rate, now, 1);
      if (grant < units) {
        // When the rest of the request could be had: the longest wait over the chain.
        Decision rest = e.limiter.Peek(e.rate, now, units - grant);
        if (rest.retry_after_ms == kNever) rest = e.limiter.Peek(e.rate, now, 1);
        r.retry_after_ms = std::max(r.retry_after_ms, rest.retry_after_ms);
      }
    }
    if ((grant > 0 || w.made_drained) && !Save(w, lock, now)) {
      r.Fail(wire::Status::KeysExhausted,
             "the node holds its maximum of " + std::to_string(store_.max_keys()) +
                 " keys; new keys are refused");
      return;
    }
    r.granted = grant;
    r.allowed = grant > 0;
  }
  Record(w, !r.allowed);
  r.granted_at_ms = now;
  r.lease_ttl_ms = leaf.lease.ttl_ms;
  r.suggested_lease = leaf.LeaseSize();
  for (size_t i = 0; i < entries.size(); ++i) {
    const Decision& d = entries[i].decision;
    w.results.emplace_back(d.remaining, d.retry_after_ms, d.reset_after_ms, d.allowed);
    w.counters.decisions[static_cast<size_t>(entries[i].policy)][d.allowed ? 0 : 1].Add();
    if (!d.allowed && r.denied_by < 0) r.denied_by = static_cast<int>(i);
  }
}

void Node::Return(Worker& w, int64_t units, int64_t leased_at, int64_t now, OpResult& r) {
  for (Entry& e : w.entries) {
    const size_t stripe = store_.StripeOf(e.id);
    Store::StripeLock lock(store_, {&stripe, 1});
    Slot* slot = store_.Find(e.policy, e.id);
    if (slot == nullptr) continue;  // fresh already: nothing to give back to
    KeyLimiter limiter = store_.Unpack(e.policy, slot);
    limiter.Return(e.rate, now, units, leased_at);
    if (limiter.IsFresh(e.rate, now) && store_.FindSplit(e.id) == nullptr) {
      store_.Erase(e.policy, e.id);
    } else {
      store_.Pack(e.policy, std::move(limiter), slot);
    }
  }
  r.allowed = true;
}

void Node::Inspect(Worker& w, int64_t now, OpResult& r) {
  Entry& e = w.entries.front();
  const size_t stripe = store_.StripeOf(e.id);
  {
    Store::StripeLock lock(store_, {&stripe, 1});
    e.slot = store_.Find(e.policy, e.id);
    e.limiter = store_.Unpack(e.policy, e.slot);
    if (const Store::Split* split = store_.FindSplit(e.id)) {
      r.split_k = split->k;
      r.split_epoch = split->epoch;
      r.split_valid_ms = std::max<int64_t>(0, split->valid_until_ms - now);
    }
  }
  r.inspected = true;
  r.tracked = e.slot != nullptr;
  const Decision d = e.limiter.Peek(e.rate, now, 1);
  r.allowed = d.allowed;
  r.retry_after_ms = d.retry_after_ms;
  w.results.emplace_back(d.allowed ? d.remaining + 1 : d.remaining, d.retry_after_ms,
                         d.reset_after_ms, d.allowed);
}

size_t Node::Sweep() { return store_.Sweep(clock_.NowMs(), options_.sweep_budget); }

std::vector<std::pair<std::string, int64_t>> Node::Stats() {
  std::array<std::array<uint64_t, 3>, kOpTypes + 1> ops{};
  std::array<uint64_t, kBadFrameKinds> bad{};
  uint64_t refusals = 0, frames = 0, opened = 0, closed = 0, redirects = 0;
  {
    std::lock_guard<std::mutex> guard(workers_mu_);
    for (const auto& w : workers_) {
      const WorkerCounters& c = w->counters;
      for (size_t t = 0; t < ops.size(); ++t) {
        for (size_t o = 0; o < 3; ++o) ops[t][o] += c.ops[t][o].Get();
      }
      for (size_t b = 0; b < bad.size(); ++b) bad[b] += c.bad_frames[b].Get();
      refusals += c.refusals.Get();
      redirects += c.split_redirects.Get();
      frames += c.frames.Get();
      opened += c.connections_opened.Get();
      closed += c.connections_closed.Get();
    }
  }
  std::vector<std::pair<std::string, int64_t>> out;
  for (size_t t = 0; t < ops.size(); ++t) {
    for (size_t o = 0; o < 3; ++o) {
      if (ops[t][o] == 0) continue;
      const bool decides = t <= 1;  // check, lease
      const std::string_view outcome = !decides && o == kAllowed ? "ok" : kOutcomeNames[o];
      out.emplace_back("ops_" + std::string(kOpNames[t]) + "_" + std::string(outcome),
                       static_cast<int64_t>(ops[t][o]));
    }
  }
  out.emplace_back("keys", store_.keys());
  out.emplace_back("max_keys", store_.max_keys());
  out.emplace_back("evictions", store_.evictions());
  out.emplace_back("refusals", static_cast<int64_t>(refusals));
  out.emplace_back("split_redirects", static_cast<int64_t>(redirects));
  out.emplace_back("splits", store_.split_count());
  uint64_t bad_total = 0;
  for (size_t b = 0; b < bad.size(); ++b) {
    bad_total += bad[b];
    out.emplace_back("bad_frames_" + std::string(kBadFrameNames[b]), static_cast<int64_t>(bad[b]));
  }
  out.emplace_back("bad_frames", static_cast<int64_t>(bad_total));
  out.emplace_back("frames", static_cast<int64_t>(frames));
  out.emplace_back("connections_open", static_cast<int64_t>(opened - closed));
  out.emplace_back("connections_total", static_cast<int64_t>(opened));
  out.emplace_back("resident_bytes", ResidentBytes());
  out.emplace_back("uptime_ms", clock_.NowMs() - started_ms_);
  return out;
}

}  // namespace limiter
