#include "sim/network.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <set>

#include "protocol/frame_codec.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"

namespace limiter::sim {

NetworkModel NetworkModel::Instant() {
  NetworkModel m;
  m.one_way_sigma = 0;  // every delay the median, 100 us
  m.queue = false;
  m.max_ops_per_frame = 1;
  return m;
}

struct SimNetwork::Pending {
  uint64_t id = 0;
  OpSpec op;
  Transport::Callback done;
};

struct SimNetwork::SimNode {
  Endpoint endpoint;
  std::unique_ptr<Node> owned;  // null: the caller's
  bool up = true;
  uint64_t life = 0;  // bumped by Kill and Restart: frames sent before are answered with a reset
  std::multiset<double> slow;        // the slowdowns in force
  std::vector<int64_t> free_at_us;   // per worker
  std::deque<int64_t> queued_until;  // service starts of frames waiting now (they only grow)
  NodeLoad load;
};

// One gateway's connections: ops sent in one instant share a frame per node.
class SimNetwork::GatewayTransport final : public Transport {
 public:
  GatewayTransport(SimNetwork& net, int gateway) : net_(net), gateway_(gateway) {}

  // The op joins the node's next frame, which leaves when full or at the end of this instant.
  void Send(const std::string& address, OpSpec op, Callback done) override {
    const std::optional<size_t> node = net_.Accept(address, op, done);
    if (!node) return;
    std::vector<Pending>& batch = batches_[*node];
    batch.push_back({next_id_++, std::move(op), std::move(done)});
    if (batch.size() >= net_.model_.max_ops_per_frame) {
      Flush(*node);
    } else if (batch.size() == 1) {
      net_.s_.Post([this, n = *node] { Flush(n); });
    }
  }
  void Disconnect(const std::string& address) override { ++net_.disconnects_[address]; }

 private:
  void Flush(size_t node) {
    auto it = batches_.find(node);
    if (it == batches_.end() || it->second.empty()) return;
    std::vector<Pending> batch = std::move(it->second);
    it->second.clear();
    net_.Deliver(gateway_, node, std::move(batch));
  }

  SimNetwork& net_;
  const int gateway_;
  uint64_t next_id_ = 1;
  std::map<size_t, std::vector<Pending>> batches_;
};

SimNetwork::SimNetwork(SimScheduler& scheduler, NetworkModel model, uint64_t seed)
    : s_(scheduler),
      model_(model),
      rng_(seed),
      delay_(std::log(std::max(1.0, model.one_way_median_us)), model.one_way_sigma) {}

SimNetwork::~SimNetwork() = default;

SimNetwork::SimNode& SimNetwork::Add(const std::string& address) {
  if (const std::optional<size_t> i = Find(address)) return *nodes_[*i];
  nodes_.push_back(std::make_unique<SimNode>());
  SimNode& n = *nodes_.back();
  n.endpoint.address = address;
  n.free_at_us.assign(static_cast<size_t>(std::max(1, model_.threads)), 0);
  return n;
}

SimNetwork::Endpoint& SimNetwork::AddNode(const std::string& address, Node& node) {
  SimNode& n = Add(address);
  n.endpoint.node = &node;
  n.endpoint.worker = &node.AddWorker();
  n.owned.reset();
  return n.endpoint;
}

SimNetwork::Endpoint& SimNetwork::AddNode(const std::string& address, std::unique_ptr<Node> node) {
  SimNode& n = Add(address);
  n.endpoint.node = node.get();
  n.endpoint.worker = &node->AddWorker();
  n.owned = std::move(node);
  return n.endpoint;
}

Transport& SimNetwork::Gateway(int gateway) {
  std::unique_ptr<GatewayTransport>& t = gateways_[gateway];
  if (!t) t = std::make_unique<GatewayTransport>(*this, gateway);
  return *t;
}

SimNetwork::Endpoint& SimNetwork::endpoint(size_t node) { return nodes_[node]->endpoint; }
SimNetwork::Endpoint& SimNetwork::endpoint(const std::string& address) {
  const std::optional<size_t> i = Find(address);
  LIMITER_CHECK(i.has_value(), "the simulated network has no node " + address);
  return nodes_[*i]->endpoint;
}
const std::string& SimNetwork::address(size_t node) const { return nodes_[node]->endpoint.address; }
const SimNetwork::NodeLoad& SimNetwork::load(size_t node) const { return nodes_[node]->load; }
bool SimNetwork::up(size_t node) const { return nodes_[node]->up; }

uint64_t SimNetwork::sent(const std::string& policy) const {
  auto it = sent_by_policy_.find(policy);
  return it == sent_by_policy_.end() ? 0 : it->second;
}
int64_t SimNetwork::max_in_flight(const std::string& address) const {
  auto it = max_in_flight_.find(address);
  return it == max_in_flight_.end() ? 0 : it->second;
}
uint64_t SimNetwork::disconnects(const std::string& address) const {
  auto it = disconnects_.find(address);
  return it == disconnects_.end() ? 0 : it->second;
}

std::optional<size_t> SimNetwork::Find(const std::string& address) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->endpoint.address == address) return i;
  }
  return std::nullopt;
}

