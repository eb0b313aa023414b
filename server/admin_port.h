// AdminPort: limiterd's admin HTTP port (/metrics, /healthz, /readyz, POST /drain), a small
// HTTP/1.1 server on its own thread and io_context, every connection asynchronous: a slow
// client costs its bounded memory, never a thread. Whatever clients do:
//   - a request is bounded: its header by max_header_bytes (else 431) and its body by
//     max_body_bytes (else 413), announced or chunked; a body announced too large is never
//     buffered (the 413 goes out and the connection closes); a malformed request gets 400.
//     Each of these closes the connection: after a connection's last response, what the
//     client still sends is read and dropped (at most 256 KiB, for at most 0.5 s) so that the
//     close does not reset the response away. A connection holds at most about
//     max_header_bytes + 16 KiB of unparsed input, the parsed header and the body.
//   - time is bounded: a request must be whole within request_timeout of the accept (the
//     first) or of its first byte (the next ones on a kept-alive connection), a kept-alive
//     connection with no request begun ends after idle_timeout, and a response not taken
//     within write_timeout ends its connection; at most max_requests_per_connection each.
//   - connections are capped, overall (max_connections) and per source (max_per_source; a
//     source is an IPv4 address or an IPv6 /64). At a cap, a new connection takes the place
//     of the oldest one (of that source, at the per-source cap) that has not sent a whole
//     request; it is refused only when every connection in its way has sent one and is being
//     answered or waits between requests. A probe, which sends its request at once, therefore
//     gets in however many slow clients hold connections, from its own address too. Until its
//     request arrives, a connection is one of the slow: if max_connections newer ones come
//     first (max_per_source from its source), it is closed to make room for them.
// It decides no access itself: a handler sees the Authorization header (BearerToken) and
// refuses what needs a credential. Deadlines are the network's real time (asio's steady
// timers), not a Clock&: time here decides only when a socket is closed, never an answer.
//
// Thread-safety: Get, Post and Start from one thread, before the port serves; handlers run
// on the port's thread, one at a time (keep them quick). Stop from any thread, a handler's
// too, any number of times. Stats, responses and RenderMetrics from any thread.
// Ownership: the port owns its thread, its sockets and its handlers; connections live until
// their socket closes and their last callback has run, all before Stop returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "limiter/status.h"

namespace limiter {

struct AdminRequest {
  std::string method;         // as sent: "GET", "POST", ...
  std::string path;           // the request target up to '?'
  std::string query;          // after '?' (without it); empty when none
  std::string authorization;  // the Authorization header's value; empty when absent
  std::string body;
  std::string peer;  // "127.0.0.1:41234", "[::1]:41234"
};

struct AdminResponse {
  int status = 200;  // 200..599; anything else is answered 500 instead
  std::string content_type = "text/plain";
  std::string body;
  // Extra header fields (e.g. WWW-Authenticate on a 401). A name that is not a token or a
  // value holding CR, LF or NUL makes the answer a 500: a handler cannot split a response.
  std::vector<std::pair<std::string, std::string>> headers;
};

using AdminHandler = std::function<AdminResponse(const AdminRequest&)>;

struct AdminPortOptions {
  std::string listen = "127.0.0.1:7451";  // HOST:PORT or [V6]:PORT; port 0: any free port
  int64_t max_connections = 64;
  int64_t max_per_source = 8;  // per IPv4 address, per IPv6 /64
  int64_t max_header_bytes = 8 * 1024;
  int64_t max_body_bytes = 4 * 1024;
  std::chrono::milliseconds request_timeout{2000};
  std::chrono::milliseconds idle_timeout{10'000};
  std::chrono::milliseconds write_timeout{5000};
  int64_t max_requests_per_connection = 100;
};

// What the port has done since it started; counters only grow, `open` is a gauge.
struct AdminPortStats {
  uint64_t accepted = 0;
  uint64_t refused_per_source = 0;   // at max_per_source, none of that source's was slow
  uint64_t refused_cap = 0;          // at max_connections, none was slow
  uint64_t slow_clients_closed = 0;  // closed to make room for a new connection
  uint64_t request_timeouts = 0;
  uint64_t idle_timeouts = 0;
  uint64_t write_timeouts = 0;
  uint64_t accept_errors = 0;
  int64_t open = 0;
};

class AdminPort {
 public:
  explicit AdminPort(AdminPortOptions options = {});
  ~AdminPort();  // Stop; never from one of its handlers
  AdminPort(const AdminPort&) = delete;
  AdminPort& operator=(const AdminPort&) = delete;

  // Routes, before Start (a crash with a message after): `path` is matched exactly, without
  // the query. A GET route answers HEAD too. A second handler for a route replaces the first.
  // Unknown paths get 404, other methods 405 with Allow.
  void Get(std::string path, AdminHandler handler);
  void Post(std::string path, AdminHandler handler);

  // Checks the options, binds and starts serving on the port's thread; an error says why not
  // ("cannot listen on X (admin port): ...", "admin port: max_connections must be ...").
  // Once per port.
  Status Start();
  // Closes the listener and every connection and, unless called from a handler, joins the
  // port's thread (a handler's Stop leaves that to the next Stop or the destructor).
  void Stop();

  std::string address() const;  // HOST:PORT as bound ("[::1]:PORT" for IPv6); empty before
  AdminPortStats stats() const;
  uint64_t responses(int status) const;  // answers with this status so far
  // The counters in Prometheus' text format: limiter_admin_requests_total{code}, ..._
  // connections_refused_total{reason}, ..._slow_clients_closed_total, ..._timeouts_total
  // {phase}, ..._connections_open, ..._connections_accepted_total, ..._accept_errors_total.
  std::string RenderMetrics() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The credential of an Authorization value "Bearer <token>" (the scheme in any case, spaces
// around the token trimmed); nullopt for another scheme, no token or a token with spaces.
std::optional<std::string_view> BearerToken(std::string_view authorization);

// The source an address counts against for max_per_source: an IPv4 address as itself (also
// when IPv4-mapped), an IPv6 address as its /64 ("2001:db8:1:2::/64"); nullopt when
// `address` is not an IP address.
std::optional<std::string> AdminSource(std::string_view address);

}  // namespace limiter
