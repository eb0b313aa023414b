#include "server/connection.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <asio.hpp>
#include <asio/ssl/context.hpp>
#include <deque>
#include <optional>
#include <vector>

#include "common/mutex.h"
#include "protocol/read_buffer.h"
#include "server/durable_store.h"
#include "server/node_certificates.h"

namespace limiter {
namespace {

using asio::ip::tcp;
using Time = std::chrono::steady_clock::time_point;

// Bounds on one read's space. The low one is what a peer that sent a single byte costs; the
// high one is what a burst may grow the buffer to before its frames are handed on.
constexpr size_t kMinReadBytes = 512;
constexpr size_t kMaxReadBytes = 64 * 1024;
// A reply buffer larger than this after a write was a burst's: it is given back at once.
constexpr size_t kKeepOutputBytes = 64 * 1024;
// A connection holding buffered replies whose write has made no progress for this long is
// not reading them: over the node's reply budget, the largest of these are closed.
constexpr std::chrono::seconds kStalledAfter{1};
// A connection's turn on its worker: once it has handled frames of this many ops (a frame
// counts at least one), the frames it has waiting are left for a turn posted behind the
// other connections' ready work. One peer's burst of large frames then delays another's
// small frame by about a frame, not by the whole burst.
constexpr size_t kOpsPerTurn = 256;

// With nothing unread, a ReadBuffer's free space is all the memory it holds.
size_t EmptyBufferBytes(ReadBuffer& buffer) { return buffer.Space(0).size(); }

template <typename T>
void FreeVector(std::vector<T>& v) {
  std::vector<T>().swap(v);
}

struct SslFree {
  void operator()(SSL* ssl) const { SSL_free(ssl); }
};

}  // namespace

// One client connection. Owned by the handlers in flight for it (each holds a shared_ptr):
// at any time one read or wait, and at most one write, so it ends when its socket closes
// and the last of them has run.
class Connection : public std::enable_shared_from_this<Connection> {
  friend class PreauthQueue;  // takes a waiting connection's slot (ReleasePreauth)

 public:
  Connection(tcp::socket socket, ConnectionSet& set, Admission admission)
      : socket_(std::move(socket)),
        set_(set),
        admission_(admission),
        preauth_held_(admission.preauth),
        session_(set.node_.authenticator().NewSession()) {}

  ~Connection() {
    if (handshaking_) EndHandshake();
    ReleasePreauth();
    set_.limits_.buffered.fetch_sub(static_cast<int64_t>(buffered_), std::memory_order_relaxed);
    Node::CountersOf(set_.worker_).connections_closed.Add();
    set_.connections_.erase(registry_it_);
    set_.limits_.open.fetch_sub(1, std::memory_order_relaxed);
  }

  asio::any_io_executor executor() { return socket_.get_executor(); }
  // Closed to make room for a newer connection before it authenticated (PreauthQueue).
  void Evict() {
    set_.preauth_evictions_.Add();
    if (handshaking_) {
      FailHandshake();
    } else {
      Close();
    }
  }

  // Bytes of replies this connection holds, and whether it has stopped taking them.
  size_t buffered() const { return buffered_; }
  bool Stalled(Time now) const { return writing_ && now - last_write_progress_ >= kStalledAfter; }

  void Start() {
    registry_it_ = set_.connections_.insert(set_.connections_.end(), weak_from_this());
    if (preauth()) set_.limits_.waiting.Add(shared_from_this());
    Node::CountersOf(set_.worker_).connections_opened.Add();
    asio::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    // Reads that follow a readiness wait must not block the worker (see Read).
    socket_.non_blocking(true, ignored);
    last_read_ = accepted_ = last_write_progress_ = std::chrono::steady_clock::now();
    if (set_.tls_ == nullptr) {
      Read();
      return;
    }
    // Nothing of TLS exists until the peer sends: a silent connection costs what a plain one
    // does (OpenSSL's handshake state is tens of KiB).
    WaitThen(tcp::socket::wait_read, &Connection::BeginTls, &Connection::OnWaitFailed);
  }

