// The redis side of `limiter-bench node --vs-redis`: the usual way to rate-limit with redis,
// a token bucket in a Lua script (HMGET tokens and timestamp, refill from TIME, HSET,
// PEXPIRE) called by EVALSHA, pipelined through hiredis, against a redis-server of our own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "bench/load_loop.h"
#include "common/rate.h"
#include "common/subprocess.h"
#include "limiter/status.h"

struct redisContext;

namespace limiter::bench {

// A redis-server on a free loopback port, without persistence (--save "" --appendonly no);
// stopped (SIGTERM) when destroyed. Not thread-safe.
class RedisServer {
 public:
  // `program`: the redis-server binary (looked up in PATH when it has no slash).
  static Result<std::unique_ptr<RedisServer>> Start(const std::string& program);

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // Loads the token-bucket script; its SHA1, for EVALSHA.
  Result<std::string> LoadScript();

 private:
  RedisServer(std::unique_ptr<Subprocess> process, int port)
      : process_(std::move(process)), port_(port) {}
  std::unique_ptr<Subprocess> process_;
  std::string host_ = "127.0.0.1";
  int port_;
};

// One hiredis connection carrying pipelined EVALSHA calls, one per check: a "frame" of S
// checks is S commands, so S*D commands are in flight when D frames are.
//
// Thread-safety: as LoadChannel. Commands are written to the socket directly, never queued
// through hiredis; replies are parsed by the context's reader (the open loop feeds it what
// it reads itself, so that no read blocks).
class RedisChannel final : public LoadChannel {
 public:
  // `rate`: the bucket (limit per window, burst) the script enforces for every key;
  // `prefix`: put before each key name (the policy name, so keys read "bench:k42").
  static Result<std::unique_ptr<RedisChannel>> Connect(const RedisServer& server,
                                                       const std::string& script_sha,
                                                       const Rate& rate, const std::string& prefix);
  ~RedisChannel() override;
  RedisChannel(const RedisChannel&) = delete;
  RedisChannel& operator=(const RedisChannel&) = delete;

  void EncodeFrame(std::span<const uint64_t> keys, std::vector<uint8_t>& out) override;
  Status Send(std::span<const uint8_t> bytes) override;
  Status ReceiveFrame(size_t checks, CheckCounts& counts) override;
  Result<size_t> SendSome(std::span<const uint8_t> bytes) override;
  Status Poll(Time until, bool for_replies, bool for_send) override;
  Result<bool> TakeFrame(size_t checks, CheckCounts& counts) override;

 private:
  RedisChannel(redisContext* context, std::string command_head, std::string key_prefix,
               std::string command_tail)
      : context_(context),
        command_head_(std::move(command_head)),
        key_prefix_(std::move(key_prefix)),
        command_tail_(std::move(command_tail)) {}

  redisContext* context_;  // owned
  // One command is head, the key as a bulk string (key_prefix_ + name), tail.
  const std::string command_head_;
  const std::string key_prefix_;
  const std::string command_tail_;
  size_t frame_replies_ = 0;  // TakeFrame: replies of the oldest frame counted so far
};

}  // namespace limiter::bench
