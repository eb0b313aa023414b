// The billing journal's files (billing_journal.h), on POSIX: the journal opened and locked
// (an exclusive flock on the file itself, so every path to it is one writer), a rewrite's new
// file created only for its owner and never through what is already at its path, and the
// small I/O helpers both use. Functions only; errors are strings naming the file.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "limiter/status.h"

namespace limiter::journal_files {

// write(2) until all of it is written; false (errno set) otherwise.
bool WriteAll(int fd, const char* data, size_t size);
// `what`, ": " and strerror(errno).
std::string Errno(const std::string& what);
// Makes the directory entry of a rename or a new file durable.
bool SyncDirectoryOf(const std::string& path);
// Writes `content` to a new file at `path`, 0600, and syncs it; the descriptor, open for
// appends and holding an exclusive flock. Never follows a symlink and never reuses a file:
// whatever is already at `path` is an error naming it.
Result<int> WriteNewFile(const std::string& path, std::string_view content);
// Opens the journal at `path` for reading and appends (created 0600 when missing) and takes an
// exclusive flock on the file itself. The error names the file and the pid holding it.
Result<int> OpenLocked(const std::string& path);
// A journal wider than 0600 (it holds key names) is tightened, with a warning on stderr.
void Tighten(int fd, const std::string& path);
// The file `path` names (symlinks resolved); `path` itself when it cannot be resolved.
std::string RealPath(const std::string& path);
// The whole file, read from its start.
Result<std::string> ReadFrom(int fd, const std::string& path);

}  // namespace limiter::journal_files
