// Test certificates made with the openssl CLI: a CA (NAME.pem, NAME.key) and certificates it
// signs, in a directory of the test's. For the TLS and mutual-TLS integration tests.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace limiter::testing {

inline bool RunQuietly(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

inline bool MakeCa(const std::filesystem::path& dir, const std::string& name) {
  return RunQuietly(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
      "-subj /CN=" +
      name + " -keyout " + (dir / (name + ".key")).string() + " -out " +
      (dir / (name + ".pem")).string());
}

// NAME.pem and NAME.key, signed by CA `ca` in the same directory.
inline bool MakeCert(const std::filesystem::path& dir, const std::string& ca,
                     const std::string& name) {
  const std::string base = (dir / name).string();
  const std::string ca_base = (dir / ca).string();
  return RunQuietly(
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=" +
             name + " -keyout " + base + ".key -out " + base + ".csr") &&
         RunQuietly("openssl x509 -req -days 2 -in " + base + ".csr -CA " + ca_base +
                    ".pem -CAkey " + ca_base + ".key -CAcreateserial -out " + base + ".pem");
}

}  // namespace limiter::testing
