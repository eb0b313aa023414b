#include "server/config.h"

#include <cstdlib>
#include <filesystem>

#include "common/membership.h"
#include "common/read_file.h"
#include "common/yaml_reader.h"

namespace limiter {

Result<NodeConfig> LoadNodeConfig(const std::string& path) {
  Result<std::string> text = ReadWholeFile(path, "config");
  if (!text) return Error{text.error()};
  return LoadYaml<NodeConfig>(*text, path, [&](YamlReader& r, const YAML::Node& root) {
    NodeConfig c;
    if (!root.IsDefined() || root.IsNull()) return c;  // an empty file: all defaults
    const auto fields = r.Fields(root, "",
                                 {"name", "listen", "admin", "policies", "threads", "max_keys",
                                  "idle_timeout", "frame_timeout", "max_connections", "max_frame",
                                  "members", "generation", "members_dns", "self", "hot_keys",
                                  "secret_file", "secret_reload", "insecure", "max_ops_per_frame",
                                  "max_reply_bytes", "tls", "max_tls_handshakes",
                                  "handoff_deadline", "region", "regions", "rebalance_interval",
                                  "region_floor", "region_max_keys", "data_dir", "durability",
                                  "sync_interval"});
    // Paths in the file are relative to it.
    auto file_path = [&](const std::filesystem::path& p) {
      return p.is_absolute() ? p.string() : (std::filesystem::path(path).parent_path() / p).string();
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
        const int64_t n = r.PositiveInt(f, name);
        if (n > 256) r.Fail(f.value, name, "at most 256");
        c.server.threads = static_cast<int>(n);
      } else if (name == "max_keys") {
        c.node.store.max_keys = r.PositiveInt(f, name);
      } else if (name == "idle_timeout") {
        c.server.idle_timeout_ms = r.DurationMs(f, name);
      } else if (name == "frame_timeout") {
        c.server.frame_timeout_ms = r.DurationMs(f, name);
      } else if (name == "handoff_deadline") {
        // 0 turns the hand-off off; DurationMs wants a positive duration.
        if (f.value.IsScalar() && (f.value.Scalar() == "0" || f.value.Scalar() == "0s")) {
          c.node.handoff_deadline_ms = 0;
        } else {
          c.node.handoff_deadline_ms = r.DurationMs(f, name);
          if (c.node.handoff_deadline_ms > 600'000) r.Fail(f.value, name, "at most 10m");
        }
      } else if (name == "max_connections") {
        c.server.max_connections = r.PositiveInt(f, name);
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
        const std::string text = r.Scalar(f, name);
        c.node.generation = text == "0" ? 0 : static_cast<uint64_t>(r.PositiveInt(f, name));
      } else if (name == "members_dns") {
        c.server.members_dns = r.Scalar(f, name);
      } else if (name == "self") {
        c.node.self = r.Scalar(f, name);
      } else if (name == "secret_file") {
        c.secret_file = file_path(r.Scalar(f, name));
      } else if (name == "data_dir") {
        c.durable.data_dir = file_path(r.Scalar(f, name));
      } else if (name == "durability") {
        const std::optional<DurabilityMode> mode = ParseDurabilityMode(r.Scalar(f, name));
        if (!mode) r.Fail(f.value, name, "expected sync or interval");
        if (mode) c.durable.mode = *mode;
      } else if (name == "sync_interval") {
        c.durable.interval_ms = r.DurationMs(f, name);
        if (c.durable.interval_ms > 60'000) r.Fail(f.value, name, "at most 1m");
      } else if (name == "secret_reload") {
        c.secret_reload_ms = r.DurationMs(f, name);
      } else if (name == "insecure") {
        const std::string text = r.Scalar(f, name);
        if (text != "true" && text != "false") r.Fail(f.value, name, "expected true or false");
        c.insecure = text == "true";
      } else if (name == "max_ops_per_frame") {
        const int64_t n = r.PositiveInt(f, name);
        if (n > 1'000'000) r.Fail(f.value, name, "at most 1000000");
        c.node.max_ops_per_frame = static_cast<uint32_t>(n);
      } else if (name == "max_reply_bytes") {
        const int64_t n = r.PositiveInt(f, name);
        if (n < 4096 || n > (int64_t{1} << 30)) {
          r.Fail(f.value, name, "must be between 4096 and 1073741824 bytes");
        }
        c.node.max_reply_bytes = static_cast<uint32_t>(n);
      } else if (name == "hot_keys") {
        HotKeyOptions& hot = c.node.hot;
        for (const auto& [field, g] :
             r.Fields(f.value, name,
                      {"split_above", "split_share", "split", "merge_below", "valid",
                       "sample_every", "sketch"})) {
          const std::string path = "hot_keys." + field;
          if (field == "split_above") {
            const std::string text = r.Scalar(g, path);
            hot.split_above = text == "0" ? 0 : r.PositiveInt(g, path);
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
            hot.merge_below = r.PositiveInt(g, path);
          } else if (field == "valid") {
            hot.split_valid_ms = r.DurationMs(g, path);
          } else if (field == "sample_every") {
            const int64_t n = r.PositiveInt(g, path);
            if (n > 1024) r.Fail(g.value, path, "at most 1024");
            hot.sample_every = static_cast<int>(n);
          } else if (field == "sketch") {
            const int64_t n = r.PositiveInt(g, path);
            if (n > 65536) r.Fail(g.value, path, "at most 65536");
            hot.sketch_capacity = static_cast<size_t>(n);
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
        c.node.regions.rebalance_interval_ms = r.DurationMs(f, name);
      } else if (name == "region_floor") {
        const std::string text = r.Scalar(f, name);
        char* end = nullptr;
        c.node.regions.floor = std::strtod(text.c_str(), &end);
        if (end != text.c_str() + text.size() || !(c.node.regions.floor >= 0) ||
            c.node.regions.floor > 1) {
          r.Fail(f.value, name, "expected a share of the limit between 0 and 1, got '" + text + "'");
        }
      } else if (name == "region_max_keys") {
        c.node.regions.max_keys = r.PositiveInt(f, name);
      } else if (name == "max_tls_handshakes") {
        c.server.max_tls_handshakes = r.PositiveInt(f, name);
      } else if (name == "tls") {
        for (const auto& [field, g] : r.Fields(f.value, name, {"cert", "key", "client_ca"})) {
          const std::string file = file_path(r.Scalar(g, "tls." + field));
          if (field == "cert") c.server.tls.cert_file = file;
          if (field == "key") c.server.tls.key_file = file;
          if (field == "client_ca") c.server.tls.ca_file = file;
        }
        if (c.server.tls.cert_file.empty() || c.server.tls.key_file.empty()) {
          r.Fail(f.value, name, "needs both cert and key");
        }
      } else if (name == "max_frame") {
        const int64_t n = r.PositiveInt(f, name);
        if (n < 1024 || n > (int64_t{64} << 20)) {
          r.Fail(f.value, name, "must be between 1024 and 67108864 bytes");
        }
        c.node.max_frame_bytes = static_cast<uint32_t>(n);
      }
    }
    return c;
  });
}

}  // namespace limiter