  void Close() {
    asio::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  // The reaper's visit: the deadlines, then idle memory.
  void Tick(Time now) {
    if (!socket_.is_open()) return;  // closed already; its last handlers are yet to run
    const bool before_auth = handshaking_ || (!ssl_ && set_.tls_) || !session_.authenticated;
    if (before_auth && !closing_ && now - accepted_ >= set_.auth_timeout_) {
      // The TLS handshake and the hello's proof, within auth_timeout of the accept. Counted
      // and its slots freed before the peer sees the close.
      set_.auth_timeouts_.Add();
      if (handshaking_) {
        FailHandshake();
      } else {
        Close();
      }
    } else if (in_.size() > 0 && !closing_ && now - frame_started_ >= set_.frame_timeout_) {
      set_.frame_timeouts_.Add();
      Close();
    } else if (session_.secret_tag != 0 && !set_.node_.authenticator().SessionValid(session_)) {
      // The secret it proved was removed: it proves the current one on a new connection.
      Node::CountersOf(set_.worker_).sessions_revoked.Add();
      Close();
    } else if (now - last_read_ >= set_.idle_timeout_) {
      set_.idle_timeouts_.Add();
      Close();
    } else if (now - last_read_ >= set_.reap_interval_) {
      FreeIdleMemory();
    }
  }

 private:
  // Three ways to read, by what the connection holds:
  //   - part of a frame: read straight into the buffer, whose space grows with what has
  //     arrived (doubling), never with the length the header declares;
  //   - an empty buffer kept from recent frames: read straight into it, as a busy connection
  //     does between frames (no wait, no sizing: the hot path);
  //   - no buffer (new, or idle and given back): wait until the peer sends, then make one the
  //     size of what it sent. Idle and half-open connections cost no read buffer.
  // TLS reads first and waits only when OpenSSL says it would block: a read that finds
  // nothing also gives OpenSSL's record buffer back (SSL_MODE_RELEASE_BUFFERS).
  void Read() {
    if (reading_ || closing_ || turn_posted_) return;
    if (pending_.size() > set_.options_.max_output_bytes) return;  // resumed when writes drain
    if (buffered_ > 0 && OverBudget()) {
      // A connection holding replies reads no more until the node is within its budget
      // again (the reaper resumes it); one that has taken all of its replies reads on.
      budget_paused_ = true;
      return;
    }
    budget_paused_ = false;
    reading_ = true;
    if (ssl_) {
      // Posted, not called: a peer that keeps sending must not deepen the stack.
      asio::post(socket_.get_executor(), [self = shared_from_this()] { self->TlsRead(); });
      return;
    }
    if (in_.size() > 0 || EmptyBufferBytes(in_) > 0) {
      const std::span<uint8_t> space =
          in_.Space(std::clamp(in_.size(), kMinReadBytes, kMaxReadBytes));
      socket_.async_read_some(asio::buffer(space.data(), space.size()),
                              [self = shared_from_this()](const asio::error_code& ec, size_t n) {
                                self->OnRead(ec, n);
                              });
      return;
    }
    socket_.async_wait(tcp::socket::wait_read,
                       [self = shared_from_this()](const asio::error_code& ec) {
                         if (ec) {
                           self->OnRead(ec, 0);
                         } else {
                           self->ReadAvailable();
                         }
                       });
  }

  void ReadAvailable() {
    asio::error_code ec;
    const size_t available = socket_.available(ec);
    const std::span<uint8_t> space = in_.Space(std::clamp(available, kMinReadBytes, kMaxReadBytes));
    const size_t n = socket_.read_some(asio::buffer(space.data(), space.size()), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      reading_ = false;  // readiness without data: wait again
      Read();
      return;
    }
    OnRead(ec, n);
  }

  void OnRead(const asio::error_code& ec, size_t n) {
    reading_ = false;
    if (releasing_) {
      // FreeIdleMemory cancelled this read to take its buffer; wait without one instead.
      releasing_ = false;
      if (ec == asio::error::operation_aborted && socket_.is_open()) {
        in_ = ReadBuffer();
        Read();
        return;
      }
    }
    if (ec) {
      if (ec != asio::error::operation_aborted && in_.size() > 0) {
        CountBad(BadFrame::kTruncated);  // the peer left mid-frame
      }
      Close();
      return;
    }
    const Time now = std::chrono::steady_clock::now();
    if (in_.size() == 0) frame_started_ = now;
    in_.Commit(n);
    last_read_ = now;
    Process(now);
  }

  void Process(Time now) {
    bool handled = false;
    size_t ops = 0;
    while (!closing_) {
      const uint32_t max_frame = set_.node_.authenticator().FrameLimit(session_);
      const FrameResult frame = DecodeFrame(in_.readable(), max_frame);
      if (frame.status == FrameStatus::kNeedMore) break;
      if (ops >= kOpsPerTurn) {
        PostTurn();  // no read meanwhile: what waits is already in in_
        break;
      }
      if (frame.status != FrameStatus::kFrame) {
        // Framing is lost: say why, then close this connection only.
        CountBad(frame.status == FrameStatus::kEmpty ? BadFrame::kEmpty : BadFrame::kTooLarge);
        set_.node_.ErrorFrame(set_.worker_, DescribeFrameError(frame, max_frame), pending_);
        closing_ = true;
        break;
      }
      const size_t reply_start = pending_.size();
      if (set_.node_.HandleFrame(set_.worker_, session_, frame.body, pending_) ==
          Node::AfterFrame::kClose) {
        closing_ = true;
      }
      if (session_.authenticated && preauth()) ReleasePreauth();
      if (const uint64_t seq = Node::TakeSyncNeeded(set_.worker_); seq != 0) {
        held_.push_back({reply_start, seq});
      }
      in_.Consume(frame.consumed);
      ops += std::max<size_t>(1, Node::FrameOps(set_.worker_));
      handled = true;
    }
    if (handled) frame_started_ = now;  // what is left began in this read
    // A buffer grown for a large frame leaves with it.
    if (in_.size() == 0 && EmptyBufferBytes(in_) > kMaxReadBytes) in_ = ReadBuffer();
    Write();
    Account();
    Read();
  }

 public:
  // The reaper's resumption of a connection that stopped reading for the node's budget.
  void ResumeIfWithinBudget() {
    if (budget_paused_ && socket_.is_open() && !OverBudget()) Read();
  }

 private:
  bool OverBudget() const {
    return set_.limits_.buffered.load(std::memory_order_relaxed) > set_.options_.reply_budget_bytes;
  }
  // Brings the node's count of buffered reply bytes up to date with this connection's.
  void Account() {
    const size_t now_held = pending_.size() + out_.size();
    if (now_held == buffered_) return;
    set_.limits_.buffered.fetch_add(
        static_cast<int64_t>(now_held) - static_cast<int64_t>(buffered_),
        std::memory_order_relaxed);
    buffered_ = now_held;
  }
  // Gives back its pre-auth slot, once: when it authenticates, when it ends, or when the
  // acceptor takes the slot for a newer connection (from that thread: hence the atomic).
  bool ReleasePreauth() {
    if (!preauth_held_.exchange(false, std::memory_order_relaxed)) return false;
    set_.limits_.preauth.fetch_sub(1, std::memory_order_relaxed);
    set_.limits_.preauth_sources.Remove(admission_.source);
    return true;
  }
  bool preauth() const { return preauth_held_.load(std::memory_order_relaxed); }

  void PostTurn() {
    turn_posted_ = true;
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      self->turn_posted_ = false;
      if (self->socket_.is_open()) self->Process(std::chrono::steady_clock::now());
    });
  }

