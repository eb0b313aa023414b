#include "server/admin_port.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "common/mutex.h"

// After the standard headers, as everywhere asio is included (server/connection.h says why).
#include <asio.hpp>

// Only this file includes Beast (its compile cost stays here). Its request parser is used
// sans-I/O: bytes read through standalone asio go to put(); Boost.Asio appears only as
// Beast's buffer type.
#define BOOST_BEAST_USE_STD_STRING_VIEW
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "common/counter.h"
#include "server/admin_http.h"
#include "server/server.h"  // ParseHostPort

namespace limiter {
namespace {

namespace http = boost::beast::http;
using asio::ip::tcp;

// One read's room. Reads go into one buffer of the port's (one thread), then into the
// connection's unparsed input: a connection waiting for bytes holds no read buffer.
constexpr size_t kReadBytes = 16 * 1024;
// After the last response of a connection (an error's, or Connection: close), its write side
// is shut and what the client still sends is read and dropped for a while before the close
// (RFC 9112 9.6): closing with unread input would reset the connection, and a reset can
// destroy the response before the client reads it. Bounded in time and in bytes.
constexpr std::chrono::milliseconds kLingerTime{500};
constexpr size_t kLingerBytes = 256 * 1024;
constexpr std::chrono::milliseconds kAcceptBackoff{100};

std::string FormatEndpoint(const tcp::endpoint& ep) {
  const std::string host = ep.address().to_string();
  return (ep.address().is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(ep.port());
}

std::string SourceOf(const asio::ip::address& address) {
  if (address.is_v4()) return address.to_string();
  const asio::ip::address_v6 v6 = address.to_v6();
  if (v6.is_v4_mapped()) return asio::ip::make_address_v4(asio::ip::v4_mapped, v6).to_string();
  asio::ip::address_v6::bytes_type bytes = v6.to_bytes();
  std::fill(bytes.begin() + 8, bytes.end(), 0);
  return asio::ip::address_v6(bytes).to_string() + "/64";
}

// Out of descriptors or memory: accepting again at once would fail the same way.
bool OutOfResources(const asio::error_code& ec) {
  if (ec.category() != asio::system_category()) return false;
  const int e = ec.value();
  return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

template <class T>
void Release(T& buffer) {
  T().swap(buffer);
}

enum class Phase {
  kRequest,  // reading a request: from the accept, or from its first byte after kIdle
  kWriting,  // a response in flight
  kIdle,     // between requests on a kept-alive connection, a request served
  kLinger,   // write side shut after the last response; input read and dropped
};

enum class Deadline { kRequest, kWriting, kIdle, kLinger };

class AdminConnection;

// The port's state and its accept side; AdminPort::Impl is this (AdminConnection, in this
// file only, cannot name AdminPort's private Impl).
struct Port {
  struct Routes {
    AdminHandler get;
    AdminHandler post;
  };

  explicit Port(AdminPortOptions o) : options(std::move(o)) {}

  const AdminPortOptions options;
  std::map<std::string, Routes, std::less<>> routes;

  // Counters: written on the port's thread only, read from any.
  std::array<Counter, kAdminMaxStatus + 1> responses;
  Counter accepted, refused_per_source, refused_cap, slow_clients_closed;
  Counter request_timeouts, idle_timeouts, write_timeouts, accept_errors;
  std::atomic<int64_t> open{0};

  // The open connections in accept order (the oldest first), and how many each source has.
  // Touched on the port's thread only; a connection leaves both when it closes.
  std::list<std::shared_ptr<AdminConnection>> connections;
  std::map<std::string, int64_t, std::less<>> per_source;
  std::array<char, kReadBytes> scratch;  // every connection's reads land here first

  std::atomic<bool> started{false};
  std::atomic<bool> stopping{false};
  std::string bound;  // address(); set by Start before the thread runs

  // Last: destroying io destroys the callbacks still queued, and with them connections,
  // which need nothing above but must not outlive it.
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard{io.get_executor()};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_backoff{io};
  std::thread thread;
  std::atomic<std::thread::id> thread_id{};
  Mutex join_mu;  // one Stop joins at a time

  void Accept();
  void Admit(tcp::socket socket);
  bool EvictOldestSlow(const std::string* source);
  void CloseAll();
  AdminResponse Route(const AdminRequest& request, bool head);
  void Count(int status) { responses[std::clamp(status, 0, kAdminMaxStatus)].Add(); }
};

// One client connection, driven on the port's thread. Owned by the port's list while open
// and by the callbacks in flight for it (each holds a shared_ptr): at most one wait for
// input, one write and one timer wait at a time, so it ends once closed and the last of
// them has run.
class AdminConnection : public std::enable_shared_from_this<AdminConnection> {
 public:
  AdminConnection(Port& port, tcp::socket socket, std::string source, std::string peer)
      : port_(port),
        socket_(std::move(socket)),
        timer_(port.io),
        source_(std::move(source)),
        peer_(std::move(peer)) {}

  std::list<std::shared_ptr<AdminConnection>>::iterator registry;

  const std::string& source() const { return source_; }
  // Has not sent a whole request (or is on its way out): what makes room at a cap.
  bool slow() const { return phase_ == Phase::kRequest || phase_ == Phase::kLinger; }

  void Start() {
    asio::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    // Reads after a readiness wait must not block the port's thread.
    socket_.non_blocking(true, ignored);
    BeginRequest();
    OnReadable();  // a probe's request has usually arrived with its connection
  }

  // Idempotent. Leaves the port's books at once, so the caps see the room it made.
  void Close() {
    if (closed_) return;
    const std::shared_ptr<AdminConnection> self = shared_from_this();  // outlive the erase
    closed_ = true;
    asio::error_code ignored;
    socket_.close(ignored);
    timer_.cancel();
    port_.connections.erase(registry);
    if (auto it = port_.per_source.find(source_);
        it != port_.per_source.end() && --it->second <= 0) {
      port_.per_source.erase(it);
    }
    port_.open.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  using Parser = http::request_parser<http::string_body>;

  void BeginRequest() {
    phase_ = Phase::kRequest;
    SetDeadline(port_.options.request_timeout, Deadline::kRequest);
  }

  // One timer per connection, re-armed only when the phase changes (never per read).
  void SetDeadline(std::chrono::milliseconds after, Deadline kind) {
    deadline_ = kind;
    const uint64_t generation = ++deadline_generation_;
    timer_.expires_after(after);
    timer_.async_wait([self = shared_from_this(), generation](const asio::error_code& ec) {
      // A wait re-armed since (or one that fired just before) is not this deadline.
      if (ec || self->closed_ || generation != self->deadline_generation_) return;
      self->OnDeadline();
    });
  }

  void OnDeadline() {
    switch (deadline_) {
      case Deadline::kRequest:
        port_.request_timeouts.Add();
        break;
      case Deadline::kWriting:
        port_.write_timeouts.Add();
        break;
      case Deadline::kIdle:
        port_.idle_timeouts.Add();
        break;
      case Deadline::kLinger:
        break;
    }
    Close();
  }

  void WaitRead() {
    socket_.async_wait(tcp::socket::wait_read,
                       [self = shared_from_this()](const asio::error_code& ec) {
                         if (self->closed_) return;
                         if (ec) return self->Close();
                         self->OnReadable();
                       });
  }

  void OnReadable() {
    asio::error_code ec;
    const size_t n = socket_.read_some(asio::buffer(port_.scratch), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) return WaitRead();
    if (ec) return Close();  // the end of input (half a request is dropped), or a reset
    if (phase_ == Phase::kLinger) {
      lingered_ += n;
      return lingered_ >= kLingerBytes ? Close() : WaitRead();
    }
    if (phase_ == Phase::kIdle) BeginRequest();
    pending_.append(port_.scratch.data(), n);
    Parse();
  }

  // Feeds the unparsed input to the parser; answers a request once it is whole. Beast wants
  // a header presented whole: what it has not consumed stays in pending_ for the next put.
  void Parse() {
    if (!parser_) {
      parser_.emplace();
      parser_->header_limit(static_cast<uint32_t>(port_.options.max_header_bytes));
      parser_->body_limit(static_cast<uint64_t>(port_.options.max_body_bytes));
      parser_->eager(true);
    }
    boost::beast::error_code ec;
    try {  // Beast reports through ec; only allocation could throw, for what is bounded here.
      for (size_t used = 1; used > 0 && !ec && !parser_->is_done() && !pending_.empty();) {
        used = parser_->put(boost::asio::const_buffer(pending_.data(), pending_.size()), ec);
        pending_.erase(0, used);
      }
    } catch (const std::exception& e) {
      return Fail(400, std::string("cannot parse the request: ") + e.what());
    }
    if (ec == http::error::body_limit) {
      return Fail(413,
                  "request body over " + std::to_string(port_.options.max_body_bytes) + " bytes");
    }
    if (ec == http::error::header_limit) {
      return Fail(
          431, "request header over " + std::to_string(port_.options.max_header_bytes) + " bytes");
    }
    if (ec && ec != http::error::need_more) {
      return Fail(400, "malformed request: " + ec.message() + " (" + Describe() + ")");
    }
    // Beast takes a request whose Transfer-Encoding does not end in chunked as bodiless; its
    // body would then be read as the next request. RFC 9112 6.3: 400.
    if (parser_->is_header_done() && !parser_->chunked() &&
        parser_->get().count(http::field::transfer_encoding) > 0) {
      return Fail(400,
                  "malformed request: a Transfer-Encoding other than chunked (" + Describe() + ")");
    }
    if (parser_->is_done()) return Answer();
    // Beast bounds the header; past it, only a chunk's size line or the trailer stays
    // unconsumed, and it gets the header's bound.
    if (parser_->is_header_done() &&
        pending_.size() > static_cast<size_t>(port_.options.max_header_bytes)) {
      return Fail(400, "malformed request: a chunk size line or trailer over " +
                           std::to_string(port_.options.max_header_bytes) + " bytes");
    }
    if (parser_->is_header_done()) MaybeContinue();
    WaitRead();
  }

  // What the request was, for an error's text: its method and target once known.
  std::string Describe() const {
    if (!parser_ || !parser_->is_header_done()) return "in its header";
    const auto& m = parser_->get();
    return std::string(m.method_string()) + " " + std::string(m.target());
  }

  // "Expect: 100-continue": the client waits for a go-ahead before its body. The interim
  // answer is a few bytes on a connection that has written nothing since the last response,
  // so it is sent at once; should the socket not take it whole, the client sends its body
  // after its own wait, within request_timeout or not.
  void MaybeContinue() {
    if (continued_ || parser_->get().version() < 11) return;
    const auto expect = parser_->get()[http::field::expect];
    if (!EqualsIgnoringCase(expect, "100-continue")) return;
    continued_ = true;
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    asio::error_code ignored;
    socket_.send(asio::buffer(kContinue.data(), kContinue.size()), 0, ignored);
  }

  void Answer() {
    auto& message = parser_->get();
    AdminRequest request;
    request.method = std::string(message.method_string());
    const std::string_view target = message.target();
    const size_t question = target.find('?');
    request.path = std::string(target.substr(0, question));
    if (question != target.npos) request.query = std::string(target.substr(question + 1));
    request.authorization = std::string(message[http::field::authorization]);
    request.body = std::move(message.body());
    request.peer = peer_;
    const bool head = message.method() == http::verb::head;
    ++served_;
    const bool keep_alive = message.keep_alive() && !port_.stopping &&
                            served_ < port_.options.max_requests_per_connection;
    parser_.reset();
    continued_ = false;
    AdminResponse response = CheckedResponse(port_.Route(request, head), request.path);
    port_.Count(response.status);
    Write(SerializeResponse(response, keep_alive, head), keep_alive);
  }

  // Answers a request that cannot be served (status 400, 413 or 431) and ends the connection
  // without reading more of it.
  void Fail(int status, const std::string& message) {
    parser_.reset();
    Release(pending_);
    port_.Count(status);
    Write(SerializeResponse(AdminResponse{status, "text/plain", message + "\n", {}}, false, false),
          false);
  }

  void Write(std::string bytes, bool keep_alive) {
    phase_ = Phase::kWriting;
    out_ = std::move(bytes);
    SetDeadline(port_.options.write_timeout, Deadline::kWriting);
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this(), keep_alive](const asio::error_code& ec, size_t) {
                        if (self->closed_) return;
                        if (ec) return self->Close();
                        self->OnWritten(keep_alive);
                      });
  }

  void OnWritten(bool keep_alive) {
    Release(out_);
    if (!keep_alive || port_.stopping) return Linger();
    if (!pending_.empty()) {  // the next request has begun already (pipelined)
      BeginRequest();
      return Parse();
    }
    Release(pending_);
    phase_ = Phase::kIdle;
    SetDeadline(port_.options.idle_timeout, Deadline::kIdle);
    WaitRead();
  }

  void Linger() {
    phase_ = Phase::kLinger;
    parser_.reset();
    Release(pending_);
    asio::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    SetDeadline(kLingerTime, Deadline::kLinger);
    WaitRead();
  }

  Port& port_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  const std::string source_;
  const std::string peer_;
  Phase phase_ = Phase::kRequest;
  Deadline deadline_ = Deadline::kRequest;
  uint64_t deadline_generation_ = 0;
  bool closed_ = false;
  bool continued_ = false;  // 100 Continue sent for the request being read
  int64_t served_ = 0;      // requests answered on this connection
  size_t lingered_ = 0;     // bytes dropped while lingering
  std::string pending_;     // input the parser has not consumed
  std::optional<Parser> parser_;
  std::string out_;  // the response being written
};

void Port::Accept() {
  acceptor.async_accept([this](const asio::error_code& ec, tcp::socket socket) {
    if (stopping || ec == asio::error::operation_aborted) return;
    if (ec) {
      // A failed accept must not stop the port, nor, out of descriptors, spin.
      accept_errors.Add();
      if (!OutOfResources(ec)) return Accept();
      accept_backoff.expires_after(kAcceptBackoff);
      accept_backoff.async_wait([this](const asio::error_code& wait_ec) {
        if (!wait_ec && !stopping) Accept();
      });
      return;
    }
    Admit(std::move(socket));
    Accept();
  });
}

void Port::Admit(tcp::socket socket) {
  asio::error_code ec;
  const tcp::endpoint remote = socket.remote_endpoint(ec);
  if (ec) return;  // gone already; the socket closes as it goes out of scope
  std::string source = SourceOf(remote.address());
  const auto of_source = per_source.find(source);
  if (of_source != per_source.end() && of_source->second >= options.max_per_source &&
      !EvictOldestSlow(&source)) {
    refused_per_source.Add();
    return;
  }
  if (static_cast<int64_t>(connections.size()) >= options.max_connections &&
      !EvictOldestSlow(nullptr)) {
    refused_cap.Add();
    return;
  }
  accepted.Add();
  ++per_source[source];
  open.fetch_add(1, std::memory_order_relaxed);
  auto connection = std::make_shared<AdminConnection>(*this, std::move(socket), std::move(source),
                                                      FormatEndpoint(remote));
  connection->registry = connections.insert(connections.end(), connection);
  connection->Start();
}

// Closes the oldest connection (of `source`, when given) that has not sent a whole request.
bool Port::EvictOldestSlow(const std::string* source) {
  for (const std::shared_ptr<AdminConnection>& c : connections) {
    if (c->slow() && (source == nullptr || c->source() == *source)) {
      slow_clients_closed.Add();
      c->Close();  // erases it from `connections`: the loop ends here
      return true;
    }
  }
  return false;
}

void Port::CloseAll() {
  asio::error_code ignored;
  acceptor.close(ignored);
  accept_backoff.cancel();
  while (!connections.empty()) connections.front()->Close();
  guard.reset();
  // What is still queued (the aborted waits of closed connections) is destroyed with io.
  io.stop();
}

AdminResponse Port::Route(const AdminRequest& request, bool head) {
  const auto it = routes.find(request.path);
  if (it == routes.end()) return {404, "text/plain", "no such path: " + request.path + "\n", {}};
  const Routes& r = it->second;
  const AdminHandler* handler = nullptr;
  if (request.method == "GET" || head) handler = r.get ? &r.get : nullptr;
  if (request.method == "POST") handler = r.post ? &r.post : nullptr;
  if (handler == nullptr) {
    std::string allow = r.get ? "GET, HEAD" : "";
    if (r.post) allow += allow.empty() ? "POST" : ", POST";
    return {405,
            "text/plain",
            request.method + " is not allowed on " + request.path + "\n",
            {{"Allow", allow}}};
  }
  try {  // a throwing handler must not end the port's thread
    return (*handler)(request);
  } catch (const std::exception& e) {
    return {
        500, "text/plain", "the handler of " + request.path + " failed: " + e.what() + "\n", {}};
  }
}

}  // namespace

struct AdminPort::Impl : Port {
  using Port::Port;
};

AdminPort::AdminPort(AdminPortOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

AdminPort::~AdminPort() { Stop(); }

void AdminPort::Get(std::string path, AdminHandler handler) {
  LIMITER_CHECK(!impl_->started, "AdminPort::Get(" + path + ") after Start");
  impl_->routes[std::move(path)].get = std::move(handler);
}

void AdminPort::Post(std::string path, AdminHandler handler) {
  LIMITER_CHECK(!impl_->started, "AdminPort::Post(" + path + ") after Start");
  impl_->routes[std::move(path)].post = std::move(handler);
}

Status AdminPort::Start() {
  Impl& p = *impl_;
  const AdminPortOptions& o = p.options;
  if (p.started.exchange(true)) return Error{"admin port: started already"};
  if (p.stopping) return Error{"admin port: stopped before it started"};
  const auto at_least = [](const char* name, int64_t value, int64_t least) -> Status {
    if (value >= least) return Status::Ok();
    return Error{"admin port: " + std::string(name) + " must be at least " + std::to_string(least) +
                 ", got " + std::to_string(value)};
  };
  for (const Status& checked :
       {at_least("max_connections", o.max_connections, 1),
        at_least("max_per_source", o.max_per_source, 1),
        at_least("max_header_bytes", o.max_header_bytes, 256),
        at_least("max_body_bytes", o.max_body_bytes, 0),
        at_least("max_requests_per_connection", o.max_requests_per_connection, 1),
        at_least("request_timeout (ms)", o.request_timeout.count(), 1),
        at_least("idle_timeout (ms)", o.idle_timeout.count(), 1),
        at_least("write_timeout (ms)", o.write_timeout.count(), 1)}) {
    if (!checked.ok()) return checked;
  }
  if (o.max_header_bytes > (int64_t{1} << 30)) {
    return Error{"admin port: max_header_bytes must be at most 1 GiB, got " +
                 std::to_string(o.max_header_bytes)};
  }
  const std::string where = "cannot listen on " + o.listen + " (admin port): ";
  const std::optional<HostPort> hp = ParseHostPort(o.listen);
  if (!hp) return Error{where + "expected HOST:PORT or [V6]:PORT"};
  asio::error_code ec;
  tcp::resolver resolver(p.io);
  const auto found = resolver.resolve(hp->host, std::to_string(hp->port),
                                      tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec) return Error{where + ec.message()};
  if (found.empty()) return Error{where + "the host has no address"};
  const tcp::endpoint ep = found.begin()->endpoint();
  p.acceptor.open(ep.protocol(), ec);
  if (!ec) p.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) p.acceptor.bind(ep, ec);
  if (!ec) p.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    asio::error_code ignored;
    p.acceptor.close(ignored);
    return Error{where + ec.message()};
  }
  const tcp::endpoint local = p.acceptor.local_endpoint(ec);
  if (ec) return Error{where + ec.message()};
  p.bound = FormatEndpoint(local);
  p.Accept();
  p.thread = std::thread([&p] {
    p.thread_id = std::this_thread::get_id();
    p.io.run();
    p.thread_id = std::thread::id();  // ids of ended threads are reused
  });
  return Status::Ok();
}

void AdminPort::Stop() {
  Impl& p = *impl_;
  if (!p.stopping.exchange(true) && p.thread.joinable()) {
    asio::post(p.io, [&p] { p.CloseAll(); });
  }
  if (p.thread_id.load() == std::this_thread::get_id()) return;  // a handler: cannot join
  MutexLock lock(p.join_mu);
  if (p.thread.joinable()) p.thread.join();
}

std::string AdminPort::address() const { return impl_->bound; }

AdminPortStats AdminPort::stats() const {
  const Impl& p = *impl_;
  AdminPortStats s;
  s.accepted = p.accepted.Get();
  s.refused_per_source = p.refused_per_source.Get();
  s.refused_cap = p.refused_cap.Get();
  s.slow_clients_closed = p.slow_clients_closed.Get();
  s.request_timeouts = p.request_timeouts.Get();
  s.idle_timeouts = p.idle_timeouts.Get();
  s.write_timeouts = p.write_timeouts.Get();
  s.accept_errors = p.accept_errors.Get();
  s.open = p.open.load(std::memory_order_relaxed);
  return s;
}

uint64_t AdminPort::responses(int status) const {
  return status >= 0 && status <= kAdminMaxStatus ? impl_->responses[status].Get() : 0;
}

std::optional<std::string> AdminSource(std::string_view address) {
  asio::error_code ec;
  const asio::ip::address a = asio::ip::make_address(std::string(address), ec);
  if (ec) return std::nullopt;
  return SourceOf(a);
}

}  // namespace limiter
