// ConnectionSet: one worker's client connections. Each connection reads frames, hands them to
// the Node and writes the replies back in order, on its worker's thread only. Whatever the
// peer does, a connection stays bounded:
//   - memory follows the bytes that arrived, never a length the peer declares: a new or
//     quiet connection holds no buffers, a half-sent frame one the size of what was sent
//     (at least 512 bytes), and a busy connection keeps at most about 64 KiB between frames;
//   - a frame once begun must be whole within frame_timeout (a peer trickling one byte at a
//     time cannot hold it open), and a silent connection ends after idle_timeout;
//   - reading pauses while max_output_bytes of replies wait for a peer that does not read.
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
#include <list>
#include <memory>

// After a standard header: asio decides how it allocates by what libstdc++ has declared, and
// every file that includes it must decide the same (its handler memory is recycled between
// them).
#include <asio/ip/tcp.hpp>

#include "common/counter.h"
#include "server/node.h"
#include "server/server.h"

namespace asio::ssl {
class context;
}

namespace limiter {

class Connection;

class ConnectionSet {
 public:
  // `open` counts connections across every worker (the max_connections cap): the acceptor
  // adds one before Add, and each connection takes its one away as it ends.
  // `tls`: null for plain TCP, else the node's TLS context (it outlives the set), and
  // `handshakes` counts the TLS handshakes in progress over every worker.
  ConnectionSet(Node& node, Node::Worker& worker, const ServerOptions& options,
                std::atomic<int64_t>& open, asio::ssl::context* tls,
                std::atomic<int64_t>& handshakes);
  ConnectionSet(const ConnectionSet&) = delete;
  ConnectionSet& operator=(const ConnectionSet&) = delete;

  // Starts serving an accepted socket, already counted in `open`.
  void Add(asio::ip::tcp::socket socket);
  // Closes the connections past a deadline and frees the buffers of those idle for a while.
  void Reap(std::chrono::steady_clock::time_point now);
  // Closes every connection (the server is stopping).
  void CloseAll();

  uint64_t frame_timeouts() const { return frame_timeouts_.Get(); }
  uint64_t idle_timeouts() const { return idle_timeouts_.Get(); }
  uint64_t tls_handshake_failures() const { return tls_handshake_failures_.Get(); }
  uint64_t tls_handshakes_refused() const { return tls_handshakes_refused_.Get(); }

 private:
  friend class Connection;

  Node& node_;
  Node::Worker& worker_;
  const ServerOptions& options_;
  std::atomic<int64_t>& open_;
  asio::ssl::context* const tls_;
  std::atomic<int64_t>& handshakes_;
  const std::chrono::milliseconds idle_timeout_;
  const std::chrono::milliseconds frame_timeout_;
  const std::chrono::milliseconds reap_interval_;
  std::list<std::weak_ptr<Connection>> connections_;
  Counter frame_timeouts_;
  Counter idle_timeouts_;
  Counter tls_handshake_failures_;
  Counter tls_handshakes_refused_;
};

// How often a worker reaps: a quarter of the shorter timeout, so that a deadline is kept to
// within a quarter of itself, but at least every second and at most every 50 ms.
std::chrono::milliseconds ReapInterval(const ServerOptions& options);

}  // namespace limiter
