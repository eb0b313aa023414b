#include "common/yaml_reader.h"

#include <charconv>

#include "common/duration.h"

namespace limiter {

void YamlReader::Fail(const YAML::Mark& mark, const std::string& field,
                      const std::string& what) const {
  std::ostringstream out;
  out << source_;
  if (!mark.is_null()) out << ':' << mark.line + 1 << ':' << mark.column + 1;
  out << ": ";
  if (!subject_.empty()) out << subject_ << ", ";
  if (!field.empty()) out << "field '" << field << "': ";
  out << what;
  throw YamlError{out.str()};
}

std::map<std::string, YamlReader::Field> YamlReader::Fields(
    const YAML::Node& map, const std::string& field,
    std::initializer_list<std::string_view> known) const {
  if (!map.IsMap()) Fail(map, field, "expected a map of fields");
  std::map<std::string, Field> fields;
  const std::string prefix = field.empty() ? "" : field + ".";
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) Fail(kv.first, field, "field names must be plain words");
    const std::string name = kv.first.Scalar();
    bool is_known = false;
    std::string list;
    for (std::string_view k : known) {
      is_known = is_known || k == name;
      list += (list.empty() ? "" : ", ") + std::string(k);
    }
    if (!is_known) Fail(kv.first, prefix + name, "unknown field (known: " + list + ")");
    if (auto it = fields.find(name); it != fields.end()) {
      Fail(kv.first, prefix + name,
           "given twice (first at line " + std::to_string(it->second.key.Mark().line + 1) + ")");
    }
    fields.emplace(name, Field{kv.first, kv.second});
  }
  return fields;
}

std::string YamlReader::Scalar(const Field& f, const std::string& field) const {
  if (!f.value.IsScalar()) Fail(f.value, field, "expected a single value, got a list or map");
  return f.value.Scalar();
}

int64_t YamlReader::PositiveInt(const Field& f, const std::string& field) const {
  const std::string text = Scalar(f, field);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) Fail(f.value, field, "'" + text + "' is too large");
  if (ec != std::errc() || end != text.data() + text.size()) {
    Fail(f.value, field, "expected a positive integer, got '" + text + "'");
  }
  if (value <= 0) Fail(f.value, field, "must be a positive integer, got " + text);
  return value;
}

int64_t YamlReader::DurationMs(const Field& f, const std::string& field) const {
  const std::string text = Scalar(f, field);
  const std::optional<int64_t> ms = ParseDurationMs(text);
  if (!ms) {
    Fail(f.value, field, "expected a duration such as 250ms, 1s, 5m, 1h or 1d, got '" + text + "'");
  }
  if (*ms <= 0) Fail(f.value, field, "must be at least 1ms, got '" + text + "'");
  return *ms;
}

int64_t YamlReader::DurationMs(const Field& f, const std::string& field, int64_t min_ms,
                               int64_t max_ms) const {
  const std::string text = Scalar(f, field);
  const std::optional<int64_t> ms = ParseDurationMs(text);
  if (!ms) {
    Fail(f.value, field, "expected a duration such as 250ms, 1s, 5m, 1h or 1d, got '" + text + "'");
  }
  if (*ms < min_ms || *ms > max_ms) {
    Fail(f.value, field,
         "must be between " + FormatDurationMs(min_ms) + " and " + FormatDurationMs(max_ms) +
             ", got '" + text + "'");
  }
  return *ms;
}

int64_t YamlReader::IntInRange(const Field& f, const std::string& field, int64_t min,
                               int64_t max) const {
  const std::string text = Scalar(f, field);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    Fail(f.value, field, "expected an integer, got '" + text + "'");
  }
  if (value < min || value > max) {
    Fail(
        f.value, field,
        "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " + text);
  }
  return value;
}

bool YamlReader::Bool(const Field& f, const std::string& field) const {
  const std::string text = Scalar(f, field);
  if (text == "true") return true;
  if (text == "false") return false;
  Fail(f.value, field, "expected true or false, got '" + text + "'");
}

}  // namespace limiter
