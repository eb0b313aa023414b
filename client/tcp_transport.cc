#include "client/tcp_transport.h"

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <charconv>
#include <deque>
#include <optional>
#include <vector>

#include "protocol/frame_codec.h"
#include "protocol/handshake.h"
#include "protocol/op.h"
#include "protocol/read_buffer.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"

namespace limiter {
namespace {

using asio::ip::tcp;
constexpr size_t kMaxOpsPerFrame = 256;
constexpr uint32_t kMaxReplyBytes = 64u << 20;
constexpr std::string_view kClientName = "gateway";

}  // namespace

class TcpTransport::Link : public std::enable_shared_from_this<Link> {
 public:
  Link(asio::io_context& io, std::string address, const NodeAccess& access)
      : io_(io), address_(std::move(address)), socket_(io), resolver_(io), tls_ctx_(access.tls) {
    if (!access.secret.empty()) handshake_.emplace(access.secret, address_);
  }

  void Send(OpSpec op, Callback done) {
    AddOp(builder_, next_id_, op);
    batch_.push_back({next_id_++, std::move(done)});
    if (batch_.size() >= kMaxOpsPerFrame) {
      Flush();
    } else if (!flush_posted_) {
      flush_posted_ = true;
      asio::post(io_, [self = shared_from_this()] {
        self->flush_posted_ = false;
        self->Flush();
      });
    }
  }

  // Closes the connection and drops its calls without calling them back: for a transport
  // being destroyed, whose callers may be gone already.
  void Abandon() {
    asio::error_code ignored;
    Socket().close(ignored);
    resolver_.cancel();
    state_ = State::kClosed;
    in_flight_.clear();
    batch_.clear();
    builder_.Clear();
    out_.clear();
    pending_out_.clear();
    in_.Clear();
    writing_ = false;
    awaiting_proof_ = false;
  }

  void Close(const std::string& why) {
    std::vector<Pending> failed;
    for (Frame& f : in_flight_) {
      for (Pending& p : f) failed.push_back(std::move(p));
    }
    for (Pending& p : batch_) failed.push_back(std::move(p));
    Abandon();
    for (Pending& p : failed) p.done(CallResult{CallStatus::kConnection, why, {}});
  }

 private:
  struct Pending {
    uint64_t id;
    Callback done;
  };
  using Frame = std::vector<Pending>;
  // kHandshake: connected, the nonce hello sent, waiting for the challenge; frames queue.
  enum class State { kClosed, kConnecting, kHandshake, kOpen };
  using TlsStream = asio::ssl::stream<tcp::socket>;

  tcp::socket& Socket() { return tls_ ? tls_->next_layer() : socket_; }
  // Each in-flight operation on a TLS stream keeps it alive: a reconnect makes a new one.
  template <class Handler>
  void AsyncWrite(asio::const_buffer bytes, Handler handler) {
    if (!tls_) {
      asio::async_write(socket_, bytes, std::move(handler));
      return;
    }
    asio::async_write(*tls_, bytes,
                      [stream = tls_, handler = std::move(handler)](
                          const asio::error_code& ec, size_t n) mutable { handler(ec, n); });
  }
  template <class Handler>
  void AsyncReadSome(asio::mutable_buffer space, Handler handler) {
    if (!tls_) {
      socket_.async_read_some(space, std::move(handler));
      return;
    }
    tls_->async_read_some(
        space, [stream = tls_, handler = std::move(handler)](const asio::error_code& ec,
                                                             size_t n) mutable { handler(ec, n); });
  }

  void Flush() {
    if (batch_.empty()) return;
    if (state_ == State::kClosed) Connect();
    AppendFrame(pending_out_, builder_.Finish());
    builder_.Clear();
    in_flight_.push_back(std::move(batch_));
    batch_.clear();
    if (state_ == State::kOpen) Write();
  }

