#include "server/server.h"

#include <httplib.h>

#include <asio.hpp>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <list>
#include <thread>

#include "common/membership.h"
#include "common/read_buffer.h"

namespace limiter {
namespace {

using asio::ip::tcp;
constexpr size_t kReadChunk = 64 * 1024;

std::string FormatEndpoint(const tcp::endpoint& ep) {
  const std::string host = ep.address().to_string();
  return (ep.address().is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(ep.port());
}

// One client connection, living on one worker's io_context; every handler runs there.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, Node& node, Node::Worker& worker, const ServerOptions& options,
             std::list<std::weak_ptr<Connection>>& registry)
      : socket_(std::move(socket)),
        node_(node),
        worker_(worker),
        options_(options),
        idle_(socket_.get_executor()),
        registry_(registry) {}

  void Start() {
    registry_it_ = registry_.insert(registry_.end(), weak_from_this());
    Node::CountersOf(worker_).connections_opened.Add();
    asio::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    last_activity_ = std::chrono::steady_clock::now();
    ArmIdleTimer();
    Read();
  }

  ~Connection() {
    Node::CountersOf(worker_).connections_closed.Add();
    registry_.erase(registry_it_);
  }

  void Close() {
    asio::error_code ignored;
    idle_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

 private:
  void Read() {
    if (reading_ || closing_) return;
    if (pending_.size() > options_.max_output_bytes) return;  // resumed when writes drain
    reading_ = true;
    const std::span<uint8_t> space = in_.Space(kReadChunk);
    socket_.async_read_some(
        asio::buffer(space.data(), space.size()),
        [self = shared_from_this()](const asio::error_code& ec, size_t n) {
          self->reading_ = false;
          if (ec) {
            if (ec != asio::error::operation_aborted && self->in_.size() > 0) {
              self->CountBad(BadFrame::kTruncated);  // the peer left mid-frame
            }
            self->Close();
            return;
          }
          self->in_.Commit(n);
          self->last_activity_ = std::chrono::steady_clock::now();
          self->Process();
        });
  }

  void Process() {
    while (!closing_) {
      const uint32_t max_frame = node_.FrameLimit(session_);
      const FrameResult frame = DecodeFrame(in_.readable(), max_frame);
      if (frame.status == FrameStatus::kNeedMore) break;
      if (frame.status != FrameStatus::kFrame) {
        // Framing is lost: say why, then close this connection only.
        CountBad(frame.status == FrameStatus::kEmpty ? BadFrame::kEmpty : BadFrame::kTooLarge);
        node_.ErrorFrame(worker_, DescribeFrameError(frame, max_frame), pending_);
        closing_ = true;
        break;
      }
      if (node_.HandleFrame(worker_, session_, frame.body, pending_) == Node::AfterFrame::kClose) {
        closing_ = true;
      }
      in_.Consume(frame.consumed);
    }
    Write();
    Read();
  }

  void Write() {
    if (writing_ || pending_.empty()) {
      if (!writing_ && closing_) Close();
      return;
    }
    writing_ = true;
    out_.swap(pending_);
    pending_.clear();
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this()](const asio::error_code& ec, size_t) {
                        self->writing_ = false;
                        self->out_.clear();
                        if (ec) {
                          self->Close();
                          return;
                        }
                        self->Write();
                        self->Read();
                      });
  }

  void ArmIdleTimer() {
    idle_.expires_after(std::chrono::milliseconds(options_.idle_timeout_ms));
    idle_.async_wait([weak = weak_from_this()](const asio::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      const auto idle = std::chrono::steady_clock::now() - self->last_activity_;
      if (idle >= std::chrono::milliseconds(self->options_.idle_timeout_ms)) {
        self->Close();
      } else {
        self->ArmIdleTimer();
      }
    });
  }

  void CountBad(BadFrame kind) {
    Node::CountersOf(worker_).bad_frames[static_cast<size_t>(kind)].Add();
  }

