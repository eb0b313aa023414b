#include "common/read_file.h"

#include <fstream>
#include <sstream>

namespace limiter {

Result<std::string> ReadWholeFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{path + ": cannot open the " + std::string(what) + " file"};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error{path + ": cannot read the " + std::string(what) + " file"};
  return std::move(text).str();
}

}  // namespace limiter
