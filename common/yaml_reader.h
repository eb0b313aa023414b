// Strict reading of YAML configuration (the policy file, limiterd's config): every field
// known, every value of the right type, and one message naming file:line:column, the thing
// being read and the field when anything is off. Used only while loading, never on a
// request path.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <string_view>

#include "limiter/status.h"

namespace limiter {

// Carries the first problem from deep in a loader to LoadYaml; never escapes LoadYaml.
struct YamlError {
  std::string message;
};

class YamlReader {
 public:
  explicit YamlReader(std::string source) : source_(std::move(source)) {}

  const std::string& source() const { return source_; }
  // What is being read, for messages: "policy 'tenant'"; empty for the top level.
  void set_subject(std::string subject) { subject_ = std::move(subject); }

  struct Field {
    YAML::Node key;
    YAML::Node value;
  };

  [[noreturn]] void Fail(const YAML::Mark& mark, const std::string& field,
                         const std::string& what) const;
  [[noreturn]] void Fail(const YAML::Node& node, const std::string& field,
                         const std::string& what) const {
    Fail(node.Mark(), field, what);
  }

  // The fields of a map, checked against `known`; a duplicate or unknown field fails.
  // `field` names the map itself in messages ("" for the top level, "lease", ...).
  std::map<std::string, Field> Fields(const YAML::Node& map, const std::string& field,
                                      std::initializer_list<std::string_view> known) const;
  std::string Scalar(const Field& f, const std::string& field) const;
  int64_t PositiveInt(const Field& f, const std::string& field) const;
  int64_t DurationMs(const Field& f, const std::string& field) const;
  // The same, held to [min_ms, max_ms]: "must be between 100ms and 1d, got '20000w'".
  int64_t DurationMs(const Field& f, const std::string& field, int64_t min_ms,
                     int64_t max_ms) const;
  // An integer in [min, max] (min may be 0): "must be between 1 and 1000000, got 0".
  int64_t IntInRange(const Field& f, const std::string& field, int64_t min, int64_t max) const;
  bool Bool(const Field& f, const std::string& field) const;

 private:
  std::string source_;
  std::string subject_;
};

// Parses `text` and returns load(reader, root); any problem becomes the Result's error.
template <class T, class Load>
Result<T> LoadYaml(std::string_view text, const std::string& source, Load load) {
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    YamlReader reader(source);
    return load(reader, root);
  } catch (const YamlError& e) {
    return Error{e.message};
  } catch (const YAML::Exception& e) {
    std::ostringstream out;
    out << source;
    if (!e.mark.is_null()) out << ':' << e.mark.line + 1 << ':' << e.mark.column + 1;
    out << ": not valid YAML: " << e.msg;
    return Error{out.str()};
  }
}

}  // namespace limiter
