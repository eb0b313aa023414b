// ConnectionSet: one worker's client connections. Each connection reads frames, hands them to
// the Node and writes the replies back in order, on its worker's thread only. Whatever the
// peer does, a connection stays bounded:
//   - before it has authenticated, it must do so within auth_timeout (the TLS handshake
//     included), and it holds one of the node's pre-auth slots (ConnectionLimits);
//   - memory follows the bytes that arrived, never a length the peer declares: a new or
//     quiet connection holds no buffers, a half-sent frame one the size of what was sent
//     (at least 512 bytes), and a busy connection keeps at most about 64 KiB between frames;
//   - a frame once begun must be whole within frame_timeout (a peer trickling one byte at a
//     time cannot hold it open), and a silent connection ends after idle_timeout;
//   - reading pauses while max_output_bytes of replies wait for a peer that does not read,
//     and on every connection while the node's replies buffered pass reply_budget_bytes; the
//     reaper then closes the largest connections that have not read for a second;
//   - once the secret it proved is removed (rotation), it is closed.
// The deadlines are checked by Reap, which the worker calls on one timer for all its
// connections (see Server), instead of a timer per connection.
//
// With a TLS context every connection is TLS: its handshake is a frame (it must finish
// within frame_timeout), a failed one is counted and closed, and then frames flow as on a
// plain connection. Nothing of TLS is made before the peer's first bytes; OpenSSL works on
// the socket itself and releases its record buffers while a connection is idle, so an idle
// TLS connection costs little more than a plain one. A handshake in progress holds tens of
// KiB, so at most max_tls_handshakes are in progress over the node.
//
// Thread-safety: Add, Reap and CloseAll on the worker's thread. The counters may be read from
// any thread (metrics). The set must outlive its connections: they unregister from it as the
// io_context destroys their last handler.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

// After a standard header: asio decides how it allocates by what libstdc++ has declared, and
// every file that includes it must decide the same (its handler memory is recycled between
// them).
#include <asio/ip/tcp.hpp>

#include "common/counter.h"
#include "common/mutex.h"
#include "common/shared_value.h"
#include "server/node.h"
#include "server/server.h"
#include "server/source_counts.h"

namespace asio::ssl {
class context;
}

namespace limiter {

class Connection;
class NodeCertificates;

// The connections still to authenticate, oldest first, so that the acceptor can make room
// for a new one by closing the oldest (a peer that authenticates does so within a round trip;
// what waits longest is a stranger holding a slot). Entries of connections that have since
// authenticated or ended are skipped, and those older than the auth timeout dropped.
// Thread-safety: any thread (the acceptor evicts, workers add); its own mutex.
class PreauthQueue {
 public:
  explicit PreauthQueue(std::chrono::milliseconds horizon) : horizon_(horizon) {}
  void Add(std::shared_ptr<Connection> c);
  // Takes the oldest waiting connection's pre-auth slot and has its worker close it; false
  // when none is waiting.
  bool EvictOldest();

 private:
  struct Entry {
    std::weak_ptr<Connection> connection;
    std::chrono::steady_clock::time_point added;
  };
  const std::chrono::milliseconds horizon_;
  Mutex mu_;
  std::deque<Entry> entries_ LIMITER_GUARDED_BY(mu_);
};

// What every worker's connections share: the node-wide counts their caps hold them to, and
// what the acceptor needs to place a new connection. Owned by the server; outlives the sets.
struct ConnectionLimits {
  std::atomic<int64_t> open{0};        // connections, from accept to their end
  std::atomic<int64_t> preauth{0};     // of those, not authenticated yet (and not a peer's)
  std::atomic<int64_t> handshakes{0};  // TLS handshakes in progress
  std::atomic<int64_t> buffered{0};    // bytes of replies buffered, over every connection
  SourceCounts preauth_sources;        // per source: not authenticated yet
  SourceCounts handshake_sources;      // per source: in a TLS handshake
  // The members' addresses (this cluster's and the other regions'), refreshed by the server:
  // their connections hold no pre-auth slot and may use the peer reserve.
  SharedValue<const std::vector<asio::ip::address>> peers;
  std::shared_ptr<const NodeCertificates> node_certs;  // with a peer CA; else null
  PreauthQueue waiting;  // the connections holding pre-auth slots, oldest first
  bool IsPeer(const asio::ip::address& address) const;
  explicit ConnectionLimits(std::chrono::milliseconds auth_timeout) : waiting(auth_timeout) {}
};

// How an accepted connection counts: its source's buckets (SourceCounts), and whether it
// holds a pre-auth slot that it gives back once authenticated.
struct Admission {
  size_t source = 0;
  bool peer = false;
  bool preauth = false;
};

class ConnectionSet {
 public:
  // `limits.open` counts connections across every worker (the max_connections cap): the
  // acceptor adds one before Add, and each connection takes its one away as it ends; likewise
  // `limits.preauth` for one admitted with `admission.preauth`.
  // `tls`: null for plain TCP, else the node's TLS context (it outlives the set).
  ConnectionSet(Node& node, Node::Worker& worker, const ServerOptions& options,
                ConnectionLimits& limits, asio::ssl::context* tls);
  ConnectionSet(const ConnectionSet&) = delete;
  ConnectionSet& operator=(const ConnectionSet&) = delete;

  // Starts serving an accepted socket, already counted in the limits as `admission` says.
  void Add(asio::ip::tcp::socket socket, Admission admission);
  // Closes the connections past a deadline and frees the buffers of those idle for a while.
  void Reap(std::chrono::steady_clock::time_point now);
  // Closes every connection (the server is stopping).
  void CloseAll();

  uint64_t frame_timeouts() const { return frame_timeouts_.Get(); }
  uint64_t idle_timeouts() const { return idle_timeouts_.Get(); }
  uint64_t tls_handshake_failures() const { return tls_handshake_failures_.Get(); }
  uint64_t tls_handshakes_refused() const { return tls_handshakes_refused_.Get(); }
  uint64_t auth_timeouts() const { return auth_timeouts_.Get(); }
  uint64_t budget_closes() const { return budget_closes_.Get(); }
  uint64_t preauth_evictions() const { return preauth_evictions_.Get(); }

 private:
  friend class Connection;
  // Over the reply budget: closes the largest of this worker's connections that have not
  // read for a second, until what they hold covers this worker's share of the excess.
  void EnforceBudget(std::chrono::steady_clock::time_point now);

  Node& node_;
  Node::Worker& worker_;
  const ServerOptions& options_;
  ConnectionLimits& limits_;
  asio::ssl::context* const tls_;
  const std::chrono::milliseconds idle_timeout_;
  const std::chrono::milliseconds frame_timeout_;
  const std::chrono::milliseconds auth_timeout_;
  const std::chrono::milliseconds reap_interval_;
  std::list<std::weak_ptr<Connection>> connections_;
  Counter frame_timeouts_;
  Counter idle_timeouts_;
  Counter tls_handshake_failures_;
  Counter tls_handshakes_refused_;
  Counter auth_timeouts_;      // not authenticated within auth_timeout
  Counter budget_closes_;      // closed to bring the node's buffered replies within the budget
  Counter preauth_evictions_;  // closed before authenticating, to make room for a newer one
};

// How often a worker reaps: a quarter of the shortest timeout, so that a deadline is kept to
// within a quarter of itself, but at least every second and at most every 50 ms.
std::chrono::milliseconds ReapInterval(const ServerOptions& options);

}  // namespace limiter