  void Connect() {
    state_ = State::kConnecting;
    if (tls_ctx_) tls_ = std::make_shared<TlsStream>(io_, *tls_ctx_);
    const size_t colon = address_.rfind(':');
    std::string host = address_.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    // A numeric address needs no resolver (whose first use starts a thread).
    asio::error_code ec;
    const asio::ip::address ip = asio::ip::make_address(host, ec);
    unsigned port = 0;
    auto [end, perr] =
        std::from_chars(address_.data() + colon + 1, address_.data() + address_.size(), port);
    if (!ec && perr == std::errc() && port <= 65535) {
      Socket().async_connect(
          tcp::endpoint(ip, static_cast<uint16_t>(port)),
          [self = shared_from_this()](const asio::error_code& ec) { self->Connected(ec); });
      return;
    }
    resolver_.async_resolve(
        host, address_.substr(colon + 1),
        [self = shared_from_this()](const asio::error_code& ec, tcp::resolver::results_type r) {
          if (ec) {
            self->Close("cannot resolve " + self->address_ + ": " + ec.message());
            return;
          }
          asio::async_connect(
              self->Socket(), r,
              [self](const asio::error_code& ec, const tcp::endpoint&) { self->Connected(ec); });
        });
  }

  void Connected(const asio::error_code& ec) {
    if (ec) {
      Close("cannot connect to " + address_ + ": " + ec.message());
      return;
    }
    asio::error_code ignored;
    Socket().set_option(tcp::no_delay(true), ignored);
    if (!tls_) {
      Secured();
      return;
    }
    tls_->async_handshake(
        asio::ssl::stream_base::client,
        [self = shared_from_this(), stream = tls_](const asio::error_code& ec) {
          if (ec) {
            self->Close("TLS handshake with " + self->address_ + ": " + ec.message());
            return;
          }
          self->Secured();
        });
  }

  // Connected, and over TLS when it is on: the secret's handshake, or open at once.
  void Secured() {
    if (handshake_) {
      state_ = State::kHandshake;
      RequestBuilder b;
      handshake_->BuildNonceHello(b, kClientName);
      hello_out_.clear();
      AppendFrame(hello_out_, b.Finish());
      writing_ = true;
      AsyncWrite(asio::buffer(hello_out_),
                 [self = shared_from_this()](const asio::error_code& ec, size_t) {
                   self->writing_ = false;
                   if (ec) {
                     self->Close("lost the connection to " + self->address_);
                     return;
                   }
                   self->Write();
                 });
      Read();
      return;
    }
    state_ = State::kOpen;
    Read();
    Write();
  }

  // A reply that belongs to the handshake: the challenge (then the proof goes out ahead of
  // every queued frame), or the node's proof. False when the connection had to close.
  bool Handshake(const wire::Reply& reply) {
    Status status;
    if (state_ == State::kHandshake) {
      RequestBuilder b;
      status = handshake_->BuildProofHello(reply, b, kClientName);
      if (status.ok()) {
        std::vector<uint8_t> proof;
        AppendFrame(proof, b.Finish());
        pending_out_.insert(pending_out_.begin(), proof.begin(), proof.end());
        state_ = State::kOpen;
        awaiting_proof_ = true;
      }
    } else {
      status = handshake_->CheckNode(reply);
      awaiting_proof_ = false;
    }
    if (!status.ok()) {
      Close(status.error());
      return false;
    }
    Write();
    return true;
  }

  void Write() {
    if (state_ != State::kOpen || writing_ || pending_out_.empty()) return;
    writing_ = true;
    out_.swap(pending_out_);
    pending_out_.clear();
    AsyncWrite(asio::buffer(out_), [self = shared_from_this()](const asio::error_code& ec, size_t) {
      self->writing_ = false;
      self->out_.clear();
      if (ec) {
        self->Close("lost the connection to " + self->address_);
        return;
      }
      self->Write();
    });
  }

