// Peers: what a node says to the other nodes of its cluster, over their data ports: member
// lists (asking for one, announcing one) and hand-off batches. It also runs the node's half
// of leaving and joining (see "Hand-off" in node.h):
//   - Leave: announce to every other member that this node leaves (each takes it out of its
//     own list and waits for this node's keys), adopt the list without it (every op is
//     answered WrongOwner with it), hand every key over, and return once done or at the
//     deadline.
//   - Join: ask the members for their list, adopt it with this node in, at a newer
//     generation, announce the join to each member, and let the node wait for each key it
//     gains until its last owner has handed it over (or cannot be reached).
// Announcing the change rather than a whole list lets several nodes leave or join at once:
// each receiver applies every change to its own list.
//
// Blocking connections (the client library's NodeConnection, with the node's own secret and,
// with mutual TLS, its certificate), one per peer, kept open while in use: a peer not talked
// to for `idle_ms` (the node's idle timeout, after which that peer has closed its end too) is
// forgotten and its connection closed at the next exchange with any peer, so a node that
// outlives many peers' addresses (rolling restarts, other regions' nodes coming and going)
// does not keep a descriptor for each. Used from the node's hand-off, join/leave and region
// report threads, never a worker; thread-safe (one call at a time per peer).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/tls_options.h"
#include "limiter/status.h"
#include "server/node.h"

namespace asio::ssl {
class context;
}

namespace limiter {

class NodeConnection;

class Peers {
 public:
  // `tls`: the node's data-port TLS; peers are reached over TLS when it is on (verified by
  // tls.ca_file, presenting the node's certificate). An error when TLS is on without a CA.
  // `idle_ms`: on the node's clock (Node::NowMs).
  static Result<std::unique_ptr<Peers>> Make(Node& node, const TlsOptions& tls, int timeout_ms,
                                             int64_t idle_ms);
  ~Peers();

  // The member list `member` uses, with its generation.
  Result<std::pair<std::vector<std::string>, uint64_t>> AskMembers(const std::string& member);
  // Tells `member` that this node leaves (or joins) at `generation` (Node::MemberLeaves,
  // MemberJoins); an error when it could not or would not hear it.
  Status Announce(const std::string& member, bool leaving, uint64_t generation);
  // A Handoff::Sink: the keys `member` took, or -1.
  int64_t SendHandoff(const std::string& member, std::span<const uint8_t> frame);
  // Sends a one-op Request body; an error when it was not delivered or the op failed.
  Status Send(const std::string& member, std::span<const uint8_t> frame);

  // See above. Both log what they do on stderr, one line each step.
  void Leave();
  void Join();

  // The peers this node holds a link to (for tests and logs).
  size_t links() const;

 private:
  Peers(Node& node, std::shared_ptr<asio::ssl::context> tls, int timeout_ms, int64_t idle_ms);
  struct Link;
  // What a peer answered to a frame's one op.
  struct Answer {
    bool ok = false;
    std::string error;
    int64_t granted = 0;
    std::vector<std::string> members;
    uint64_t generation = 0;
  };
  // Sends one Request body to `member` and reads its reply's first op (reconnecting once).
  Result<Answer> Exchange(const std::string& member, std::span<const uint8_t> body);

  Node& node_;
  std::shared_ptr<asio::ssl::context> tls_;
  const int timeout_ms_;
  const int64_t idle_ms_;
  mutable Mutex mu_;
  struct Used {
    std::shared_ptr<Link> link;
    int64_t last_used_ms = 0;  // node clock
  };
  std::map<std::string, Used> links_ LIMITER_GUARDED_BY(mu_);
};

}  // namespace limiter