  void Write() {
    if (writing_ || pending_.empty()) {
      if (!writing_ && closing_) Close();
      return;
    }
    const size_t ready = Sendable();
    if (ready == 0) return;
    writing_ = true;
    last_write_progress_ = std::chrono::steady_clock::now();
    if (ready == pending_.size()) {
      out_.swap(pending_);
      pending_.clear();
    } else {
      // The replies before the first one still waiting for its sync go now; the rest wait.
      out_.assign(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(ready));
      pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(ready));
      for (Held& h : held_) h.start -= ready;
    }
    if (ssl_) {
      out_sent_ = 0;
      TlsWrite();
      return;
    }
    asio::async_write(
        socket_, asio::buffer(out_),
        [self = shared_from_this()](const asio::error_code& ec, size_t) { self->OnWritten(ec); });
  }

  // How many bytes of pending_ may go: up to the first reply whose frame's durable changes are
  // not synced yet (sync durability). If that is none, a wake-up is registered that calls
  // Write again on this worker's thread once that frame's batch is synced.
  size_t Sendable() {
    if (held_.empty()) return pending_.size();
    DurableStore& durable = *set_.node_.durable();
    while (!held_.empty() && durable.Synced(held_.front().seq)) held_.pop_front();
    if (held_.empty()) return pending_.size();
    if (held_.front().start > 0) return held_.front().start;
    if (durable.Failed(held_.front().seq)) {
      // Its batch could not be written: no reply from it on is acknowledged. The connection
      // ends, so the gateway falls back by class at once (new ops get StoreError).
      Close();
      return 0;
    }
    if (!sync_waiting_) {
      sync_waiting_ = true;
      durable.WhenSynced(held_.front().seq, [weak = weak_from_this(), ex = socket_.get_executor()] {
        asio::post(ex, [weak] {
          if (auto self = weak.lock()) {
            self->sync_waiting_ = false;
            self->Write();
          }
        });
      });
    }
    return 0;
  }

  void OnWritten(const asio::error_code& ec) {
    writing_ = false;
    out_.clear();
    if (out_.capacity() > kKeepOutputBytes) FreeVector(out_);
    last_write_progress_ = std::chrono::steady_clock::now();
    Account();
    if (ec) {
      Close();
      return;
    }
    Write();
    Read();
  }

  // ----- TLS: OpenSSL on the non-blocking socket; a call that would block waits for the
  // socket, then is made again (a write with the same bytes, as OpenSSL requires). All on
  // the worker's thread, so a read and a write are never inside OpenSSL at once.

  using Step = void (Connection::*)();
  using Failure = void (Connection::*)(const asio::error_code&);

  // After the socket is ready for `what`: `next`, or `failed` (closed, cancelled).
  void WaitThen(tcp::socket::wait_type what, Step next, Failure failed) {
    socket_.async_wait(what, [self = shared_from_this(), next, failed](const asio::error_code& ec) {
      if (ec) {
        ((*self).*failed)(ec);
      } else {
        ((*self).*next)();
      }
    });
  }
  // What OpenSSL wants before `ssl_result` can go on: a wait, or nullopt (a failure).
  std::optional<tcp::socket::wait_type> WantOf(int ssl_result) {
    switch (SSL_get_error(ssl_.get(), ssl_result)) {
      case SSL_ERROR_WANT_READ:
        return tcp::socket::wait_read;
      case SSL_ERROR_WANT_WRITE:
        return tcp::socket::wait_write;
      default:
        return std::nullopt;
    }
  }

  // The first bytes have come: a handshake begins, if fewer than max_tls_handshakes are in
  // progress over the node (each holds OpenSSL's state until it ends, at most frame_timeout).
  // OpenSSL then works on the non-blocking socket itself: no BIO pair, no stream buffers.
  void BeginTls() {
    if (!socket_.is_open()) return;  // closed meanwhile (idle timeout, the node stopping)
    // Peers are held to neither cap: no number of strangers' handshakes keeps a node out.
    if (!admission_.peer) {
      if (set_.limits_.handshakes.load(std::memory_order_relaxed) >=
              set_.options_.max_tls_handshakes ||
          !set_.limits_.handshake_sources.TryAdd(admission_.source,
                                                 set_.options_.max_tls_handshakes_per_source)) {
        set_.tls_handshakes_refused_.Add();
        Close();
        return;
      }
    }
    set_.limits_.handshakes.fetch_add(1, std::memory_order_relaxed);
    handshaking_ = true;  // within auth_timeout of the accept (Tick)
    frame_started_ = std::chrono::steady_clock::now();
    ssl_.reset(SSL_new(set_.tls_->native_handle()));
    if (!ssl_ || SSL_set_fd(ssl_.get(), static_cast<int>(socket_.native_handle())) != 1) {
      FailHandshake();
      return;
    }
    SSL_set_accept_state(ssl_.get());
    Handshake();
  }

  void Handshake() {
    if (!socket_.is_open()) return FailHandshake();  // closed by the frame timeout
    ERR_clear_error();
    const int r = SSL_do_handshake(ssl_.get());
    if (r == 1) {
      EndHandshake();
      if (set_.limits_.node_certs) {
        Authenticator::NoteTlsNode(session_, set_.limits_.node_certs->IsNode(ssl_.get()));
      }
      last_read_ = std::chrono::steady_clock::now();
      Read();
      return;
    }
    if (const auto want = WantOf(r)) {
      WaitThen(*want, &Connection::Handshake, &Connection::OnWaitFailed);
      return;
    }
    // Not TLS, no client certificate or one the CA did not sign: nothing to answer.
    FailHandshake();
  }
  void EndHandshake() {
    handshaking_ = false;
    set_.limits_.handshakes.fetch_sub(1, std::memory_order_relaxed);
    if (!admission_.peer) set_.limits_.handshake_sources.Remove(admission_.source);
  }
  void FailHandshake() {
    if (handshaking_) EndHandshake();
    set_.tls_handshake_failures_.Add();
    Close();
  }
  void OnWaitFailed(const asio::error_code&) {
    if (handshaking_) {
      FailHandshake();
    } else {
      Close();  // before any byte: closed by the idle timeout or the node stopping
    }
  }

  void TlsRead() {
    // A closed socket's descriptor may belong to another connection by now: never read it.
    if (!socket_.is_open()) return OnRead(asio::error::operation_aborted, 0);
    const std::span<uint8_t> space =
        in_.Space(std::clamp(in_.size(), kMinReadBytes, kMaxReadBytes));
    ERR_clear_error();
    const int n = SSL_read(ssl_.get(), space.data(), static_cast<int>(space.size()));
    if (n > 0) return OnRead({}, static_cast<size_t>(n));
    if (const auto want = WantOf(n)) {
      WaitThen(*want, &Connection::TlsRead, &Connection::OnReadFailed);
      return;
    }
    OnRead(asio::error::eof, 0);  // close_notify, the peer gone, or a TLS error
  }
  void OnReadFailed(const asio::error_code& ec) { OnRead(ec, 0); }

  void TlsWrite() {
    if (!socket_.is_open()) return OnWritten(asio::error::operation_aborted);
    while (out_sent_ < out_.size()) {
      ERR_clear_error();
      const size_t left = std::min<size_t>(out_.size() - out_sent_, 1u << 30);
      const int n = SSL_write(ssl_.get(), out_.data() + out_sent_, static_cast<int>(left));
      if (n > 0) {
        out_sent_ += static_cast<size_t>(n);
        last_write_progress_ = std::chrono::steady_clock::now();
        continue;
      }
      if (const auto want = WantOf(n)) {
        WaitThen(*want, &Connection::TlsWrite, &Connection::OnWritten);
        return;
      }
      return OnWritten(asio::error::broken_pipe);
    }
    OnWritten({});
  }

  // Gives back the buffers of a connection that has gone quiet; they are made again as data
  // comes. A read in flight into the empty read buffer is cancelled for it, when it is the
  // connection's only operation (a socket's cancel would stop a write too).
  void FreeIdleMemory() {
    if (pending_.empty()) FreeVector(pending_);
    if (writing_) return;
    FreeVector(out_);
    Account();
    if (ssl_) {
      if (in_.size() == 0) in_ = ReadBuffer();  // a TLS read waits without a buffer
      return;
    }
    if (in_.size() > 0 || EmptyBufferBytes(in_) == 0 || releasing_) return;
    if (!reading_) {
      in_ = ReadBuffer();  // paused, or about to read: nothing points into it
      return;
    }
    releasing_ = true;
    asio::error_code ignored;
    socket_.cancel(ignored);
  }

  void CountBad(BadFrame kind) {
    Node::CountersOf(set_.worker_).bad_frames[static_cast<size_t>(kind)].Add();
  }

  tcp::socket socket_;
  std::unique_ptr<SSL, SslFree> ssl_;  // TLS over socket_'s descriptor; null: plain TCP
  ConnectionSet& set_;
  std::list<std::weak_ptr<Connection>>::iterator registry_it_;
  Admission admission_;             // its source, whether it is a peer's
  std::atomic<bool> preauth_held_;  // it holds a pre-auth slot (admission_.preauth at first)
  Session session_;
  ReadBuffer in_;
  std::vector<uint8_t> pending_;  // replies not yet handed to the socket
  std::vector<uint8_t> out_;      // the write in flight
  size_t out_sent_ = 0;           // TLS: how much of out_ OpenSSL has taken
  Time last_read_;                // the idle timeout runs from here
  Time accepted_;                 // auth_timeout runs from here
  Time last_write_progress_;      // a write began or moved on (Stalled)
  size_t buffered_ = 0;           // pending_ + out_ as last counted in limits.buffered
  Time frame_started_;            // when the unread bytes in in_ began to arrive
  bool reading_ = false;
  bool writing_ = false;
  bool closing_ = false;
  // Sync durability: the replies in pending_ from `start` on wait for batch `seq` (one entry per
  // frame that wrote durable keys, in order), and whether a wake-up is registered. Replies
  // before the first waiting one are sent; memory-only frames after it wait only because
  // replies go in order.
  struct Held {
    size_t start;
    uint64_t seq;
  };
  std::deque<Held> held_;
  bool sync_waiting_ = false;
  bool releasing_ = false;      // the read in flight was cancelled to free its buffer
  bool turn_posted_ = false;    // frames wait in in_ for a posted turn (PostTurn); no read
  bool handshaking_ = false;    // TLS: the handshake has begun and not ended
  bool budget_paused_ = false;  // not reading: the node's replies are over the budget
};

