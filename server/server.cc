#include "server/server.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <asio.hpp>
#include <asio/ssl.hpp>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <map>
#include <thread>

#include "common/member_list.h"
#include "common/mutex.h"
#include "limiter/status.h"
#include "protocol/key_id.h"
#include "server/admin_port.h"
#include "server/connection.h"
#include "server/node_certificates.h"
#include "server/peers.h"

namespace limiter {
namespace {

using asio::ip::tcp;

std::string FormatEndpoint(const tcp::endpoint& ep) {
  const std::string host = ep.address().to_string();
  return (ep.address().is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(ep.port());
}

// An accept that failed for want of descriptors or memory: accepting again at once would fail
// the same way, as fast as the loop can go.
bool OutOfResources(const asio::error_code& ec) {
  if (ec.category() != asio::system_category()) return false;
  const int e = ec.value();
  return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}
constexpr std::chrono::milliseconds kAcceptBackoff{100};

// The data port's TLS context, or an error naming the file that could not be used.
Result<std::unique_ptr<asio::ssl::context>> MakeServerTlsContext(const TlsOptions& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return Error{"TLS needs both a certificate (--tls-cert) and its key (--tls-key)"};
  }
  if (tls.cert_file.empty()) {
    return Error{"--tls-client-ca and --tls-peer-ca need TLS: give --tls-cert and --tls-key too"};
  }
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
  std::string file;
  try {
    ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                     asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
    file = tls.cert_file;
    ctx->use_certificate_chain_file(tls.cert_file);
    file = tls.key_file;  // OpenSSL checks that it matches the certificate
    ctx->use_private_key_file(tls.key_file, asio::ssl::context::pem);
    if (!tls.ca_file.empty()) {
      file = tls.ca_file;
      ctx->load_verify_file(tls.ca_file);
    }
    if (!tls.peer_ca_file.empty()) {
      // Node certificates pass the handshake too; which CA a certificate chains to is
      // checked after it (NodeCertificates).
      file = tls.peer_ca_file;
      ctx->load_verify_file(tls.peer_ca_file);
    }
    if (!tls.ca_file.empty()) {
      ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
    } else if (!tls.peer_ca_file.empty()) {
      ctx->set_verify_mode(asio::ssl::verify_peer);  // gateways need none; nodes show theirs
    }
  } catch (const std::system_error& e) {
    return Error{"TLS: " + file + ": " + e.code().message()};
  }
  // Connections drive OpenSSL on their non-blocking sockets (server/connection.cc): an idle
  // one gives its record buffers back, and a write may complete in parts.
  SSL_CTX_set_mode(ctx->native_handle(), SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                                             SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Clients keep their connections for hours: no session cache (it would hold every
  // client's certificate) and no resumption tickets.
  SSL_CTX_set_session_cache_mode(ctx->native_handle(), SSL_SESS_CACHE_OFF);
  // Read what the socket has, not a record header and then its body: half the reads for a
  // client sending small frames.
  SSL_CTX_set_read_ahead(ctx->native_handle(), 1);
  SSL_CTX_set_num_tickets(ctx->native_handle(), 0);
  return ctx;
}

struct WorkerThread {
  WorkerThread(Node& node, const ServerOptions& options, ConnectionLimits& limits,
               asio::ssl::context* tls)
      : node_worker(node.AddWorker()), connections(node, node_worker, options, limits, tls) {}

  Node::Worker& node_worker;
  // Before io: destroying io destroys pending handlers, and with them connections that
  // unregister themselves from this set.
  ConnectionSet connections;  // touched only on this worker's thread
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard{io.get_executor()};
  // One timer walks all of this worker's connections for their deadlines, rather than one
  // per connection: a connection is then no bigger for having timeouts, and re-arming a
  // timer on every read is gone from the hot path.
  asio::steady_timer reaper{io};
  std::thread thread;
};

void Metric(std::string& out, const char* name, const char* type, const char* help,
            uint64_t value) {
  out += std::string("# HELP ") + name + ' ' + help + "\n# TYPE " + name + ' ' + type + '\n';
  out += std::string(name) + ' ' + std::to_string(value) + '\n';
}

}  // namespace

struct Server::Impl {
  Node& node;
  ServerOptions options;
  // Over all workers: connections open (max_connections), not yet authenticated, in a TLS
  // handshake, and their buffered replies; and the peers' addresses.
  ConnectionLimits limits{std::chrono::milliseconds(options.auth_timeout_ms)};
  Counter refused_preauth;  // over the pre-auth caps; written on the acceptor's thread only
  Counter refused_preauth_source;
  std::unique_ptr<asio::ssl::context> tls;  // null: plain TCP
  Counter refused;                // over max_connections; written on the acceptor's thread only
  Counter accept_errors;          // likewise
  Counter admin_actions_refused;  // POST /drain without a valid admin token; admin thread
  std::vector<std::unique_ptr<WorkerThread>> workers;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<asio::steady_timer> accept_backoff;  // on the acceptor's io_context
  std::unique_ptr<asio::signal_set> signals;
  size_t next_worker = 0;
  std::unique_ptr<AdminPort> admin;
  std::atomic<bool> serving{false};
  std::atomic<bool> stopping{false};
  Mutex sweep_mu;
  CondVar sweep_cv;
  std::thread sweeper;
  std::thread resolver;        // members_dns refreshes
  std::thread peer_refresher;  // the members' addresses, for the acceptor (RefreshPeers)
  // Hand-off: the peers, the thread that sends what ring changes give away, the join at start
  // and the leave on SIGTERM.
  std::unique_ptr<Peers> peers;
  std::thread handoff;
  std::thread joiner;
  std::thread drainer;
  // Regions: every rebalance tick, new shares and the reports to the other regions.
  std::unique_ptr<Peers> region_peers;
  std::thread rebalancer;
  std::atomic<bool> draining{false};
  std::atomic<bool> joined{false};  // the joiner is done (or there is none)

  Impl(Node& n, ServerOptions o) : node(n), options(std::move(o)) {}

  // The rebalancer: on every tick of the wall clock's multiples of the interval (so the
  // regions' ticks line up), the demand, and this node's reports
  // to every node of every other region (one thread per region, so that one slow region
  // delays no other); half an interval later, when every region's reports of the tick have
  // come, the new shares (the same in every region that holds the same reports), and then the
  // other regions' DNS names.
  void RunRegions(RegionShares& regions) {
    const int64_t interval = regions.options().rebalance_interval_ms;
    const std::string self = node.options().self.empty() ? options.listen : node.options().self;
    std::map<std::string, std::string> last_error;  // per destination: logged once
    Mutex log_mu;
    const auto wall = [] { return static_cast<int64_t>(WallClockGeneration()); };  // ms, 1970
    // Waits until the wall clock reads `at` (through spurious wakeups); false once stopping.
    MutexLock lock(sweep_mu);
    const auto wait_until = [&](int64_t at) {
      for (int64_t now = wall(); !stopping && now < at; now = wall()) {
        sweep_cv.WaitFor(lock, std::chrono::milliseconds(at - now));
      }
      return !stopping.load();
    };
    // The other regions' DNS names.
    const auto resolve = [&] {
      for (const RegionOptions::Other& other : regions.options().others) {
        if (other.members_dns.empty()) continue;
        Result<std::vector<std::string>> members = ResolveMembers(other.members_dns);
        if (members) {
          regions.SetMembers(other.name, std::move(members).value());
        } else {
          std::fprintf(stderr, "limiterd: region %s: %s (keeping the last list)\n",
                       other.name.c_str(), members.error().c_str());
        }
      }
    };
    lock.Unlock();
    resolve();
    lock.Lock();
    int64_t tick = (wall() / interval + 1) * interval;
    while (wait_until(tick)) {
      lock.Unlock();
      regions.Measure(node.NowMs());
      std::map<std::string, std::vector<RegionShares::Report>> by_region;
      for (auto& report : regions.Reports(self, node.policy_table().digest(), KeyIdSeedDigest())) {
        by_region[report.region].push_back(std::move(report));
      }
      std::vector<std::thread> senders;
      for (auto& [region, reports] : by_region) {
        senders.emplace_back([&, region = region, &reports = reports] {
          bool delivered = true;
          for (const RegionShares::Report& report : reports) {
            const Status sent = region_peers->Send(report.member, report.body);
            if (!sent.ok()) regions.counters().send_errors.fetch_add(1);
            delivered = delivered && sent.ok();
            MutexLock guard(log_mu);
            std::string& last = last_error[report.member];
            if (!sent.ok() && sent.error() != last) {
              std::fprintf(stderr, "limiterd: region %s: %s\n", region.c_str(),
                           sent.error().c_str());
            } else if (sent.ok() && !last.empty()) {
              std::fprintf(stderr, "limiterd: region %s: %s reached again\n", region.c_str(),
                           report.member.c_str());
            }
            last = sent.error();  // empty when delivered
          }
          regions.NoteSent(region, delivered, node.NowMs());
        });
      }
      for (std::thread& t : senders) t.join();
      lock.Lock();
      // Half an interval after this tick (at once when the sends took longer): the shares.
      if (!wait_until(tick + interval / 2)) break;
      lock.Unlock();
      regions.Rebalance(node.NowMs());
      resolve();  // off the tick's path
      lock.Lock();
      // The next tick; one missed (a send that took a whole interval) is skipped, not run late.
      tick = std::max(tick + interval, (wall() / interval + 1) * interval);
    }
  }

  void Accept() {
    WorkerThread& target = *workers[next_worker];
    next_worker = (next_worker + 1) % workers.size();
    acceptor->async_accept(target.io, [this, &target](const asio::error_code& ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted || stopping) return;
      if (ec) {
        // A failed accept must not stop the node, nor, when it is out of descriptors, spin.
        accept_errors.Add();
        if (!OutOfResources(ec)) {
          Accept();
          return;
        }
        accept_backoff->expires_after(kAcceptBackoff);
        accept_backoff->async_wait([this](const asio::error_code& wait_ec) {
          if (!wait_ec && !stopping) Accept();
        });
        return;
      }
      if (const std::optional<Admission> admitted = Admit(s)) {
        asio::post(target.io, [this, &target, a = *admitted, s = std::move(s)]() mutable {
          if (stopping) {
            limits.open.fetch_sub(1, std::memory_order_relaxed);
            if (a.preauth) {
              limits.preauth.fetch_sub(1, std::memory_order_relaxed);
              limits.preauth_sources.Remove(a.source);
            }
            return;
          }
          target.connections.Add(std::move(s), a);
        });
      } else {
        asio::error_code ignored;
        s.close(ignored);  // before a Connection, its buffers or its session exist
      }
      Accept();
    });
  }

  // Whether a new connection may be served, and how it counts. Only the acceptor's thread adds
  // to the counts, so no cap is ever passed. A peer (a member's address) holds no pre-auth
  // slot and may use the last kPeerReserve slots; any other connection, while its session
  // is not authenticated, holds one of max_preauth_connections and one of its source's
  // max_preauth_per_source, so that strangers cannot take the slots authenticated gateways
  // need.
  std::optional<Admission> Admit(const tcp::socket& s) {
    asio::error_code ec;
    const tcp::endpoint remote = s.remote_endpoint(ec);
    if (ec) return std::nullopt;  // gone already
    Admission a;
    a.peer = limits.IsPeer(remote.address());
    a.source = limits.preauth_sources.BucketOf(remote.address());
    const int64_t reserve =
        options.max_connections > 2 * ServerOptions::kPeerReserve ? ServerOptions::kPeerReserve : 0;
    const int64_t open = limits.open.load(std::memory_order_relaxed);
    if (open >= options.max_connections - (a.peer ? 0 : reserve)) {
      refused.Add();
      return std::nullopt;
    }
    a.preauth = !a.peer && !node.authenticator().NewSession().authenticated;
    if (a.preauth) {
      const int64_t most = options.max_preauth_connections > 0
                               ? options.max_preauth_connections
                               : std::max<int64_t>(1, options.max_connections / 4);
      if (!limits.preauth_sources.TryAdd(a.source, options.max_preauth_per_source)) {
        refused_preauth_source.Add();
        return std::nullopt;
      }
      // At the cap, the oldest stranger still to authenticate makes room: no number of
      // silent sockets keeps a gateway, which proves itself within a round trip, out.
      if (limits.preauth.load(std::memory_order_relaxed) >= most && !limits.waiting.EvictOldest()) {
        limits.preauth_sources.Remove(a.source);
        refused_preauth.Add();
        return std::nullopt;
      }
      limits.preauth.fetch_add(1, std::memory_order_relaxed);
    }
    limits.open.fetch_add(1, std::memory_order_relaxed);
    return a;
  }

  // The members' addresses, this cluster's and the other regions', as the acceptor tells
  // peers by (ConnectionLimits::peers): names resolved here, off the I/O threads.
  void RefreshPeers() {
    std::vector<std::string> members = node.membership()->ring.members();
    if (const RegionShares* regions = node.regions()) {
      for (std::string& m : regions->AllOtherMembers()) members.push_back(std::move(m));
    }
    auto addresses = std::make_shared<std::vector<asio::ip::address>>();
    for (const std::string& member : members) {
      const std::optional<HostPort> hp = ParseHostPort(member);
      if (!hp) continue;
      asio::error_code ec;
      const asio::ip::address literal = asio::ip::make_address(hp->host, ec);
      if (!ec) {
        addresses->push_back(literal);
        continue;
      }
      Result<std::vector<std::string>> found = ResolveMembers(member);
      if (!found) continue;  // not resolvable now: its connections count as strangers'
      for (const std::string& one : *found) {
        const std::optional<HostPort> resolved = ParseHostPort(one);
        if (!resolved) continue;
        const asio::ip::address a = asio::ip::make_address(resolved->host, ec);
        if (!ec) addresses->push_back(a);
      }
    }
    std::sort(addresses->begin(), addresses->end());
    addresses->erase(std::unique(addresses->begin(), addresses->end()), addresses->end());
    limits.peers.store(std::move(addresses));
  }

  void Reap(WorkerThread& w) {
    w.reaper.expires_after(ReapInterval(options));
    w.reaper.async_wait([this, &w](const asio::error_code& ec) {
      if (ec || stopping) return;
      w.connections.Reap(std::chrono::steady_clock::now());
      Reap(w);
    });
  }

  // The admin port: probes and metrics for anyone who reaches it (no key names), actions
  // only with the peer credential's admin token (auth::AdminToken), from loopback too.
  Status StartAdmin(Server& server) {
    AdminPortOptions o;
    o.listen = options.admin;
    o.max_connections = options.admin_max_connections;
    admin = std::make_unique<AdminPort>(o);
    admin->Get("/metrics", [this](const AdminRequest&) {
      return AdminResponse{200,
                           "text/plain; version=0.0.4",
                           node.RenderMetrics() + RenderMetrics() + admin->RenderMetrics(),
                           {}};
    });
    admin->Get("/healthz", [](const AdminRequest&) {
      return AdminResponse{200, "text/plain", "ok\n", {}};
    });
    admin->Get("/readyz", [this](const AdminRequest&) {
      // Not while it waits for keys handed to it (a join), nor once it leaves.
      const bool ready = serving && !stopping && !draining && node.ownership().waiting_slots() == 0;
      return AdminResponse{ready ? 200 : 503, "text/plain", ready ? "ready\n" : "not ready\n", {}};
    });
    // A preStop hook's way to start the leave before the SIGTERM: answers at once; the node
    // exits once its keys are handed over.
    admin->Post("/drain", [this, &server](const AdminRequest& request) {
      if (auto refused = AdminActionRefusal(request)) {
        admin_actions_refused.Add();  // only the admin port's thread writes it
        return *refused;
      }
      server.Drain();
      return AdminResponse{202, "text/plain", "draining\n", {}};
    });
    return admin->Start();
  }

  // Why an admin action is refused (401, 403), or nullopt. A node that authenticates nobody
  // (no secret of any kind: loopback only, or --insecure) trusts its admin callers as it does
  // every peer; otherwise the caller shows the admin token of a peer secret.
  std::optional<AdminResponse> AdminActionRefusal(const AdminRequest& request) {
    if (node.authenticator().trusts_everyone()) return std::nullopt;
    const std::optional<std::string_view> token = BearerToken(request.authorization);
    if (node.authenticator().current_peer_secret().empty()) {
      return AdminResponse{403,
                           "text/plain",
                           "this node holds no peer secret, so no admin action is allowed on "
                           "its admin port; stop it with SIGTERM\n",
                           {}};
    }
    if (!token) {
      return AdminResponse{401,
                           "text/plain",
                           "an admin action needs the peer secret's admin token: "
                           "Authorization: Bearer <token> (limiterctl admin-token)\n",
                           {{"WWW-Authenticate", "Bearer realm=\"limiterd\""}}};
    }
    if (!node.authenticator().AdminTokenValid(*token)) {
      return AdminResponse{
          403, "text/plain", "the admin token is not one of this node's peer secrets'\n", {}};
    }
    return std::nullopt;
  }

  // The server's own counters, in the same exposition format as Node::RenderMetrics.
  std::string RenderMetrics() const {
    uint64_t frame_timeouts = 0, idle_timeouts = 0, handshake_failures = 0, handshakes_refused = 0,
             auth_timeouts = 0, budget_closes = 0, evictions = 0;
    for (const auto& w : workers) {
      frame_timeouts += w->connections.frame_timeouts();
      idle_timeouts += w->connections.idle_timeouts();
      handshake_failures += w->connections.tls_handshake_failures();
      handshakes_refused += w->connections.tls_handshakes_refused();
      auth_timeouts += w->connections.auth_timeouts();
      budget_closes += w->connections.budget_closes();
      evictions += w->connections.preauth_evictions();
    }
    std::string out;
    Metric(
        out, "limiter_connections_open", "gauge",
        "Client connections open now, over all workers (the max_connections cap).",
        static_cast<uint64_t>(std::max<int64_t>(0, limits.open.load(std::memory_order_relaxed))));
    Metric(out, "limiter_connections_preauth", "gauge",
           "Connections open now that have not yet proved a credential (max_preauth_connections).",
           static_cast<uint64_t>(
               std::max<int64_t>(0, limits.preauth.load(std::memory_order_relaxed))));
    Metric(out, "limiter_connections_refused_preauth_total", "counter",
           "Connections closed as soon as accepted: max_preauth_connections were not yet "
           "authenticated and none could be closed to make room.",
           refused_preauth.Get());
    Metric(out, "limiter_preauth_evictions_total", "counter",
           "Connections closed before they authenticated, the oldest first, to make room for a "
           "new one at max_preauth_connections.",
           evictions);
    Metric(out, "limiter_connections_refused_per_source_total", "counter",
           "Connections closed as soon as accepted: their source held max_preauth_per_source "
           "connections not yet authenticated.",
           refused_preauth_source.Get());
    Metric(out, "limiter_auth_timeouts_total", "counter",
           "Connections closed because they had not authenticated (TLS handshake and hello "
           "proof) within auth_timeout.",
           auth_timeouts);
    Metric(out, "limiter_reply_buffered_bytes", "gauge",
           "Bytes of replies buffered over all connections (reply_budget_bytes).",
           static_cast<uint64_t>(
               std::max<int64_t>(0, limits.buffered.load(std::memory_order_relaxed))));
    Metric(out, "limiter_reply_budget_closes_total", "counter",
           "Connections closed because the node's buffered replies passed reply_budget_bytes "
           "and they had not read theirs for a second (the largest first).",
           budget_closes);

    Metric(out, "limiter_connections_refused_total", "counter",
           "Connections closed as soon as accepted: max_connections were open.", refused.Get());
    Metric(out, "limiter_admin_actions_refused_total", "counter",
           "Admin port actions (POST /drain) refused: no or a wrong admin token.",
           admin_actions_refused.Get());
    Metric(out, "limiter_accept_errors_total", "counter",
           "Failed accepts; out of descriptors or memory, accepting pauses 100 ms.",
           accept_errors.Get());
    Metric(out, "limiter_frame_timeouts_total", "counter",
           "Connections closed because a frame begun was not whole within frame_timeout.",
           frame_timeouts);
    Metric(out, "limiter_idle_timeouts_total", "counter",
           "Connections closed after idle_timeout without a byte read.", idle_timeouts);
    Metric(out, "limiter_tls_handshake_failures_total", "counter",
           "TLS handshakes that failed or timed out: no or an untrusted client certificate, "
           "or not TLS at all.",
           handshake_failures);
    Metric(out, "limiter_tls_handshakes_in_progress", "gauge",
           "TLS handshakes begun and not ended, over all workers (max_tls_handshakes).",
           static_cast<uint64_t>(std::max<int64_t>(0, limits.handshakes.load())));
    Metric(out, "limiter_tls_handshakes_refused_total", "counter",
           "Connections closed because max_tls_handshakes handshakes were in progress, or "
           "max_tls_handshakes_per_source from their source.",
           handshakes_refused);
    return out;
  }
};

Server::Server(Node& node, ServerOptions options)
    : impl_(std::make_unique<Impl>(node, std::move(options))) {}

Server::~Server() {
  Stop();
  for (auto& w : impl_->workers) {
    if (w->thread.joinable()) w->thread.join();
  }
  if (impl_->sweeper.joinable()) impl_->sweeper.join();
  if (impl_->resolver.joinable()) impl_->resolver.join();
  if (impl_->peer_refresher.joinable()) impl_->peer_refresher.join();
  if (impl_->handoff.joinable()) impl_->handoff.join();
  if (impl_->joiner.joinable()) impl_->joiner.join();
  if (impl_->drainer.joinable()) impl_->drainer.join();
}

std::optional<HostPort> ParseHostPort(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) return std::nullopt;
  HostPort hp;
  hp.host = text.substr(0, colon);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  if (hp.host.empty()) return std::nullopt;
  unsigned port = 0;
  auto [end, ec] = std::from_chars(text.data() + colon + 1, text.data() + text.size(), port);
  if (ec != std::errc() || end != text.data() + text.size() || port > 65535) return std::nullopt;
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

Status Server::Start() {
  Impl& s = *impl_;
  const int threads = s.options.threads > 0
                          ? s.options.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!s.options.tls.cert_file.empty() || !s.options.tls.key_file.empty() ||
      !s.options.tls.ca_file.empty() || !s.options.tls.peer_ca_file.empty()) {
    Result<std::unique_ptr<asio::ssl::context>> tls = MakeServerTlsContext(s.options.tls);
    if (!tls) return Error{tls.error()};
    s.tls = std::move(tls).value();
  }
  if (!s.options.tls.peer_ca_file.empty()) {
    Result<std::shared_ptr<const NodeCertificates>> certs =
        NodeCertificates::Load(s.options.tls.peer_ca_file);
    if (!certs) return Error{certs.error()};
    s.limits.node_certs = std::move(certs).value();
  }
  for (int i = 0; i < threads; ++i) {
    s.workers.push_back(std::make_unique<WorkerThread>(s.node, s.options, s.limits, s.tls.get()));
  }
  const std::optional<HostPort> listen = ParseHostPort(s.options.listen);
  if (!listen) return Error{"--listen: expected HOST:PORT, got '" + s.options.listen + "'"};
  try {
    asio::io_context& io = s.workers.front()->io;
    tcp::resolver resolver(io);
    const auto found = resolver.resolve(listen->host, std::to_string(listen->port),
                                        tcp::resolver::passive | tcp::resolver::numeric_service);
    const tcp::endpoint ep = found.begin()->endpoint();
    s.acceptor = std::make_unique<tcp::acceptor>(io);
    s.acceptor->open(ep.protocol());
    s.acceptor->set_option(tcp::acceptor::reuse_address(true));
    s.acceptor->bind(ep);
    s.acceptor->listen(asio::socket_base::max_listen_connections);
    s.accept_backoff = std::make_unique<asio::steady_timer>(io);
  } catch (const std::exception& e) {
    return Error{"cannot listen on " + s.options.listen + ": " + e.what()};
  }
  if (!s.options.admin.empty()) {
    if (Status started = s.StartAdmin(*this); !started.ok()) return started;
  }
  // Only a node of a cluster talks to peers (and needs a way to verify them over TLS).
  if (!s.node.options().members.empty() || !s.options.members_dns.empty()) {
    Result<std::unique_ptr<Peers>> peers =
        Peers::Make(s.node, s.options.tls,
                    static_cast<int>(std::clamp<int64_t>(s.options.frame_timeout_ms, 1000, 5000)),
                    s.options.idle_timeout_ms);
    if (!peers) return Error{peers.error()};
    s.peers = std::move(peers).value();
  }
  if (RegionShares* regions = s.node.regions()) {
    // Reports must land within half an interval (the shares are computed then): a peer that
    // takes longer counts as not reached.
    Result<std::unique_ptr<Peers>> peers =
        Peers::Make(s.node, s.options.tls,
                    static_cast<int>(std::clamp<int64_t>(
                        regions->options().rebalance_interval_ms / 4, 50, 5000)),
                    s.options.idle_timeout_ms);
    if (!peers) return Error{"regions: " + peers.error()};
    s.region_peers = std::move(peers).value();
  }
  // Before the node says it is up, so that a SIGTERM from then on is a clean stop: the node
  // hands its keys over first (Drain); a second signal stops it at once.
  s.signals = std::make_unique<asio::signal_set>(s.workers.front()->io, SIGINT, SIGTERM);
  s.signals->async_wait([this](const asio::error_code& ec, int) {
    if (ec) return;
    Drain();
    impl_->signals->async_wait([this](const asio::error_code& again, int) {
      if (!again) Stop();
    });
  });
  return Status::Ok();
}

void Server::Run() {
  Impl& s = *impl_;
  s.Accept();
  for (auto& w : s.workers) s.Reap(*w);
  s.sweeper = std::thread([&s] {
    // Each tick sweeps this share of every table (Node::Sweep).
    const auto share = static_cast<size_t>(std::max<int64_t>(
        1, s.options.sweep_cycle_ms / std::max<int64_t>(1, s.options.sweep_interval_ms)));
    MutexLock lock(s.sweep_mu);
    auto next_tick = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (!s.stopping) {
      s.sweep_cv.WaitFor(lock, std::chrono::milliseconds(s.options.sweep_interval_ms));
      if (s.stopping) break;
      s.node.Sweep(share);
      if (std::chrono::steady_clock::now() >= next_tick) {
        s.node.Tick();  // hot keys: a second's epoch
        next_tick += std::chrono::seconds(1);
      }
    }
  });
  if (!s.node.options().members.empty() || !s.options.members_dns.empty() || s.node.regions()) {
    s.RefreshPeers();
    s.peer_refresher = std::thread([&s] {
      MutexLock lock(s.sweep_mu);
      while (!s.stopping) {
        s.sweep_cv.WaitFor(lock, std::chrono::milliseconds(s.options.dns_refresh_ms));
        if (s.stopping) break;
        lock.Unlock();
        s.RefreshPeers();
        lock.Lock();
      }
    });
  }
  if (!s.options.members_dns.empty()) {
    s.resolver = std::thread([&s] {
      MutexLock lock(s.sweep_mu);
      while (!s.stopping) {
        lock.Unlock();
        Result<std::vector<std::string>> members = ResolveMembers(s.options.members_dns);
        if (!members) {
          std::fprintf(stderr, "limiterd: members_dns: %s (keeping the last list)\n",
                       members.error().c_str());
        } else if (std::vector<std::string> list =
                       s.node.ownership().WithAnnounced(std::move(members).value());
                   s.node.membership()->ring.HasMembers(list)) {
          // Nothing new: the generation stays (a newer one would only churn the gateways).
        } else if (Status set = s.node.ownership().SetMembers(std::move(list), DnsGeneration());
                   !set.ok()) {
          std::fprintf(stderr, "limiterd: members_dns: %s (keeping the last list)\n",
                       set.error().c_str());
        }
        lock.Lock();
        s.sweep_cv.WaitFor(lock, std::chrono::milliseconds(s.options.dns_refresh_ms));
      }
    });
  }
  s.handoff = std::thread([&s] {
    const Handoff::Sink send = [&s](const std::string& member,
                                    std::span<const uint8_t> f) -> int64_t {
      return s.peers ? s.peers->SendHandoff(member, f) : -1;
    };
    while (!s.stopping) s.node.handoff().RunNext(send, std::chrono::milliseconds(100));
  });
  if (RegionShares* regions = s.node.regions()) {
    s.rebalancer = std::thread([&s, regions] { s.RunRegions(*regions); });
  }
  if (!s.node.options().join_gate || !s.peers) s.joined = true;
  if (s.node.options().join_gate && s.peers) {
    s.joiner = std::thread([&s] {
      // With members_dns, the first answer gives the list to join with.
      for (int i = 0; i < 200 && !s.stopping && s.node.membership()->ring.empty(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      s.peers->Join();
      s.joined = true;
    });
  }
  for (size_t i = 1; i < s.workers.size(); ++i) {
    WorkerThread* w = s.workers[i].get();
    w->thread = std::thread([w] { w->io.run(); });
  }
  s.serving = true;
  s.workers.front()->io.run();
  for (size_t i = 1; i < s.workers.size(); ++i) s.workers[i]->thread.join();
  if (s.sweeper.joinable()) s.sweeper.join();
  if (s.resolver.joinable()) s.resolver.join();
  if (s.peer_refresher.joinable()) s.peer_refresher.join();
  if (s.handoff.joinable()) s.handoff.join();
  if (s.joiner.joinable()) s.joiner.join();
  if (s.drainer.joinable()) s.drainer.join();
  if (s.rebalancer.joinable()) s.rebalancer.join();
  s.serving = false;
}

void Server::Drain() {
  Impl& s = *impl_;
  if (s.draining.exchange(true) || s.stopping) return;
  if (s.node.options().handoff_deadline_ms == 0 || !s.peers) return Stop();  // nothing to hand
  s.drainer = std::thread([this, &s] {
    // A join half done would confuse the leave: wait for it (Run joins the thread).
    for (int i = 0; i < 400 && !s.joined && !s.stopping; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    s.peers->Leave();
    Stop();
  });
}

void Server::Stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  {
    MutexLock lock(s.sweep_mu);
    s.sweep_cv.NotifyAll();
  }
  if (s.admin) s.admin->Stop();
  if (s.workers.empty()) return;
  asio::post(s.workers.front()->io, [&s] {
    asio::error_code ignored;
    if (s.acceptor) s.acceptor->close(ignored);
    if (s.accept_backoff) s.accept_backoff->cancel();
    if (s.signals) s.signals->cancel(ignored);
  });
  for (auto& w : s.workers) {
    asio::post(w->io, [w = w.get()] {
      w->reaper.cancel();
      w->connections.CloseAll();
      w->guard.reset();
    });
  }
}

std::string Server::listen_address() const {
  return impl_->acceptor ? FormatEndpoint(impl_->acceptor->local_endpoint()) : "";
}

std::string Server::admin_address() const { return impl_->admin ? impl_->admin->address() : ""; }

int Server::threads() const { return static_cast<int>(impl_->workers.size()); }

}  // namespace limiter