  void Read() {
    const std::span<uint8_t> space = in_.Space(64 * 1024);
    AsyncReadSome(asio::buffer(space.data(), space.size()),
                  [self = shared_from_this()](const asio::error_code& ec, size_t n) {
                    if (!ec) self->in_.Commit(n);
                    if (ec) {
                      if (ec != asio::error::operation_aborted) {
                        self->Close("lost the connection to " + self->address_);
                      }
                      return;
                    }
                    if (self->Deliver()) self->Read();
                  });
  }

  // Hands every whole reply frame to its ops. False when the connection had to close.
  bool Deliver() {
    while (true) {
      const FrameResult f = DecodeFrame(in_.readable(), kMaxReplyBytes);
      if (f.status == FrameStatus::kNeedMore) break;
      const wire::Reply* reply =
          f.status == FrameStatus::kFrame ? VerifiedReply(f.body, aligned_) : nullptr;
      if (reply && (state_ == State::kHandshake || awaiting_proof_)) {
        const bool open = Handshake(*reply);
        if (!open) return false;
        in_.Consume(f.consumed);
        continue;
      }
      if (!reply || in_flight_.empty()) {
        Close("bad reply from " + address_);
        return false;
      }
      Frame frame = std::move(in_flight_.front());
      in_flight_.pop_front();
      const auto* ops = reply->ops();
      for (size_t i = 0; i < frame.size(); ++i) {
        const wire::OpReply* op =
            ops && i < ops->size() ? ops->Get(static_cast<flatbuffers::uoffset_t>(i)) : nullptr;
        if (op && op->id() == frame[i].id) {
          CallResult result;
          result.answer = FromWire(*op);
          frame[i].done(std::move(result));
        } else {
          const std::string why = reply->error() ? reply->error()->str() : "no answer for the op";
          frame[i].done(CallResult{CallStatus::kConnection, why, {}});
        }
      }
      if (state_ == State::kClosed) return false;  // a callback closed this link
      in_.Consume(f.consumed);                     // after the callbacks: `reply` points into in_
    }
    return true;
  }

  asio::io_context& io_;
  const std::string address_;
  tcp::socket socket_;
  tcp::resolver resolver_;
  State state_ = State::kClosed;
  RequestBuilder builder_;
  Frame batch_;                  // ops in builder_, not yet framed
  std::deque<Frame> in_flight_;  // framed, in send order, awaiting replies
  std::vector<uint8_t> pending_out_;
  std::vector<uint8_t> out_;
  ReadBuffer in_;
  std::vector<uint64_t> aligned_;  // a reply body copied to 8-byte alignment
  uint64_t next_id_ = 1;
  bool flush_posted_ = false;
  bool writing_ = false;
  std::shared_ptr<asio::ssl::context> tls_ctx_;  // null: plain TCP
  std::shared_ptr<TlsStream> tls_;               // this connection's, with TLS
  std::optional<ClientHandshake> handshake_;     // with a cluster secret
  std::vector<uint8_t> hello_out_;               // the nonce hello being written
  bool awaiting_proof_ = false;                  // the node's proof is the next reply
};

TcpTransport::TcpTransport(asio::io_context& io, NodeAccess access)
    : io_(io), access_(std::move(access)) {}

TcpTransport::~TcpTransport() {
  // Callers shut the I/O down first (CloseAll on its thread, then stop it); whatever is left
  // is dropped without callbacks, which could reach objects already destroyed.
  for (auto& [address, link] : links_) link->Abandon();
}

void TcpTransport::CloseAll() {
  auto links = std::move(links_);
  links_.clear();
  for (auto& [address, link] : links) link->Close("client closed");
}

void TcpTransport::Send(const std::string& address, OpSpec op, Callback done) {
  auto& link = links_[address];
  if (!link) link = std::make_shared<Link>(io_, address, access_);
  link->Send(std::move(op), std::move(done));
}

void TcpTransport::Disconnect(const std::string& address) {
  auto it = links_.find(address);
  if (it == links_.end()) return;
  auto link = std::move(it->second);
  links_.erase(it);
  link->Close("disconnected: " + address + " did not answer a probe");
}

}  // namespace limiter