ConnectionSet::ConnectionSet(Node& node, Node::Worker& worker, const ServerOptions& options,
                             ConnectionLimits& limits, asio::ssl::context* tls)
    : node_(node),
      worker_(worker),
      options_(options),
      limits_(limits),
      tls_(tls),
      idle_timeout_(options.idle_timeout_ms),
      frame_timeout_(options.frame_timeout_ms),
      auth_timeout_(options.auth_timeout_ms),
      reap_interval_(ReapInterval(options)) {}

void ConnectionSet::Add(tcp::socket socket, Admission admission) {
  std::make_shared<Connection>(std::move(socket), *this, admission)->Start();
}

void ConnectionSet::Reap(Time now) {
  EnforceBudget(now);
  for (auto it = connections_.begin(); it != connections_.end();) {
    std::shared_ptr<Connection> c = it->lock();
    ++it;  // before c goes: its end erases the entry `it` was on
    if (c) {
      c->Tick(now);
      c->ResumeIfWithinBudget();
    }
  }
}

void ConnectionSet::EnforceBudget(Time now) {
  const int64_t over =
      limits_.buffered.load(std::memory_order_relaxed) - options_.reply_budget_bytes;
  if (over <= 0) return;
  // Every worker does this for its own connections: each closes its largest stalled ones
  // until they cover the whole excess (a closed connection's bytes leave the count only
  // once its handlers have run, so the next reap sees what is left).
  std::vector<std::shared_ptr<Connection>> stalled;
  for (auto& weak : connections_) {
    if (auto c = weak.lock(); c && c->buffered() > 0 && c->Stalled(now)) stalled.push_back(c);
  }
  std::sort(stalled.begin(), stalled.end(),
            [](const auto& a, const auto& b) { return a->buffered() > b->buffered(); });
  int64_t covered = 0;
  for (auto& c : stalled) {
    if (covered >= over) break;
    covered += static_cast<int64_t>(c->buffered());
    budget_closes_.Add();
    c->Close();
  }
}

