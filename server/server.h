// Server: limiterd's networking. One asio io_context per worker thread; connections are
// spread over the workers and stay on theirs, each worker with its own Node::Worker, so the
// only shared state on the hot path is the store's stripe locks. An admin HTTP port
// (cpp-httplib) serves /metrics, /healthz and /readyz; a sweeper thread reclaims expired keys
// and ticks the hot-key detection once a second. Whatever peers do, the node's connections
// stay bounded in number (max_connections), in time (idle and frame timeouts) and in memory
// (see ConnectionSet in server/connection.h). The data port is plain TCP or, given a
// certificate, TLS (optionally mutual).
//
// Thread-safety: Start and Run from one thread; Stop from any thread, any number of times.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/tls_options.h"
#include "limiter/status.h"
#include "server/node.h"

namespace limiter {

struct ServerOptions {
  std::string listen = "127.0.0.1:7450";
  std::string admin = "127.0.0.1:7451";  // empty: no admin port
  int threads = 0;                       // 0: one per core
  size_t max_output_bytes = 8u << 20;    // per connection; reading pauses above it
  int64_t idle_timeout_ms = 60'000;      // a connection silent this long is closed
  int64_t frame_timeout_ms = 10'000;     // a frame begun must be whole this soon, or close
  int64_t max_connections = 10'000;      // over all workers; more are accepted and closed
  int64_t sweep_interval_ms = 100;
  // The sweeper goes over every key table once in this time, a share of each per interval (at
  // most the node's sweep_budget slots of a table: tables of over 400,000 slots per stripe
  // take longer): idle keys are reclaimed within about this long, sooner at the key bound,
  // where a new key that finds no room reclaims its stripe (Store::ReclaimLocked), and a node
  // holding millions of keys spends well under a millisecond of each interval on them instead
  // of milliseconds at a time.
  int64_t sweep_cycle_ms = 10'000;
  std::string members_dns;  // resolved into the node's member list, periodically
  int64_t dns_refresh_ms = 5000;
  // TLS on the data port when tls.cert_file is set; with tls.ca_file, clients must present a
  // certificate signed by it (mutual TLS). TLS 1.2 and 1.3 only.
  TlsOptions tls;
  // TLS handshakes in progress over all workers (each holds tens of KiB of OpenSSL state for
  // up to auth_timeout); a connection whose handshake would pass it is closed. And per
  // source address (an IPv6 /64), so that one source cannot hold them all.
  int64_t max_tls_handshakes = 1000;
  int64_t max_tls_handshakes_per_source = 16;
  // Before the hello: a connection must have proved its credential (and finished its TLS
  // handshake) within auth_timeout, or it is closed. Connections not yet authenticated hold
  // at most max_preauth_connections slots over the node (0: a quarter of max_connections)
  // and max_preauth_per_source per source address, so the rest of max_connections is kept
  // for authenticated sessions. Connections from the members' addresses (peers) are not held
  // to the pre-auth caps, and kPeerReserve slots of max_connections are theirs alone.
  int64_t auth_timeout_ms = 2000;
  int64_t max_preauth_connections = 0;
  int64_t max_preauth_per_source = 64;
  static constexpr int64_t kPeerReserve = 64;
  // Bytes of replies buffered over all connections of the node (each is also held to
  // max_output_bytes). Past it, connections stop reading, and the largest of those that have
  // not read their replies for a second are closed until it is met again.
  int64_t reply_budget_bytes = 256 << 20;
  // The admin port: see AdminPortOptions (server/admin_port.h).
  int64_t admin_max_connections = 64;
};

class Server {
 public:
  Server(Node& node, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the ports (port 0: any free port); an error says which and why.
  Status Start();
  // Serves until Stop; returns once every thread has finished.
  void Run();
  // Stops accepting, closes every connection, ends Run. A second SIGTERM or SIGINT calls it.
  void Stop();
  // Leaves the cluster, handing every key to its next owner (within the node's
  // handoff_deadline_ms), then Stop. SIGTERM and SIGINT call it. Returns at once.
  void Drain();

  std::string listen_address() const;  // host:port as bound
  std::string admin_address() const;
  int threads() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Splits "host:port" or "[v6]:port"; nullopt when malformed.
struct HostPort {
  std::string host;
  uint16_t port = 0;
};
std::optional<HostPort> ParseHostPort(const std::string& text);

}  // namespace limiter
