// limiterctl admin-token and drain: the admin port's actions, which need the peer secret
// (README "Security model"). The token is an HMAC of the peer secret (auth::AdminToken), so the
// secret itself never crosses the wire; a preStop hook reads it from `admin-token`.
#include <httplib.h>

#include <charconv>
#include <ostream>

#include "client/ctl/commands.h"
#include "protocol/auth.h"

namespace limiter::ctl {
namespace {

// The first peer secret's admin token, or an error for `err` (exit 2).
Result<std::string> TokenOf(const std::string& peer_secret_file) {
  Result<auth::SecretSource> found = auth::FindSecrets(peer_secret_file, auth::SecretKind::kPeer);
  if (!found) return Error{found.error()};
  if (found->secrets.empty()) {
    return Error{
        "no peer secret: give --peer-secret-file FILE, or $LIMITER_PEER_SECRET_FILE or "
        "$LIMITER_PEER_SECRET"};
  }
  return auth::AdminToken(found->secrets.values.front());
}

}  // namespace

int RunAdminToken(const AdminArgs& args, std::ostream& out, std::ostream& err) {
  Result<std::string> token = TokenOf(args.peer_secret_file);
  if (!token) {
    err << "limiterctl admin-token: " << token.error() << '\n';
    return 2;
  }
  out << *token << '\n';
  return 0;
}

int RunDrain(const AdminArgs& args, std::ostream& out, std::ostream& err) {
  Result<std::string> token = TokenOf(args.peer_secret_file);
  if (!token) {
    err << "limiterctl drain: " << token.error() << '\n';
    return 2;
  }
  const size_t colon = args.admin.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == args.admin.size()) {
    err << "limiterctl drain: --admin: expected HOST:PORT, got '" << args.admin << "'\n";
    return 2;
  }
  std::string host = args.admin.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string_view port_text = std::string_view(args.admin).substr(colon + 1);
  int port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port <= 0 ||
      port > 65535) {
    err << "limiterctl drain: --admin: bad port in '" << args.admin << "'\n";
    return 2;
  }
  httplib::Client client(host, port);
  client.set_connection_timeout(std::chrono::seconds(2));
  client.set_read_timeout(std::chrono::seconds(5));
  client.set_bearer_token_auth(*token);
  const httplib::Result r = client.Post("/drain");
  if (!r) {
    err << "limiterctl drain: " << args.admin << ": " << httplib::to_string(r.error()) << '\n';
    return 1;
  }
  if (r->status != 202) {
    err << "limiterctl drain: " << args.admin << " answered " << r->status << ": " << r->body;
    return 1;
  }
  out << args.admin << ": draining\n";
  return 0;
}

}  // namespace limiter::ctl
