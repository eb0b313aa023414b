#include "limiter/client/http.h"

namespace limiter::client {
namespace {

int64_t CeilSeconds(std::chrono::milliseconds ms) { return (ms.count() + 999) / 1000; }

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
    case Source::kStore: return "store";
    case Source::kLease: return "lease";
    case Source::kFallback: return "fallback";
  }
  return "unknown";
}

HttpRateLimit RenderHttp(const Decision& d) {
  HttpRateLimit h;
  const std::string name = Quoted(std::string(d.policy));
  if (d.limit > 0) {
    h.headers.emplace_back("RateLimit-Policy", name + ";q=" + std::to_string(d.limit) + ";w=" +
                                                   std::to_string(std::max<int64_t>(1, (d.window_ms + 999) / 1000)));
    h.headers.emplace_back("RateLimit", name + ";r=" + std::to_string(std::max<int64_t>(0, d.remaining)) +
                                            ";t=" + std::to_string(CeilSeconds(d.reset)));
  }
  if (d.allowed) return h;
  h.status = 429;
  const int64_t retry = std::max<int64_t>(1, CeilSeconds(d.retry_after));
  h.headers.emplace_back("Retry-After", std::to_string(retry));
  h.body = "Too Many Requests: limit '" + std::string(d.policy) + "' is used up; retry in " +
           std::to_string(retry) + " s\n";
  return h;
}

}  // namespace limiter::client
