#include "client/journal_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace limiter::journal_files {
namespace {

// The pid that holds a flock on the file `st` describes, as /proc/locks lists it; empty when
// it cannot be told.
std::string LockHolder(const struct stat& st) {
  std::FILE* f = std::fopen("/proc/locks", "re");
  if (f == nullptr) return "";
  std::string by_inode;  // a match of the inode alone (a file system that reports devices
                         // differently there)
  std::string holder;
  char line[256];
  while (holder.empty() && std::fgets(line, sizeof(line), f) != nullptr) {
    char kind[16], access[16];
    int pid = 0;
    unsigned dev_major = 0, dev_minor = 0;
    unsigned long inode = 0;
    // "1: FLOCK  ADVISORY  WRITE 12401 fe:00:10953920 0 EOF"; waiters' lines have "->".
    if (std::sscanf(line, "%*d: %15s %*15s %15s %d %x:%x:%lu", kind, access, &pid, &dev_major,
                    &dev_minor, &inode) != 6 ||
        std::strcmp(kind, "FLOCK") != 0 || inode != static_cast<unsigned long>(st.st_ino)) {
      continue;
    }
    if (dev_major == major(st.st_dev) && dev_minor == minor(st.st_dev)) {
      holder = std::to_string(pid);
    } else if (by_inode.empty()) {
      by_inode = std::to_string(pid);
    }
  }
  std::fclose(f);
  return holder.empty() ? by_inode : holder;
}

}  // namespace

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Makes the directory entry of a rename or a new file durable.
bool SyncDirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

// Writes `content` to a new file at `path`, only for its owner, and syncs it; the descriptor,
// open for appends and holding the journal's exclusive flock (the new file is the journal
// once renamed, and its lock goes with it). Never follows a symlink and never reuses a file:
// whatever is already at `path` (planted, or a rewrite's leftover) is an error naming it.
Result<int> WriteNewFile(const std::string& path, std::string_view content) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST || errno == ELOOP) {
      return Error{path + " exists already (a file or a symlink this journal did not make); " +
                   "it is neither followed nor replaced"};
    }
    return Error{Errno(path)};
  }
  std::string why;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    why = Errno("flock " + path);
  } else if (!WriteAll(fd, content.data(), content.size()) || ::fdatasync(fd) != 0) {
    why = Errno(path);
  }
  if (!why.empty()) {
    ::close(fd);
    ::unlink(path.c_str());  // this call made it
    return Error{why};
  }
  return fd;
}

// Opens the journal for reading and appends (created, only for its owner, when missing) and
// takes an exclusive flock on the file itself, so that every path to it (a symlink, a hard
// link) names one writer. The error names the file and, when it is held, the pid that holds
// it.
Result<int> OpenLocked(const std::string& path) {
  const std::string where = "billing journal " + path;
  // A rewrite renames a new file over the path; one that lands between our open and our flock
  // leaves us holding the replaced file, so we look again (a few times: each needs a rewrite).
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return Error{Errno(where + ": open")};
    auto fail = [&](std::string why) -> Result<int> {
      ::close(fd);
      return Error{std::move(why)};
    };
    struct stat st;
    if (::fstat(fd, &st) != 0) return fail(Errno(where + ": fstat"));
    if (!S_ISREG(st.st_mode)) return fail(where + ": not a regular file");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) return fail(Errno(where + ": flock"));
      const std::string holder = LockHolder(st);
      return fail(where + ": in use by another gateway" +
                  (holder.empty() ? "" : " (pid " + holder + ")") +
                  ", which holds its lock; each gateway needs its own journal");
    }
    struct stat now;
    if (::stat(path.c_str(), &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
      ::close(fd);
      continue;
    }
    return fd;
  }
  return Error{where + ": replaced while being opened, again and again"};
}

// A journal wider than 0600 (it holds key names) is tightened, with a warning.
void Tighten(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || (st.st_mode & 07777) == 0600) return;
  const unsigned was = st.st_mode & 07777;
  const bool tightened = ::fchmod(fd, 0600) == 0;
  const std::string how = tightened ? "tightened to 0600" : Errno("fchmod");
  std::fprintf(stderr,
               "limiter client: billing journal %s: was mode %04o; it holds key names, so it "
               "should be 0600: %s\n",
               path.c_str(), was, how.c_str());
}

// Where rewrites go: the file the path names (a symlink to a journal stays one).
std::string RealPath(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr) return path;
  std::string out(real);
  std::free(real);
  return out;
}

// Reads the whole file from its start.
Result<std::string> ReadFrom(int fd, const std::string& path) {
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof(buf), static_cast<off_t>(bytes.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{Errno("billing journal " + path + ": read")};
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  return bytes;
}

}  // namespace limiter::journal_files
