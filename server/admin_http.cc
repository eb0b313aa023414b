#include "server/admin_http.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace limiter {
namespace {

const char* Reason(int status) {
  static constexpr std::pair<int, const char*> kReasons[] = {
      {200, "OK"},
      {201, "Created"},
      {202, "Accepted"},
      {204, "No Content"},
      {400, "Bad Request"},
      {401, "Unauthorized"},
      {403, "Forbidden"},
      {404, "Not Found"},
      {405, "Method Not Allowed"},
      {409, "Conflict"},
      {413, "Content Too Large"},
      {429, "Too Many Requests"},
      {431, "Request Header Fields Too Large"},
      {500, "Internal Server Error"},
      {503, "Service Unavailable"}};
  for (const auto& [code, reason] : kReasons) {
    if (code == status) return reason;
  }
  return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
}

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

bool IsFieldValue(std::string_view s) {
  constexpr std::string_view kBreaks("\r\n\0", 3);
  return s.find_first_of(kBreaks) == s.npos;
}

std::string_view TrimSpaces(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == s.npos) return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

}  // namespace

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [&](char x, char y) { return lower(x) == lower(y); });
}

std::string SerializeResponse(const AdminResponse& r, bool keep_alive, bool head) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + ' ' + Reason(r.status) + "\r\n";
  // 204 and 304 have no body, and say nothing of its length (RFC 9110 8.6).
  const bool bodiless = r.status == 204 || r.status == 304;
  if (!r.content_type.empty() && !bodiless) out += "Content-Type: " + r.content_type + "\r\n";
  if (!bodiless) out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [name, value] : r.headers) out += name + ": " + value + "\r\n";
  out += "\r\n";
  if (!head && !bodiless) out += r.body;
  return out;
}

AdminResponse CheckedResponse(AdminResponse r, const std::string& path) {
  bool valid = r.status >= 200 && r.status <= kAdminMaxStatus && IsFieldValue(r.content_type);
  for (const auto& [name, value] : r.headers) {
    valid = valid && IsToken(name) && IsFieldValue(value) &&
            !EqualsIgnoringCase(name, "Content-Length") &&
            !EqualsIgnoringCase(name, "Connection") &&
            !EqualsIgnoringCase(name, "Transfer-Encoding");
  }
  if (valid) return r;
  return AdminResponse{
      500, "text/plain", "the handler of " + path + " gave an invalid response\n", {}};
}

std::string AdminPort::RenderMetrics() const {
  const AdminPortStats s = stats();
  std::string out;
  const auto head = [&out](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + ' ' + help + "\n# TYPE " + name + ' ' + type + '\n';
  };
  const auto sample = [&out](const char* name, const std::string& labels, uint64_t value) {
    out += std::string(name) + labels + ' ' + std::to_string(value) + '\n';
  };
  head("limiter_admin_requests_total", "counter",
       "Admin port responses by status code (400, 413, 431: bad requests).");
  bool any = false;
  for (int status = 0; status <= kAdminMaxStatus; ++status) {
    if (const uint64_t n = responses(status); n > 0) {
      sample("limiter_admin_requests_total", "{code=\"" + std::to_string(status) + "\"}", n);
      any = true;
    }
  }
  if (!any) sample("limiter_admin_requests_total", "{code=\"200\"}", 0);
  head("limiter_admin_connections_refused_total", "counter",
       "Admin connections closed at accept: at max_per_source or max_connections with no slow "
       "connection to close instead.");
  sample("limiter_admin_connections_refused_total", "{reason=\"per_source\"}",
         s.refused_per_source);
  sample("limiter_admin_connections_refused_total", "{reason=\"cap\"}", s.refused_cap);
  head("limiter_admin_slow_clients_closed_total", "counter",
       "Admin connections that had not sent a whole request, closed to let a new one in.");
  sample("limiter_admin_slow_clients_closed_total", "", s.slow_clients_closed);
  head("limiter_admin_timeouts_total", "counter",
       "Admin connections closed at a deadline: request (not whole in time), write (response "
       "not taken), idle (kept alive, no request).");
  sample("limiter_admin_timeouts_total", "{phase=\"request\"}", s.request_timeouts);
  sample("limiter_admin_timeouts_total", "{phase=\"write\"}", s.write_timeouts);
  sample("limiter_admin_timeouts_total", "{phase=\"idle\"}", s.idle_timeouts);
  head("limiter_admin_connections_open", "gauge", "Admin connections open now.");
  sample("limiter_admin_connections_open", "", static_cast<uint64_t>(std::max<int64_t>(0, s.open)));
  head("limiter_admin_connections_accepted_total", "counter", "Admin connections let in.");
  sample("limiter_admin_connections_accepted_total", "", s.accepted);
  head("limiter_admin_accept_errors_total", "counter", "Failed accepts on the admin port.");
  sample("limiter_admin_accept_errors_total", "", s.accept_errors);
  return out;
}

std::optional<std::string_view> BearerToken(std::string_view authorization) {
  const std::string_view value = TrimSpaces(authorization);
  constexpr std::string_view kScheme = "bearer";
  if (value.size() <= kScheme.size() || !EqualsIgnoringCase(value.substr(0, 6), kScheme) ||
      (value[6] != ' ' && value[6] != '\t')) {
    return std::nullopt;
  }
  const std::string_view token = TrimSpaces(value.substr(kScheme.size()));
  if (token.empty() || token.find_first_of(" \t") != token.npos) return std::nullopt;
  return token;
}

}  // namespace limiter
