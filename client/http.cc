#include "limiter/client/http.h"

namespace limiter::client {
namespace {

// Whole seconds, rounded up; a span too long to round (kRetryNever) saturates.
int64_t CeilSeconds(std::chrono::milliseconds ms) {
  return ms.count() > INT64_MAX - 999 ? INT64_MAX / 1000 : (ms.count() + 999) / 1000;
}

// A policy name as an RFC 8941 string: quotes and backslashes escaped.
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string_view SourceName(Source source) {
  switch (source) {
    case Source::kStore:
      return "store";
    case Source::kLease:
      return "lease";
    case Source::kFallback:
      return "fallback";
  }
  return "unknown";
}

HttpRateLimit RenderHttp(const Decision& d) {
  HttpRateLimit h;
  const std::string name = Quoted(std::string(d.policy));
  if (d.limit > 0) {
    h.headers.emplace_back("RateLimit-Policy",
                           name + ";q=" + std::to_string(d.limit) + ";w=" +
                               std::to_string(std::max<int64_t>(1, (d.window_ms + 999) / 1000)));
    h.headers.emplace_back("RateLimit",
                           name + ";r=" + std::to_string(std::max<int64_t>(0, d.remaining)) +
                               ";t=" + std::to_string(CeilSeconds(d.reset)));
  }
  if (d.allowed) return h;
  h.status = 429;
  if (d.retry_after == kRetryNever) {
    // Retrying cannot help; Retry-After still has to be a number of seconds, and the
    // window is the honest "not soon" (at least a second).
    const int64_t window =
        std::max<int64_t>(1, CeilSeconds(std::chrono::milliseconds(d.window_ms)));
    h.headers.emplace_back("Retry-After", std::to_string(window));
    h.body = "Too Many Requests: this request costs more than limit '" + std::string(d.policy) +
             "' ever admits at once; it will never be admitted\n";
    return h;
  }
  const int64_t retry = std::max<int64_t>(1, CeilSeconds(d.retry_after));
  h.headers.emplace_back("Retry-After", std::to_string(retry));
  h.body = "Too Many Requests: limit '" + std::string(d.policy) + "' is used up; retry in " +
           std::to_string(retry) + " s\n";
  return h;
}

}  // namespace limiter::client
