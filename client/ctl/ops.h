// One op to one node and its reply, for limiterctl's commands.
#pragma once

#include <string>

#include "limiter/status.h"
#include "protocol/node_connection.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"

namespace limiter::ctl {

// Sends the one op in `builder` and returns its reply (valid until the connection's next
// Receive), or an error message.
inline Result<const wire::OpReply*> OneOp(NodeConnection& c, RequestBuilder& builder) {
  if (Status s = c.Send(builder.Finish()); !s.ok()) return s;
  Result<const wire::Reply*> r = c.Receive();
  if (!r) return Error{r.error()};
  if ((*r)->error()) return Error{(*r)->error()->str()};
  if (!(*r)->ops() || (*r)->ops()->size() != 1) return Error{"the node sent no answer"};
  return (*r)->ops()->Get(0);
}

// "BadRequest: why" for an op the node refused.
inline std::string Refusal(const wire::OpReply& op) {
  return std::string(wire::EnumNameStatus(op.status())) + ": " +
         (op.error() ? op.error()->str() : "");
}

}  // namespace limiter::ctl
