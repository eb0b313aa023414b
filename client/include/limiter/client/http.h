// What a rejection tells the client: HTTP 429 (RFC 6585) with Retry-After (RFC 9110), and
// the RateLimit-Policy and RateLimit fields of draft-ietf-httpapi-ratelimit-headers.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "limiter/client/client.h"

namespace limiter::client {

struct HttpRateLimit {
  int status = 200;  // 429 when denied
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // for a 429: a short text saying which limit and when to retry
};

// Retry-After in whole seconds, rounded up; RateLimit-Policy: "<policy>";q=<L>;w=<W s>;
// RateLimit: "<policy>";r=<remaining>;t=<reset s>.
HttpRateLimit RenderHttp(const Decision& decision);

}  // namespace limiter::client