  tcp::socket socket_;
  Node& node_;
  Node::Worker& worker_;
  const ServerOptions& options_;
  asio::steady_timer idle_;
  std::list<std::weak_ptr<Connection>>& registry_;
  std::list<std::weak_ptr<Connection>>::iterator registry_it_;
  Node::Session session_ = node_.NewSession();
  ReadBuffer in_;
  std::vector<uint8_t> pending_;  // replies not yet handed to the socket
  std::vector<uint8_t> out_;      // the write in flight
  bool reading_ = false;
  bool writing_ = false;
  bool closing_ = false;
  std::chrono::steady_clock::time_point last_activity_;
};

struct WorkerThread {
  // Declared before io: destroying io destroys pending handlers, and with them connections
  // that unregister themselves from this list.
  std::list<std::weak_ptr<Connection>> connections;  // touched only on this worker's thread
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard{io.get_executor()};
  Node::Worker* node_worker = nullptr;
  std::thread thread;
};

}  // namespace

struct Server::Impl {
  Node& node;
  ServerOptions options;
  std::vector<std::unique_ptr<WorkerThread>> workers;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<asio::signal_set> signals;
  size_t next_worker = 0;
  httplib::Server admin;
  int admin_port = 0;
  std::string admin_host;
  std::thread admin_thread;
  std::atomic<bool> serving{false};
  std::atomic<bool> stopping{false};
  std::mutex sweep_mu;
  std::condition_variable sweep_cv;
  std::thread sweeper;
  std::thread resolver;  // members_dns refreshes

  Impl(Node& n, ServerOptions o) : node(n), options(std::move(o)) {}

  void Accept() {
    WorkerThread& target = *workers[next_worker];
    next_worker = (next_worker + 1) % workers.size();
    acceptor->async_accept(target.io, [this, &target](const asio::error_code& ec, tcp::socket s) {
      if (ec) {
        if (ec == asio::error::operation_aborted || stopping) return;
        Accept();  // a failed accept (out of descriptors, say) must not stop the node
        return;
      }
      asio::post(target.io, [this, &target, s = std::move(s)]() mutable {
        if (stopping) return;
        std::make_shared<Connection>(std::move(s), node, *target.node_worker, options,
                                     target.connections)
            ->Start();
      });
      Accept();
    });
  }
};

Server::Server(Node& node, ServerOptions options)
    : impl_(std::make_unique<Impl>(node, std::move(options))) {}

Server::~Server() {
  Stop();
  for (auto& w : impl_->workers) {
    if (w->thread.joinable()) w->thread.join();
  }
  if (impl_->admin_thread.joinable()) impl_->admin_thread.join();
  if (impl_->sweeper.joinable()) impl_->sweeper.join();
  if (impl_->resolver.joinable()) impl_->resolver.join();
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

std::optional<std::string> Server::Start() {
  Impl& s = *impl_;
  const int threads =
      s.options.threads > 0 ? s.options.threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < threads; ++i) {
    auto w = std::make_unique<WorkerThread>();
    w->node_worker = &s.node.AddWorker();
    s.workers.push_back(std::move(w));
  }
  const std::optional<HostPort> listen = ParseHostPort(s.options.listen);
  if (!listen) return "--listen: expected HOST:PORT, got '" + s.options.listen + "'";
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
  } catch (const std::exception& e) {
    return "cannot listen on " + s.options.listen + ": " + e.what();
  }
  if (!s.options.admin.empty()) {
    const std::optional<HostPort> admin = ParseHostPort(s.options.admin);
    if (!admin) return "--admin: expected HOST:PORT, got '" + s.options.admin + "'";
    s.admin_host = admin->host;
    s.admin.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
      res.set_content(s.node.RenderMetrics(), "text/plain; version=0.0.4");
    });
    s.admin.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    s.admin.Get("/readyz", [&s](const httplib::Request&, httplib::Response& res) {
      const bool ready = s.serving && !s.stopping;
      res.status = ready ? 200 : 503;
      res.set_content(ready ? "ready\n" : "not ready\n", "text/plain");
    });
    if (admin->port == 0) {
      s.admin_port = s.admin.bind_to_any_port(admin->host);
    } else {
      s.admin_port = s.admin.bind_to_port(admin->host, admin->port) ? admin->port : -1;
    }
    if (s.admin_port <= 0) return "cannot listen on " + s.options.admin + " (admin port)";
    // Serve it now: httplib's stop() does nothing before the listening loop has begun.
    s.admin_thread = std::thread([&s] { s.admin.listen_after_bind(); });
    for (int i = 0; i < 5000 && !s.admin.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  // Before the node says it is up, so that a SIGTERM from then on is a clean stop.
  s.signals = std::make_unique<asio::signal_set>(s.workers.front()->io, SIGINT, SIGTERM);
  s.signals->async_wait([this](const asio::error_code& ec, int) {
    if (!ec) Stop();
  });
  return std::nullopt;
}