void SimNetwork::Kill(size_t node) {
  SimNode& n = *nodes_[node];
  n.up = false;
  ++n.life;
}

void SimNetwork::Restart(size_t node, std::unique_ptr<Node> replacement) {
  SimNode& n = *nodes_[node];
  n.endpoint.node = replacement.get();
  n.endpoint.worker = &replacement->AddWorker();
  n.owned = std::move(replacement);
  n.up = true;
  ++n.life;
  std::fill(n.free_at_us.begin(), n.free_at_us.end(), 0);
}

void SimNetwork::Slow(size_t node, double factor, bool on) {
  std::multiset<double>& slow = nodes_[node]->slow;
  if (on) {
    slow.insert(factor);
  } else if (auto it = slow.find(factor); it != slow.end()) {
    slow.erase(it);
  }
}

void SimNetwork::Cut(int from, int to, size_t node, bool cut) {
  if (cut) {
    cut_.push_back({from, to, node});
    return;
  }
  auto it = std::find_if(cut_.begin(), cut_.end(), [&](const CutRange& c) {
    return c.from == from && c.to == to && c.node == node;
  });
  if (it != cut_.end()) cut_.erase(it);
}

bool SimNetwork::IsCut(int gateway, size_t node) const {
  return std::any_of(cut_.begin(), cut_.end(), [&](const CutRange& c) {
    return c.node == node && gateway >= c.from && gateway <= c.to;
  });
}

int64_t SimNetwork::OneWayUs(const SimNode& node) {
  if (node.endpoint.latency_us) return *node.endpoint.latency_us;
  return std::max<int64_t>(1, std::llround(delay_(rng_)));
}

std::optional<size_t> SimNetwork::Accept(const std::string& address, const OpSpec& op,
                                         Transport::Callback& done) {
  if (on_send) on_send(s_.NowUs(), address, op);
  ++sent_total_;
  ++sent_[static_cast<size_t>(op.kind)];
  ++sent_by_policy_[op.policy];
  if (op.sub.k != 0) ++sub_bucket_ops_[address];
  const std::optional<size_t> node = Find(address);
  if (!node || nodes_[*node]->endpoint.refuses) {
    const char* why = node ? "refused" : "no such node";
    s_.Post([done = std::move(done), why] { done(CallResult{CallStatus::kConnection, why, {}}); });
    return std::nullopt;
  }
  if (nodes_[*node]->endpoint.silent) return std::nullopt;
  int64_t& in_flight = in_flight_[address];
  max_in_flight_[address] = std::max(max_in_flight_[address], ++in_flight);
  done = [this, address, done = std::move(done)](CallResult r) {
    --in_flight_[address];
    done(std::move(r));
  };
  return node;
}

void SimNetwork::Deliver(int gateway, size_t node, std::vector<Pending> batch) {
  if (IsCut(gateway, node)) return;  // lost: the client's deadline answers
  RequestBuilder b;
  for (const Pending& p : batch) AddOp(b, p.id, p.op);
  const std::span<const uint8_t> body = b.Finish();
  std::vector<uint8_t> frame(body.begin(), body.end());
  const uint64_t life = nodes_[node]->life;
  s_.After(OneWayUs(*nodes_[node]), [this, gateway, node, life, frame = std::move(frame),
                                     batch = std::move(batch)]() mutable {
    Arrive(gateway, node, life, std::move(frame), std::move(batch));
  });
}

