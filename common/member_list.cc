#include "common/member_list.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <chrono>

namespace limiter {
namespace {

bool ValidMember(const std::string& m) {
  const size_t colon = m.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == m.size()) return false;
  unsigned port = 0;
  auto [end, ec] = std::from_chars(m.data() + colon + 1, m.data() + m.size(), port);
  return ec == std::errc() && end == m.data() + m.size() && port > 0 && port <= 65535;
}

}  // namespace

Result<std::vector<std::string>> ParseMemberList(const std::string& text) {
  std::vector<std::string> members;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t end = comma == std::string::npos ? text.size() : comma;
    std::string m = text.substr(start, end - start);
    m.erase(0, m.find_first_not_of(' '));
    m.erase(m.find_last_not_of(' ') + 1);
    if (!ValidMember(m)) return Error{"member '" + m + "' is not HOST:PORT with a port 1-65535"};
    members.push_back(std::move(m));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return members;
}

Result<std::vector<std::string>> ResolveMembers(const std::string& name_and_port) {
  if (!ValidMember(name_and_port)) {
    return Error{"'" + name_and_port + "' is not NAME:PORT with a port 1-65535"};
  }
  const size_t colon = name_and_port.rfind(':');
  const std::string host = name_and_port.substr(0, colon);
  const std::string port = name_and_port.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Error{name_and_port + ": " + ::gai_strerror(rc)};
  }
  std::vector<std::string> members;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (ai->ai_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr, text,
                  sizeof(text));
      members.push_back(std::string(text) + ":" + port);
    } else if (ai->ai_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr, text,
                  sizeof(text));
      members.push_back("[" + std::string(text) + "]:" + port);
    }
  }
  ::freeaddrinfo(found);
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  if (members.empty()) return Error{name_and_port + ": no addresses"};
  return members;
}

uint64_t WallClockGeneration() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

uint64_t DnsGeneration() { return WallClockGeneration(); }

}  // namespace limiter