void Server::Run() {
  Impl& s = *impl_;
  s.Accept();
  s.sweeper = std::thread([&s] {
    std::unique_lock<std::mutex> lock(s.sweep_mu);
    auto next_tick = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (!s.stopping) {
      s.sweep_cv.wait_for(lock, std::chrono::milliseconds(s.options.sweep_interval_ms));
      if (s.stopping) break;
      s.node.Sweep();
      if (std::chrono::steady_clock::now() >= next_tick) {
        s.node.Tick();  // hot keys: a second's epoch
        next_tick += std::chrono::seconds(1);
      }
    }
  });
  if (!s.options.members_dns.empty()) {
    s.resolver = std::thread([&s] {
      std::unique_lock<std::mutex> lock(s.sweep_mu);
      while (!s.stopping) {
        lock.unlock();
        Result<std::vector<std::string>> members = ResolveMembers(s.options.members_dns);
        if (!members) {
          std::fprintf(stderr, "limiterd: members_dns: %s (keeping the last list)\n",
                       members.error().c_str());
        } else if (auto error = s.node.SetMembers(std::move(members).value(),
                                                  DnsGeneration())) {
          std::fprintf(stderr, "limiterd: members_dns: %s (keeping the last list)\n",
                       error->c_str());
        }
        lock.lock();
        s.sweep_cv.wait_for(lock, std::chrono::milliseconds(s.options.dns_refresh_ms));
      }
    });
  }
  for (size_t i = 1; i < s.workers.size(); ++i) {
    WorkerThread* w = s.workers[i].get();
    w->thread = std::thread([w] { w->io.run(); });
  }
  s.serving = true;
  s.workers.front()->io.run();
  for (size_t i = 1; i < s.workers.size(); ++i) s.workers[i]->thread.join();
  if (s.admin_thread.joinable()) s.admin_thread.join();
  if (s.sweeper.joinable()) s.sweeper.join();
  if (s.resolver.joinable()) s.resolver.join();
  s.serving = false;
}

void Server::Stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(s.sweep_mu);
    s.sweep_cv.notify_all();
  }
  s.admin.stop();
  if (s.workers.empty()) return;
  asio::post(s.workers.front()->io, [&s] {
    asio::error_code ignored;
    if (s.acceptor) s.acceptor->close(ignored);
    if (s.signals) s.signals->cancel(ignored);
  });
  for (auto& w : s.workers) {
    asio::post(w->io, [w = w.get()] {
      // Copy first: closing a connection removes it from the list.
      std::vector<std::shared_ptr<Connection>> open;
      for (auto& weak : w->connections) {
        if (auto c = weak.lock()) open.push_back(std::move(c));
      }
      for (auto& c : open) c->Close();
      w->guard.reset();
    });
  }
}

std::string Server::listen_address() const {
  return impl_->acceptor ? FormatEndpoint(impl_->acceptor->local_endpoint()) : "";
}

std::string Server::admin_address() const {
  if (impl_->admin_port <= 0) return "";
  const std::string& h = impl_->admin_host;
  return (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" +
         std::to_string(impl_->admin_port);
}

int Server::threads() const { return static_cast<int>(impl_->workers.size()); }

}  // namespace limiter
