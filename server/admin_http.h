// The HTTP text the admin port (server/admin_port.h) writes, apart from its sockets and its
// parser: a response's bytes, a handler's answer made safe to send, the port's metrics page
// (AdminPort::RenderMetrics) and BearerToken. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "server/admin_port.h"

namespace limiter {

// Statuses the port counts one by one (limiter_admin_requests_total{code}): 0..599.
constexpr int kAdminMaxStatus = 599;

// A response's bytes: status line, Content-Type, Content-Length (none for 204 and 304),
// Connection, the handler's own fields, the body (none for HEAD, 204 and 304).
std::string SerializeResponse(const AdminResponse& response, bool keep_alive, bool head);

// `response` when it may go on the wire as it is, else a 500 naming `path`: a status outside
// 200..599, a content type or field value with CR, LF or NUL, a field name that is no token,
// or a field the port writes itself (Content-Length, Connection, Transfer-Encoding).
AdminResponse CheckedResponse(AdminResponse response, const std::string& path);

bool EqualsIgnoringCase(std::string_view a, std::string_view b);

}  // namespace limiter