void SimNetwork::Arrive(int gateway, size_t node, uint64_t life, std::vector<uint8_t> frame,
                        std::vector<Pending> batch) {
  SimNode& n = *nodes_[node];
  if (!n.up || n.life != life || IsCut(gateway, node)) {
    if (IsCut(gateway, node)) return;
    Answer(gateway, node, std::move(batch), {});  // a reset
    return;
  }
  if (!model_.queue) {
    Serve(gateway, node, life, frame, std::move(batch));
    return;
  }
  // The worker that frees first takes it (FIFO over identical workers).
  const int64_t now = s_.NowUs();
  auto worker = std::min_element(n.free_at_us.begin(), n.free_at_us.end());
  const int64_t start = std::max(now, *worker);
  const double service = (model_.frame_us + model_.op_us * static_cast<double>(batch.size())) *
                         (n.slow.empty() ? 1.0 : *n.slow.rbegin());
  const int64_t end = start + std::max<int64_t>(1, std::llround(service));
  *worker = end;
  n.load.busy_us += service;
  n.load.busy_by_second[start / 1'000'000] += service;
  n.load.queue_wait_us.Record(static_cast<uint64_t>(start - now));
  while (!n.queued_until.empty() && n.queued_until.front() <= now) n.queued_until.pop_front();
  if (start > now) n.queued_until.push_back(start);
  n.load.most_queued =
      std::max<int64_t>(n.load.most_queued, static_cast<int64_t>(n.queued_until.size()));
  s_.After(end - now, [this, gateway, node, life, frame = std::move(frame),
                       batch = std::move(batch)]() mutable {
    Serve(gateway, node, life, frame, std::move(batch));
  });
}

void SimNetwork::Serve(int gateway, size_t node, uint64_t life, std::span<const uint8_t> frame,
                       std::vector<Pending> batch) {
  SimNode& n = *nodes_[node];
  if (!n.up || n.life != life) {
    Answer(gateway, node, std::move(batch), {});
    return;
  }
  std::vector<uint8_t> out;
  n.endpoint.node->HandleFrame(*n.endpoint.worker, frame, out);
  ++n.load.frames;
  n.load.ops += batch.size();
  std::vector<CallResult> results(batch.size());
  const FrameResult f = DecodeFrame(out, 64u << 20);
  std::vector<uint64_t> aligned;
  const wire::Reply* reply = VerifiedReply(f.body, aligned);
  for (size_t i = 0; i < batch.size(); ++i) {
    const wire::OpReply* op = nullptr;
    if (reply && reply->ops() && i < reply->ops()->size()) {
      op = reply->ops()->Get(static_cast<unsigned>(i));
    }
    if (op == nullptr || op->id() != batch[i].id) {
      results[i] = CallResult{CallStatus::kConnection, "bad reply", {}};
    } else {
      results[i].answer = FromWire(*op);
    }
  }
  Answer(gateway, node, std::move(batch), std::move(results));
}

// Empty `results`: the connection was reset.
void SimNetwork::Answer(int gateway, size_t node, std::vector<Pending> batch,
                        std::vector<CallResult> results) {
  if (IsCut(gateway, node)) return;
  s_.After(OneWayUs(*nodes_[node]),
           [batch = std::move(batch), results = std::move(results)]() mutable {
             for (size_t i = 0; i < batch.size(); ++i) {
               batch[i].done(results.empty() ? CallResult{CallStatus::kConnection, "reset", {}}
                                             : std::move(results[i]));
             }
           });
}

int64_t SimNetwork::RunHandoffs(size_t node) {
  SimNode& from = *nodes_[node];
  if (!from.up) return 0;
  const Handoff::Sink sink = [this, &from](const std::string& member,
                                           std::span<const uint8_t> frame) -> int64_t {
    if (from.endpoint.refuses) return -1;  // its process is gone
    const std::optional<size_t> to = Find(member);
    if (!to || !nodes_[*to]->up || nodes_[*to]->endpoint.refuses) return -1;
    const Endpoint& target = nodes_[*to]->endpoint;
    std::vector<uint8_t> out;
    target.node->HandleFrame(*target.worker, frame, out);
    std::vector<uint64_t> aligned;
    const wire::Reply* r = VerifiedReply(DecodeFrame(out, 64u << 20).body, aligned);
    if (r == nullptr || r->ops() == nullptr || r->ops()->size() != 1) return -1;
    const wire::OpReply* op = r->ops()->Get(0);
    return op->status() == wire::Status::Ok ? op->granted() : -1;
  };
  int64_t sent = 0;
  while (const std::optional<HandoffStats> stats =
             from.endpoint.node->handoff().RunNext(sink, std::chrono::milliseconds(0))) {
    sent += stats->keys_sent;
  }
  return sent;
}

int64_t SimNetwork::RunHandoffs(const std::string& address) {
  const std::optional<size_t> i = Find(address);
  LIMITER_CHECK(i.has_value(), "the simulated network has no node " + address);
  return RunHandoffs(*i);
}

void SimNetwork::Periodic(bool tick) {
  for (auto& n : nodes_) {
    if (!n->up) continue;
    n->endpoint.node->Sweep();
    if (tick) n->endpoint.node->Tick();
  }
}

}  // namespace limiter::sim
