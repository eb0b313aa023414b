#include "server/peers.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/member_list.h"
#include "common/mutex.h"
#include "protocol/node_access.h"
#include "protocol/node_connection.h"
#include "protocol/wire.h"

namespace limiter {
namespace {

// A Request body with one MEMBERS op: no change asks for the peer's list; else `self` leaves
// or joins at `generation`.
enum class Change { kNone, kLeaving, kJoining };
std::vector<uint8_t> MembersRequest(Change change, const std::string& self, uint64_t generation) {
  flatbuffers::FlatBufferBuilder fbb(1024);
  const auto name = change == Change::kNone ? 0 : fbb.CreateString(self);
  const auto peer = wire::CreatePeer(fbb, 0, change == Change::kNone ? 0 : generation, 0,
                                     change == Change::kLeaving ? name : 0,
                                     change == Change::kJoining ? name : 0);
  const std::span<const uint8_t> body = FinishPeerRequest(fbb, wire::OpType::Members, peer);
  return {body.begin(), body.end()};
}

constexpr int64_t kLingerMs = 500;

void Log(const std::string& line) {
  std::fprintf(stderr, "limiterd: %s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace

struct Peers::Link {
  Mutex mu;
  std::unique_ptr<NodeConnection> connection LIMITER_GUARDED_BY(mu);  // null: not connected
};

Peers::Peers(Node& node, std::shared_ptr<asio::ssl::context> tls, int timeout_ms, int64_t idle_ms)
    : node_(node), tls_(std::move(tls)), timeout_ms_(timeout_ms), idle_ms_(idle_ms) {}

Peers::~Peers() = default;

Result<std::unique_ptr<Peers>> Peers::Make(Node& node, const TlsOptions& tls, int timeout_ms,
                                           int64_t idle_ms) {
  std::shared_ptr<asio::ssl::context> context;
  if (!tls.cert_file.empty()) {
    if (tls.ca_file.empty() && tls.peer_ca_file.empty()) {
      return Error{
          "with TLS on the data port, nodes reach each other (hand-off) over TLS too, "
          "verified by the peer CA or the client CA: give tls.peer_ca (--tls-peer-ca) "
          "or tls.client_ca (--tls-client-ca)"};
    }
    // The node's certificate serves as its client certificate; the peer CA (else the
    // cluster's CA) verifies the other node's, so that a gateway's certificate never passes
    // for a node's.
    Result<std::shared_ptr<asio::ssl::context>> made =
        MakeClientTlsContext(TlsOptions{tls.cert_file,
                                        tls.key_file,
                                        tls.peer_ca_file.empty() ? tls.ca_file : tls.peer_ca_file,
                                        {}});
    if (!made) return Error{made.error()};
    context = std::move(made).value();
  }
  return std::unique_ptr<Peers>(new Peers(node, std::move(context), timeout_ms, idle_ms));
}

size_t Peers::links() const {
  MutexLock lock(mu_);
  return links_.size();
}

Result<Peers::Answer> Peers::Exchange(const std::string& member, std::span<const uint8_t> body) {
  std::shared_ptr<Link> link;
  // Links idle too long, closed once mu_ is released (closing one may write a TLS close).
  std::vector<std::shared_ptr<Link>> idle;
  {
    MutexLock lock(mu_);
    const int64_t now = node_.NowMs();
    for (auto it = links_.begin(); it != links_.end();) {
      if (it->first != member && now - it->second.last_used_ms >= idle_ms_) {
        idle.push_back(std::move(it->second.link));
        it = links_.erase(it);
      } else {
        ++it;
      }
    }
    Used& used = links_[member];
    if (!used.link) used.link = std::make_shared<Link>();
    used.last_used_ms = now;
    link = used.link;
  }
  idle.clear();
  MutexLock lock(link->mu);
  std::string last_error;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!link->connection) {
      NodeAccess access;
      access.secret = node_.authenticator().current_secret();
      access.peer_secret = node_.authenticator().current_peer_secret();
      access.peer_name = node_.options().self;
      access.tls = tls_;
      Result<std::unique_ptr<NodeConnection>> c =
          NodeConnection::Connect(member, timeout_ms_, access);
      if (!c) {
        last_error = c.error();
        continue;
      }
      link->connection = std::move(c).value();
    }
    if (Status sent = link->connection->Send(body); !sent.ok()) {
      last_error = sent.error();
      link->connection.reset();
      continue;
    }
    Result<const wire::Reply*> reply = link->connection->Receive();
    if (!reply) {
      last_error = reply.error();
      link->connection.reset();
      continue;
    }
    const wire::Reply* r = *reply;
    if (r->ops() == nullptr || r->ops()->size() != 1) {
      // An error frame: the node ends the session and applied nothing (a secret removed
      // since this link opened, say), so a new connection tries once more. The reply lives
      // in the connection's buffer: its text is taken before the connection goes.
      last_error = r->error() ? r->error()->str() : "no reply to the op";
      link->connection.reset();
      continue;
    }
    const wire::OpReply* op = r->ops()->Get(0);
    Answer a;
    a.ok = op->status() == wire::Status::Ok;
    if (op->error()) a.error = op->error()->str();
    a.granted = op->granted();
    a.generation = op->generation();
    if (op->members()) {
      for (const auto* m : *op->members()) a.members.push_back(m->str());
    }
    return a;
  }
  return Error{member + ": " + last_error};
}

Result<std::pair<std::vector<std::string>, uint64_t>> Peers::AskMembers(const std::string& member) {
  Result<Answer> a = Exchange(member, MembersRequest(Change::kNone, {}, 0));
  if (!a) return Error{a.error()};
  if (!a->ok) return Error{member + ": " + a->error};
  return std::make_pair(std::move(a->members), a->generation);
}

Status Peers::Announce(const std::string& member, bool leaving, uint64_t generation) {
  Result<Answer> a = Exchange(member, MembersRequest(leaving ? Change::kLeaving : Change::kJoining,
                                                     node_.options().self, generation));
  if (!a) return a.status();
  if (!a->ok) return Error{member + ": " + a->error};
  return Status::Ok();
}

int64_t Peers::SendHandoff(const std::string& member, std::span<const uint8_t> frame) {
  Result<Answer> a = Exchange(member, frame);
  if (!a) {
    Log("hand-off to " + a.error());
    return -1;
  }
  if (!a->ok) {
    Log("hand-off to " + member + " refused: " + a->error);
    return -1;
  }
  if (!a->error.empty()) Log("hand-off to " + member + ": " + a->error);
  return a->granted;
}

Status Peers::Send(const std::string& member, std::span<const uint8_t> frame) {
  Result<Answer> a = Exchange(member, frame);
  if (!a) return a.status();
  if (!a->ok) return Error{member + ": " + a->error};
  return Status::Ok();
}

void Peers::Leave() {
  const std::shared_ptr<const ClusterRing> m = node_.membership();
  const std::string& self = node_.options().self;
  std::vector<std::string> others;
  for (const std::string& member : m->ring.members()) {
    if (member != self) others.push_back(member);
  }
  if (others.empty() || others.size() == m->ring.members().size()) return;  // alone, or not in it
  const uint64_t generation = std::max(m->generation + 1, WallClockGeneration());
  // First the others, so that each waits for this node's keys before a gateway that follows
  // this node's WrongOwner reaches it; all at once, so that one unreachable peer does not
  // hold the others' deadlines running while this node still serves.
  {
    std::vector<std::thread> announcing;
    for (const std::string& member : others) {
      announcing.emplace_back([this, &member, generation] {
        if (Status s = Announce(member, /*leaving=*/true, generation); !s.ok()) {
          Log("leaving: " + s.error() +
              " (it learns the list later; its keys from here may "
              "start fresh)");
        }
      });
    }
    for (std::thread& t : announcing) t.join();
  }
  const int64_t sent_before = node_.handoff().counters().keys_sent.load();
  const int64_t lost_before = node_.handoff().counters().keys_lost.load();
  node_.Leave(generation);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(node_.options().handoff_deadline_ms + 1000);
  while (node_.ownership().jobs_in_progress() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Linger a moment, answering WrongOwner with the new list: a gateway that sends this node
  // anything meanwhile learns the list here rather than from a refused connection.
  std::this_thread::sleep_for(
      std::chrono::milliseconds(std::min<int64_t>(kLingerMs, node_.options().handoff_deadline_ms)));
  const auto& c = node_.handoff().counters();
  Log("left the cluster at generation " + std::to_string(generation) + ": " +
      std::to_string(c.keys_sent.load() - sent_before) + " keys handed over, " +
      std::to_string(c.keys_lost.load() - lost_before) + " lost");
}

void Peers::Join() {
  const std::shared_ptr<const ClusterRing> mine = node_.membership();
  const std::string& self = node_.options().self;
  std::optional<std::pair<std::vector<std::string>, uint64_t>> best;
  for (const std::string& member : mine->ring.members()) {
    if (member == self) continue;
    Result<std::pair<std::vector<std::string>, uint64_t>> theirs = AskMembers(member);
    if (!theirs) continue;  // not up (a cold start), or not reachable
    if (!best || theirs->second > best->second) best = std::move(theirs).value();
  }
  if (!best || best->first.empty()) {
    Log("join: no other member answered; serving by the configured list");
    node_.ownership().OpenGate();
    return;
  }
  auto& [list, generation] = *best;
  // Listed already (a member's DNS saw this node first, or it restarted before anyone saw
  // it go): a member may still be sending it keys, so it waits all the same, and each member
  // answers its join with `done` once its queued hand-offs have run.
  const bool listed = std::find(list.begin(), list.end(), self) != list.end();
  std::vector<std::string> previous, members = list;
  for (const std::string& m : list) {
    if (m != self) previous.push_back(m);
  }
  if (!listed) members.push_back(self);
  const uint64_t next = std::max({generation + 1, mine->generation + 1, WallClockGeneration()});
  if (Status joined = node_.ownership().Join(previous, members, next); !joined.ok()) {
    Log("join: " + joined.error());
    node_.ownership().OpenGate();
    return;
  }
  for (const std::string& member : previous) {
    if (Status s = Announce(member, /*leaving=*/false, next); !s.ok()) {
      // Not reachable: whatever it holds for this node does not come; those keys start fresh
      // now rather than at the deadline (the crash promise).
      node_.ownership().Handed(member, next);
      Log("join: " + s.error() + " (its keys for this node start fresh)");
    }
  }
  Log("join: joined at generation " + std::to_string(next) + " with " +
      std::to_string(members.size()) + " members" + (listed ? " (listed already)" : ""));
}

}  // namespace limiter