void PreauthQueue::Add(std::shared_ptr<Connection> c) {
  const auto now = std::chrono::steady_clock::now();
  MutexLock lock(mu_);
  // Entries older than the auth timeout have authenticated or been closed by then: they go
  // from the front, so the queue holds what the last auth_timeout accepted, at most.
  while (!entries_.empty() &&
         (now - entries_.front().added >= horizon_ || entries_.front().connection.expired())) {
    entries_.pop_front();
  }
  entries_.push_back({std::move(c), now});
}

bool PreauthQueue::EvictOldest() {
  std::shared_ptr<Connection> victim;
  {
    MutexLock lock(mu_);
    while (!entries_.empty() && !victim) {
      std::shared_ptr<Connection> c = entries_.front().connection.lock();
      entries_.pop_front();
      if (!c) continue;
      // Its slot is taken here, at once, so that the count never passes the cap.
      if (c->ReleasePreauth()) {
        victim = std::move(c);
      } else {
        // Authenticated since: its last reference, if this is it, goes on its worker.
        const asio::any_io_executor worker = c->executor();
        asio::post(worker, [c = std::move(c)] {});
      }
    }
  }
  if (!victim) return false;
  // Closed on its own worker, where its last reference must go too.
  const asio::any_io_executor worker = victim->executor();
  asio::post(worker, [c = std::move(victim)] { c->Evict(); });
  return true;
}

bool ConnectionLimits::IsPeer(const asio::ip::address& address) const {
  const std::shared_ptr<const std::vector<asio::ip::address>> list = peers.load();
  return list && std::find(list->begin(), list->end(), address) != list->end();
}

void ConnectionSet::CloseAll() {
  // Copy first: a connection that ends removes itself from the list.
  std::vector<std::shared_ptr<Connection>> open;
  for (auto& weak : connections_) {
    if (auto c = weak.lock()) open.push_back(std::move(c));
  }
  for (auto& c : open) c->Close();
}

std::chrono::milliseconds ReapInterval(const ServerOptions& options) {
  const int64_t shorter =
      std::min({options.idle_timeout_ms, options.frame_timeout_ms, options.auth_timeout_ms});
  return std::chrono::milliseconds(std::clamp<int64_t>(shorter / 4, 50, 1000));
}

}  // namespace limiter
