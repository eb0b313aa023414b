#include "server/config.h"

#include <cstdlib>
#include <filesystem>

#include "common/member_list.h"
#include "common/read_file.h"
#include "common/yaml_reader.h"

namespace limiter {

using namespace config_bounds;

Result<NodeConfig> LoadNodeConfig(const std::string& path) {
  Result<std::string> text = ReadWholeFile(path, "config");
  if (!text) return Error{text.error()};
  return LoadYaml<NodeConfig>(*text, path, [&](YamlReader& r, const YAML::Node& root) {
    NodeConfig c;
    if (!root.IsDefined() || root.IsNull()) return c;  // an empty file: all defaults
    const auto fields = r.Fields(root, "",
                                 {"name",
                                  "listen",
                                  "admin",
                                  "policies",
                                  "threads",
                                  "max_keys",
                                  "idle_timeout",
                                  "frame_timeout",
                                  "max_connections",
                                  "max_frame",
                                  "members",
                                  "generation",
                                  "members_dns",
                                  "self",
                                  "hot_keys",
                                  "secret_file",
                                  "secret_reload",
                                  "insecure",
                                  "max_ops_per_frame",
                                  "max_reply_bytes",
                                  "tls",
                                  "max_tls_handshakes",
                                  "handoff_deadline",
                                  "region",
                                  "regions",
                                  "rebalance_interval",
                                  "region_floor",
                                  "region_max_keys",
                                  "data_dir",
                                  "durability",
                                  "sync_interval",
                                  "peer_secret_file",
                                  "key_seed_file",
                                  "auth_timeout",
                                  "max_preauth_connections",
                                  "max_preauth_per_source",
                                  "max_tls_handshakes_per_source",
                                  "reply_budget"});
    const auto in = [&](const YamlReader::Field& g, const std::string& field, Bound b) {
      return r.IntInRange(g, field, b.min, b.max);
    };
    const auto duration = [&](const YamlReader::Field& g, const std::string& field, Bound b) {
      return r.DurationMs(g, field, std::max<int64_t>(1, b.min), b.max);
    };
    // Paths in the file are relative to it.
    auto file_path = [&](const std::filesystem::path& p) {
      return p.is_absolute() ? p.string()
                             : (std::filesystem::path(path).parent_path() / p).string();
    };
    for (const auto& [name, f] : fields) {
      if (name == "name") {
        c.node.name = r.Scalar(f, name);
      } else if (name == "listen") {
        c.server.listen = r.Scalar(f, name);
        if (!ParseHostPort(c.server.listen)) r.Fail(f.value, name, "expected HOST:PORT");
      } else if (name == "admin") {
        c.server.admin = r.Scalar(f, name);
        if (!c.server.admin.empty() && !ParseHostPort(c.server.admin)) {
          r.Fail(f.value, name, "expected HOST:PORT, or \"\" for none");
        }
      } else if (name == "policies") {
        c.policies_path = file_path(r.Scalar(f, name));
      } else if (name == "threads") {
        c.server.threads = static_cast<int>(in(f, name, kThreads));
      } else if (name == "max_keys") {
        c.node.store.max_keys = in(f, name, kMaxKeys);
      } else if (name == "idle_timeout") {
        c.server.idle_timeout_ms = duration(f, name, kIdleTimeoutMs);
      } else if (name == "frame_timeout") {
        c.server.frame_timeout_ms = duration(f, name, kFrameTimeoutMs);
      } else if (name == "auth_timeout") {
        c.server.auth_timeout_ms = duration(f, name, kAuthTimeoutMs);
      } else if (name == "handoff_deadline") {
        // 0 turns the hand-off off; DurationMs wants a positive duration.
        if (f.value.IsScalar() && (f.value.Scalar() == "0" || f.value.Scalar() == "0s")) {
          c.node.handoff_deadline_ms = 0;
        } else {
          c.node.handoff_deadline_ms = duration(f, name, kHandoffDeadlineMs);
        }
      } else if (name == "max_connections") {
        c.server.max_connections = in(f, name, kMaxConnections);
      } else if (name == "max_preauth_connections") {
        c.server.max_preauth_connections = in(f, name, kMaxPreauth);
      } else if (name == "max_preauth_per_source") {
        c.server.max_preauth_per_source = in(f, name, kMaxPreauth);
      } else if (name == "max_tls_handshakes_per_source") {
        c.server.max_tls_handshakes_per_source = in(f, name, kMaxTlsHandshakes);
      } else if (name == "reply_budget") {
        c.server.reply_budget_bytes = in(f, name, kReplyBudgetBytes);
      } else if (name == "members") {
        if (!f.value.IsSequence()) r.Fail(f.value, name, "expected a list of HOST:PORT");
        for (const auto& m : f.value) {
          if (!m.IsScalar()) r.Fail(m, name, "expected HOST:PORT");
          Result<std::vector<std::string>> one = ParseMemberList(m.Scalar());
          if (!one || one->size() != 1)
            r.Fail(m, name, one ? "expected one HOST:PORT" : one.error());
          c.node.members.push_back(one->front());
        }
      } else if (name == "generation") {
        c.node.generation = static_cast<uint64_t>(in(f, name, {0, INT64_MAX}));
      } else if (name == "members_dns") {
        c.server.members_dns = r.Scalar(f, name);
      } else if (name == "self") {
        c.node.self = r.Scalar(f, name);
      } else if (name == "secret_file") {
        c.secret_file = file_path(r.Scalar(f, name));
      } else if (name == "peer_secret_file") {
        c.peer_secret_file = file_path(r.Scalar(f, name));
      } else if (name == "key_seed_file") {
        c.key_seed_file = file_path(r.Scalar(f, name));
      } else if (name == "data_dir") {
        c.durable.data_dir = file_path(r.Scalar(f, name));
      } else if (name == "durability") {
        const std::optional<DurabilityMode> mode = ParseDurabilityMode(r.Scalar(f, name));
        if (!mode) r.Fail(f.value, name, "expected sync or interval");
        if (mode) c.durable.mode = *mode;
      } else if (name == "sync_interval") {
        c.durable.interval_ms = duration(f, name, kSyncIntervalMs);
      } else if (name == "secret_reload") {
        c.secret_reload_ms = duration(f, name, kSecretReloadMs);
      } else if (name == "insecure") {
        const std::string text = r.Scalar(f, name);
        if (text != "true" && text != "false") r.Fail(f.value, name, "expected true or false");
        c.insecure = text == "true";
      } else if (name == "max_ops_per_frame") {
        c.node.max_ops_per_frame = static_cast<uint32_t>(in(f, name, kMaxOpsPerFrame));
      } else if (name == "max_reply_bytes") {
        c.node.max_reply_bytes = static_cast<uint32_t>(in(f, name, kMaxReplyBytes));
      } else if (name == "hot_keys") {
        HotKeyOptions& hot = c.node.hot;
        for (const auto& [field, g] :
             r.Fields(f.value, name,
                      {"split_above", "split_share", "split", "merge_below", "valid",
                       "sample_every", "sketch"})) {
          const std::string path = "hot_keys." + field;
          if (field == "split_above") {
            hot.split_above = in(g, path, kHotRate);
          } else if (field == "split_share") {
            const std::string text = r.Scalar(g, path);
            char* end = nullptr;
            hot.split_share = std::strtod(text.c_str(), &end);
            if (end != text.c_str() + text.size() || hot.split_share < 0 || hot.split_share > 1) {
              r.Fail(g.value, path, "expected a share between 0 and 1, got '" + text + "'");
            }
          } else if (field == "split") {
            const int64_t k = r.PositiveInt(g, path);
            if (k < 2 || k > 64 || (k & (k - 1)) != 0) {
              r.Fail(g.value, path,
                     "must be a power of two from 2 to 64, got " + std::to_string(k));
            }
            hot.split_k = static_cast<int>(k);
          } else if (field == "merge_below") {
            hot.merge_below = in(g, path, {1, kHotRate.max});
          } else if (field == "valid") {
            hot.split_valid_ms = duration(g, path, kSplitValidMs);
          } else if (field == "sample_every") {
            hot.sample_every = static_cast<int>(in(g, path, kSampleEvery));
          } else if (field == "sketch") {
            hot.sketch_capacity = static_cast<size_t>(in(g, path, kSketch));
          }
        }
      } else if (name == "region") {
        c.node.regions.region = r.Scalar(f, name);
      } else if (name == "regions") {
        if (!f.value.IsSequence()) {
          r.Fail(f.value, name, "expected a list of {name, members | members_dns}");
        }
        for (const auto& one : f.value) {
          RegionOptions::Other other;
          for (const auto& [field, g] : r.Fields(one, name, {"name", "members", "members_dns"})) {
            const std::string where = "regions." + field;
            if (field == "name") {
              other.name = r.Scalar(g, where);
            } else if (field == "members_dns") {
              other.members_dns = r.Scalar(g, where);
            } else {
              if (!g.value.IsSequence()) r.Fail(g.value, where, "expected a list of HOST:PORT");
              for (const auto& m : g.value) {
                Result<std::vector<std::string>> member =
                    ParseMemberList(m.IsScalar() ? m.Scalar() : std::string());
                if (!member || member->size() != 1) {
                  r.Fail(m, where, member ? "expected one HOST:PORT" : member.error());
                }
                other.members.push_back(member->front());
              }
            }
          }
          if (other.name.empty()) r.Fail(one, name, "each region needs a name");
          c.node.regions.others.push_back(std::move(other));
        }
      } else if (name == "rebalance_interval") {
        c.node.regions.rebalance_interval_ms = duration(f, name, kRebalanceIntervalMs);
      } else if (name == "region_floor") {
        const std::string text = r.Scalar(f, name);
        char* end = nullptr;
        c.node.regions.floor = std::strtod(text.c_str(), &end);
        if (end != text.c_str() + text.size() || !(c.node.regions.floor >= 0) ||
            c.node.regions.floor > 1) {
          r.Fail(f.value, name,
                 "expected a share of the limit between 0 and 1, got '" + text + "'");
        }
      } else if (name == "region_max_keys") {
        c.node.regions.max_keys = in(f, name, kRegionMaxKeys);
      } else if (name == "max_tls_handshakes") {
        c.server.max_tls_handshakes = in(f, name, kMaxTlsHandshakes);
      } else if (name == "tls") {
        for (const auto& [field, g] :
             r.Fields(f.value, name, {"cert", "key", "client_ca", "peer_ca"})) {
          const std::string file = file_path(r.Scalar(g, "tls." + field));
          if (field == "cert") c.server.tls.cert_file = file;
          if (field == "key") c.server.tls.key_file = file;
          if (field == "client_ca") c.server.tls.ca_file = file;
          if (field == "peer_ca") c.server.tls.peer_ca_file = file;
        }
        if (c.server.tls.cert_file.empty() || c.server.tls.key_file.empty()) {
          r.Fail(f.value, name, "needs both cert and key");
        }
      } else if (name == "max_frame") {
        c.node.max_frame_bytes = static_cast<uint32_t>(in(f, name, kMaxFrameBytes));
      }
    }
    return c;
  });
}

Status CheckCredentials(const NodeConfig& config, const auth::Secrets& gateway,
                        const auth::Secrets& peer) {
  if (auth::Overlap(gateway, peer)) {
    return Error{
        "the peer secret is also a gateway secret: every gateway holding it could act as a "
        "node; give nodes a peer secret of their own (openssl rand -hex 32)"};
  }
  const bool in_cluster = !config.node.members.empty() || !config.server.members_dns.empty() ||
                          !config.node.regions.region.empty();
  const bool authenticates_gateways = !gateway.empty() || !config.server.tls.ca_file.empty();
  const bool peer_credential = !peer.empty() || !config.server.tls.peer_ca_file.empty();
  if (in_cluster && authenticates_gateways && !peer_credential) {
    return Error{
        "a node of a cluster that authenticates its gateways needs a peer credential, which "
        "only nodes hold: --peer-secret-file (peer_secret_file:, $LIMITER_PEER_SECRET_FILE) "
        "or a CA of node certificates (--tls-peer-ca, tls.peer_ca); without one every gateway "
        "could change member lists, hand this node keys and report region demand"};
  }
  return Status::Ok();
}

}  // namespace limiter
