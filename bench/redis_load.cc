#include "bench/redis_load.h"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <thread>

namespace limiter::bench {
namespace {

constexpr int kStartAttempts = 3;
constexpr auto kStartTimeout = std::chrono::seconds(5);
constexpr timeval kConnectTimeout{1, 0};
constexpr timeval kIoTimeout{5, 0};

// KEYS[1]: the bucket. ARGV: limit, window (ms), burst, cost. Returns 1 (allowed) or 0.
// A bucket starts full, refills limit per window continuously, holds at most burst, and the
// key lapses once the bucket would be full again (nothing worth keeping).
constexpr const char* kTokenBucketScript = R"lua(
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local burst, cost = tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or burst
local ts = tonumber(state[2]) or now
if now > ts then tokens = math.min(burst, tokens + (now - ts) * limit / window) end
local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * window / limit) + 1)
return allowed
)lua";

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;

struct ReplyDeleter {
  void operator()(void* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

Result<ContextPtr> ConnectTo(const std::string& host, int port) {
  ContextPtr context(redisConnectWithTimeout(host.c_str(), port, kConnectTimeout));
  const std::string where = "redis " + host + ":" + std::to_string(port);
  if (!context) return Error{where + ": cannot allocate a hiredis context"};
  if (context->err) return Error{where + ": " + context->errstr};
  if (redisSetTimeout(context.get(), kIoTimeout) != REDIS_OK) {
    return Error{where + ": " + context->errstr};
  }
  const int one = 1;
  ::setsockopt(context->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return context;
}

// A port no one listens on right now (the kernel's pick for port 0).
Result<int> FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error{std::string("socket: ") + std::strerror(errno)};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Error{"finding a free port: " + why};
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

void CountReply(const redisReply& reply, CheckCounts& counts) {
  ++counts.checks;
  if (reply.type == REDIS_REPLY_INTEGER) {
    ++(reply.integer == 1 ? counts.allowed : counts.denied);
    return;
  }
  ++counts.errors;
  if (counts.first_error.empty()) {
    counts.first_error = reply.type == REDIS_REPLY_ERROR
                             ? "redis: " + std::string(reply.str, reply.len)
                             : "redis: unexpected reply type " + std::to_string(reply.type);
  }
}

// A RESP bulk string. (Built by appending: GCC 12 warns falsely on "$" + std::string.)
std::string Bulk(std::string_view s) {
  std::string bulk = "$";
  bulk.append(std::to_string(s.size())).append("\r\n").append(s).append("\r\n");
  return bulk;
}

}  // namespace

Result<std::unique_ptr<RedisServer>> RedisServer::Start(const std::string& program) {
  std::string last_error;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    Result<int> port = FreeLoopbackPort();
    if (!port) return Error{port.error()};
    Result<std::unique_ptr<Subprocess>> process =
        Subprocess::Start({program, "--bind", "127.0.0.1", "--port", std::to_string(*port),
                           "--save", "", "--appendonly", "no", "--loglevel", "warning"});
    if (!process) return Error{"cannot start " + program + ": " + process.error()};
    std::unique_ptr<RedisServer> server(new RedisServer(std::move(process).value(), *port));
    // Ready once it answers PING; the port may have been taken meanwhile (then try another).
    const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto status = server->process_->Wait(0)) {
        last_error = program + " exited with status " + std::to_string(*status);
        break;
      }
      Result<ContextPtr> context = ConnectTo(server->host_, server->port_);
      if (context) {
        ReplyPtr pong(static_cast<redisReply*>(redisCommand(context->get(), "PING")));
        if (pong && pong->type == REDIS_REPLY_STATUS) return server;
        last_error = "redis did not answer PING";
      } else {
        last_error = context.error();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return Error{"cannot start " + program + ": " + last_error};
}

Result<std::string> RedisServer::LoadScript() {
  Result<ContextPtr> context = ConnectTo(host_, port_);
  if (!context) return Error{context.error()};
  ReplyPtr reply(
      static_cast<redisReply*>(redisCommand(context->get(), "SCRIPT LOAD %s", kTokenBucketScript)));
  if (!reply) return Error{std::string("SCRIPT LOAD: ") + (*context)->errstr};
  if (reply->type != REDIS_REPLY_STRING) {
    return Error{"SCRIPT LOAD: " + std::string(reply->str ? reply->str : "unexpected reply")};
  }
  return std::string(reply->str, reply->len);
}

Result<std::unique_ptr<RedisChannel>> RedisChannel::Connect(const RedisServer& server,
                                                            const std::string& script_sha,
                                                            const Rate& rate,
                                                            const std::string& prefix) {
  Result<ContextPtr> context = ConnectTo(server.host(), server.port());
  if (!context) return Error{context.error()};
  // EVALSHA sha 1 key limit window burst cost: 8 elements.
  std::string head = "*8\r\n" + Bulk("EVALSHA") + Bulk(script_sha) + Bulk("1");
  std::string tail = Bulk(std::to_string(rate.limit())) + Bulk(std::to_string(rate.window_ms())) +
                     Bulk(std::to_string(rate.burst())) + Bulk("1");
  return std::unique_ptr<RedisChannel>(new RedisChannel(
      std::move(context).value().release(), std::move(head), prefix + ":", std::move(tail)));
}

RedisChannel::~RedisChannel() { redisFree(context_); }

void RedisChannel::EncodeFrame(std::span<const uint64_t> keys, std::vector<uint8_t>& out) {
  const auto append = [&out](std::string_view s) { out.insert(out.end(), s.begin(), s.end()); };
  KeyBuffer name;
  std::array<char, 24> length;
  for (uint64_t key : keys) {
    const std::string_view key_name = KeyName(key, name);
    const auto [end, ec] = std::to_chars(length.data(), length.data() + length.size(),
                                         key_prefix_.size() + key_name.size());
    append(command_head_);
    out.push_back('$');
    append({length.data(), static_cast<size_t>(end - length.data())});
    append("\r\n");
    append(key_prefix_);
    append(key_name);
    append("\r\n");
    append(command_tail_);
  }
}

Status RedisChannel::Send(std::span<const uint8_t> bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(context_->fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Error{"redis: timed out sending"};
      return Error{std::string("redis: send: ") + std::strerror(errno)};
    }
    sent += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status RedisChannel::ReceiveFrame(size_t checks, CheckCounts& counts) {
  for (size_t i = 0; i < checks; ++i) {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK) {
      return Error{std::string("redis: ") + (context_->errstr[0] ? context_->errstr : "no reply")};
    }
    CountReply(*ReplyPtr(static_cast<redisReply*>(raw)), counts);
  }
  return Status::Ok();
}

Result<size_t> RedisChannel::SendSome(std::span<const uint8_t> bytes) {
  while (true) {
    const ssize_t n = ::send(context_->fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    if (errno != EINTR) return Error{std::string("redis: send: ") + std::strerror(errno)};
  }
}

Status RedisChannel::Poll(Time until, bool for_replies, bool for_send) {
  Result<bool> readable = WaitForSocket(context_->fd, until, for_replies, for_send);
  if (!readable) return Error{"redis: " + readable.error()};
  if (!*readable) return Status::Ok();
  char buf[16 * 1024];
  while (true) {
    const ssize_t n = ::recv(context_->fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      if (redisReaderFeed(context_->reader, buf, static_cast<size_t>(n)) != REDIS_OK) {
        return Error{std::string("redis: ") + redisReaderGetError(context_->reader)};
      }
      return Status::Ok();
    }
    if (n == 0) return Error{"redis: the server closed the connection"};
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
    if (errno != EINTR) return Error{std::string("redis: recv: ") + std::strerror(errno)};
  }
}

Result<bool> RedisChannel::TakeFrame(size_t checks, CheckCounts& counts) {
  for (; frame_replies_ < checks; ++frame_replies_) {
    void* raw = nullptr;
    if (redisReaderGetReply(context_->reader, &raw) != REDIS_OK) {
      return Error{std::string("redis: ") + redisReaderGetError(context_->reader)};
    }
    if (raw == nullptr) return false;
    CountReply(*ReplyPtr(static_cast<redisReply*>(raw)), counts);
  }
  frame_replies_ = 0;
  return true;
}

}  // namespace limiter::bench
