// The client's network seam: one op to one node, one answer. The real one is TCP with
// batching and pipelining (tcp_transport.h); tests use an in-process one that hands frames
// to a Node, with delays and failures on demand.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "protocol/op.h"

namespace limiter {

enum class CallStatus : uint8_t {
  kOk,          // the node answered; see OpAnswer.status
  kDeadline,    // no answer in time
  kConnection,  // could not connect, or the connection broke
};

struct CallResult {
  CallStatus status = CallStatus::kOk;
  std::string message;  // why, when not kOk
  OpAnswer answer;
};

class Transport {
 public:
  using Callback = std::function<void(CallResult)>;
  virtual ~Transport() = default;
  // Call on the scheduler's thread. `done` runs once, on that thread: with the answer, or
  // kConnection. The transport does not time out; the caller keeps the deadline and ignores
  // answers that come too late.
  virtual void Send(const std::string& address, OpSpec op, Callback done) = 0;
  // Drops the connection to a node (one that left a probe unanswered: the connection may be
  // wedged); its calls end with kConnection, and the next Send opens a new one.
  virtual void Disconnect(const std::string& address) = 0;
};

}  // namespace limiter
