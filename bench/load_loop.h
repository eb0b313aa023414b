// The load loop of limiter-bench: drives connections that each carry frames of `batch`
// checks on keys drawn uniformly from [0, keys). What is under load (a limiterd node, a
// redis-server) is a LoadChannel; the loop owns pacing, timing and counting.
//
//  - closed loop: each connection keeps `depth` frames in flight, sending a new frame as soon
//    as the oldest one's replies are in; latency is from a frame's send to its replies.
//  - open loop (rate > 0): one thread per connection sends frames on a fixed schedule and
//    reads the replies, never blocking on either: it writes every frame that is due, then
//    waits for replies or for the next frame's time, whichever comes first. Latency is from a
//    frame's *intended* send time, so a stall counts against every frame it delayed (no
//    coordinated omission). One thread, not a sender and a receiver, because on a small
//    machine each extra thread's wake-ups show in the tail.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/histogram.h"
#include "limiter/status.h"

namespace limiter::bench {

struct CheckCounts {
  uint64_t checks = 0;
  uint64_t allowed = 0;
  uint64_t denied = 0;
  uint64_t errors = 0;      // checks answered with an error, not a decision
  std::string first_error;  // what the first of them said

  void Merge(const CheckCounts& other);
};

// Key numbers drawn uniformly from [0, keys): splitmix64 and a multiply-shift reduction. One
// per thread.
class KeyPicker {
 public:
  KeyPicker(uint64_t keys, uint64_t seed) : keys_(keys), state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<uint64_t>((static_cast<unsigned __int128>(z) * keys_) >> 64);
  }

 private:
  uint64_t keys_;
  uint64_t state_;
};

// The name of key number `key` ("k" and its decimal digits), formatted into `buf`.
using KeyBuffer = std::array<char, 24>;
std::string_view KeyName(uint64_t key, KeyBuffer& buf);

// One connection to the system under load.
//
// The closed loop and TouchEveryKey use the blocking calls (Send, ReceiveFrame); the open
// loop, the non-blocking ones (SendSome, Poll, TakeFrame), all on one thread.
// Thread-safety: none; one thread drives a channel.
class LoadChannel {
 public:
  using Time = std::chrono::steady_clock::time_point;

  virtual ~LoadChannel() = default;
  // Appends to `out` one frame that checks each of `keys` (key numbers) once.
  virtual void EncodeFrame(std::span<const uint64_t> keys, std::vector<uint8_t>& out) = 0;

  // Writes all of `bytes` (one or more encoded frames); an error on failure.
  virtual Status Send(std::span<const uint8_t> bytes) = 0;
  // Reads the replies to the oldest frame in flight, which held `checks` checks, and counts
  // them; an error when the connection failed.
  virtual Status ReceiveFrame(size_t checks, CheckCounts& counts) = 0;

  // Writes what the connection takes of `bytes` now, without blocking; how many bytes.
  virtual Result<size_t> SendSome(std::span<const uint8_t> bytes) = 0;
  // Waits until replies have arrived (when `for_replies`), the connection takes more bytes
  // (when `for_send`), or `until`, whichever is first; then reads the replies that arrived.
  // An error when the connection failed (closed by the peer included).
  virtual Status Poll(Time until, bool for_replies, bool for_send) = 0;
  // Takes from what Poll read the replies to the oldest frame in flight, which held `checks`
  // checks, and counts them: true; or false when they are not all in yet (counting may have
  // begun: call again for the same frame). An error when the replies are bad.
  virtual Result<bool> TakeFrame(size_t checks, CheckCounts& counts) = 0;
};

// For channels over a socket: waits on `fd` as LoadChannel::Poll does; whether a read would
// not block now (data, end of file, or an error to report).
Result<bool> WaitForSocket(int fd, LoadChannel::Time until, bool for_replies, bool for_send);

struct LoadShape {
  int depth = 8;          // closed loop: frames in flight per connection
  int batch = 1;          // checks per frame
  uint64_t keys = 10000;  // key numbers are drawn from [0, keys)
  double duration_s = 10;
  double rate = 0;  // checks/s over all connections; 0: closed loop
  uint64_t seed = 1;
  // Open loop: a connection fails when it waits this long for replies without one arriving.
  // (The closed loop's reads rely on the channel's own timeout.)
  double reply_timeout_s = 5;
};

struct LoadResult {
  CheckCounts counts;
  double seconds = 0;              // from the start to the last reply
  Histogram::Snapshot latency_us;  // one sample per frame: its checks share its latency
  // Open loop: how late each frame left against its schedule (the generator's own delay,
  // part of latency_us).
  Histogram::Snapshot send_lag_us;
  double checks_per_s() const {
    return seconds > 0 ? static_cast<double>(counts.checks) / seconds : 0;
  }
};

// Runs the load over every channel at once until shape.duration_s has passed and every frame
// sent has its replies. An error when a connection failed (the first one's message).
Result<LoadResult> RunLoad(std::span<LoadChannel* const> channels, const LoadShape& shape);

// Checks every key number in [0, keys) once, in order: `batch` keys a frame, up to `depth`
// frames in flight. Creates the keys before a measurement.
Result<CheckCounts> TouchEveryKey(LoadChannel& channel, uint64_t keys, int batch, int depth);

}  // namespace limiter::bench
