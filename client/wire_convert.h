// Between the transport's plain structs and the wire messages.
#pragma once

#include <cstdint>

#include "client/request_builder.h"
#include "client/transport.h"

namespace limiter {

namespace wire {
struct OpReply;
}

void AddOp(RequestBuilder& builder, uint64_t id, const OpSpec& op);
OpAnswer FromWire(const wire::OpReply& reply);

}  // namespace limiter
