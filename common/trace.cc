#include "common/trace.h"

#include <charconv>

#include "common/limits.h"
#include "common/rate.h"
#include "common/read_file.h"

namespace limiter {
namespace {

constexpr std::string_view kColumns[] = {"t_ms", "key", "cost", "label"};

// Splits one CSV line into fields; a field may be "quoted" with "" for a quote inside.
Result<std::vector<std::string>> SplitCsv(std::string_view line) {
  std::vector<std::string> fields;
  size_t i = 0;
  while (true) {
    std::string field;
    if (i < line.size() && line[i] == '"') {
      ++i;
      while (true) {
        if (i >= line.size()) return Error{"unterminated quoted field"};
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field += line[i++];
      }
      if (i < line.size() && line[i] != ',') return Error{"text after a closing quote"};
    } else {
      const size_t end = line.find(',', i);
      const size_t stop = end == std::string_view::npos ? line.size() : end;
      field.assign(line.substr(i, stop - i));
      if (field.find('"') != std::string::npos) return Error{"a quote inside an unquoted field"};
      i = stop;
    }
    fields.push_back(std::move(field));
    if (i >= line.size()) return fields;
    ++i;  // the comma
  }
}

std::optional<int64_t> ParseInt(const std::string& text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

Result<std::vector<TraceRow>> ParseTrace(std::string_view text, const std::string& source) {
  std::vector<TraceRow> rows;
  size_t columns = 0;  // from the header; 0 until it is read
  int line_no = 0;
  auto fail = [&](const std::string& what) {
    return Error{source + ":" + std::to_string(line_no) + ": " + what};
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    Result<std::vector<std::string>> split = SplitCsv(line);
    if (!split.ok()) return fail(split.error());
    std::vector<std::string>& fields = *split;

    if (columns == 0) {
      bool ok = fields.size() >= 2 && fields.size() <= 4;
      for (size_t i = 0; ok && i < fields.size(); ++i) ok = fields[i] == kColumns[i];
      if (!ok) {
        return fail(
            "the header must be t_ms,key,cost,label (cost and label may be left out), "
            "got '" +
            std::string(line) + "'");
      }
      columns = fields.size();
      continue;
    }
    if (fields.size() < 2) return fail("expected at least t_ms and key, got one field");
    if (fields.size() > columns) {
      return fail("expected at most " + std::to_string(columns) +
                  " fields (as in the header), got " + std::to_string(fields.size()));
    }
    TraceRow row;
    row.line = line_no;
    const std::optional<int64_t> t = ParseInt(fields[0]);
    if (!t || *t < 0) {
      return fail("t_ms must be a non-negative integer (milliseconds), got '" + fields[0] + "'");
    }
    row.t_ms = *t;
    if (!rows.empty() && row.t_ms < rows.back().t_ms) {
      return fail("t_ms " + fields[0] + " is earlier than the previous row's " +
                  std::to_string(rows.back().t_ms) + " (t_ms must be non-decreasing)");
    }
    row.key = std::move(fields[1]);
    if (row.key.empty()) return fail("key is empty");
    if (row.key.size() > kMaxKeyBytes) {
      return fail("key is longer than " + std::to_string(kMaxKeyBytes) + " bytes");
    }
    if (fields.size() > 2 && !fields[2].empty()) {
      const std::optional<int64_t> cost = ParseInt(fields[2]);
      if (!cost || *cost <= 0)
        return fail("cost must be a positive integer, got '" + fields[2] + "'");
      if (*cost > kMaxCost) {
        return fail("cost " + fields[2] + " is above the maximum of " + std::to_string(kMaxCost));
      }
      row.cost = *cost;
    }
    if (fields.size() > 3) row.label = std::move(fields[3]);
    rows.push_back(std::move(row));
  }
  if (columns == 0) {
    return Error{source + ": empty; expected the header t_ms,key,cost,label and then rows"};
  }
  return rows;
}

Result<std::vector<TraceRow>> LoadTraceFile(const std::string& path) {
  Result<std::string> text = ReadWholeFile(path, "trace");
  if (!text) return Error{text.error()};
  return ParseTrace(*text, path);
}

}  // namespace limiter
