#include "io/durable.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace lowbit::io {
namespace fs = std::filesystem;

namespace {

constexpr const char* kOwnerFile = ".lowbit-writer-pid";

fs::path parent_dir(const fs::path& target) {
  return target.parent_path().empty() ? fs::path(".") : target.parent_path();
}

// A temporary whose writer is gone: its pid file names a process that no longer exists (or was never written,
// and the directory is older than a minute, i.e. not being set up right now).
bool abandoned(const fs::path& tmp) {
  std::error_code ec;
  std::ifstream in(tmp / kOwnerFile);
  long pid = 0;
  if (in >> pid && pid > 0) return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
  const auto age = fs::file_time_type::clock::now() - fs::last_write_time(tmp, ec);
  return !ec && age > std::chrono::minutes(1);
}

void remove_abandoned(const fs::path& target) {
  std::error_code ec;
  const fs::path dir = parent_dir(target);
  const std::string prefix = target.filename().string() + ".tmp-";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (e.is_directory(ec) && abandoned(e.path())) fs::remove_all(e.path(), ec);
  }
}

}  // namespace

void fsync_path(const std::string& path) {
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  const int fd = ::open(path.c_str(), (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) {
    if (dir) return;
    fail("io", "cannot open '" + path + "' to sync it: " + std::strerror(errno));
  }
  const int rc = ::fsync(fd), e = errno;
  ::close(fd);
  if (rc != 0 && !dir) fail("io", "fsync of '" + path + "' failed: " + std::strerror(e) + "; check the disk");
}

std::string make_temp_dir_for(const std::string& target) {
  const fs::path t(target);
  const fs::path parent = parent_dir(t);
  std::error_code ec;
  if (!fs::is_directory(parent, ec))  // the path the user named: a usage error (exit 2), not a failure
    throw UsageError("io", "the parent directory '" + parent.string() + "' of '" + target +
                               "' does not exist; create it first (mkdir -p) or write elsewhere");
  remove_abandoned(t);
  std::string tmpl = target + ".tmp-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    fail("io", "cannot create a temporary directory next to '" + target + "': " + std::strerror(errno) +
                   "; check that '" + parent.string() + "' is writable");
  std::ofstream(fs::path(tmpl) / kOwnerFile) << ::getpid() << "\n";
  return tmpl;
}

void replace_dir_by_renames(const std::string& tmp, const std::string& target) {
  std::error_code ec;
  fs::remove(fs::path(tmp) / kOwnerFile, ec);  // as publish_dir does: the mark is never published
  const fs::path parent = parent_dir(target);
  // The old one moves aside first (to a fresh name next to it) so a failure never loses both; the name's
  // placeholder directory (with its owner mark) must go first.
  const std::string old = make_temp_dir_for(target);
  fs::remove_all(old, ec);
  fs::rename(target, old, ec);
  if (ec) fail("io", "cannot move '" + target + "' aside to replace it: " + ec.message());
  fs::rename(tmp, target, ec);
  if (ec) {
    std::error_code back;
    fs::rename(old, target, back);  // put the old one back
    fail("io", "cannot replace '" + target + "': " + ec.message() + "; the old directory is unchanged");
  }
  fsync_path(parent.string());
  fs::remove_all(old, ec);
}

int64_t open_to_readers(const std::string& tmp, const std::vector<std::string>& files) {
  std::error_code ec;
  const auto rw =
      fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read;
  int64_t bytes = 0;
  for (const auto& f : files) {
    fs::permissions(fs::path(tmp) / f, rw, ec);
    bytes += static_cast<int64_t>(fs::file_size(fs::path(tmp) / f));
  }
  fs::permissions(tmp, rw | fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec, ec);
  return bytes;
}

void publish_dir(const std::string& tmp, const std::string& target, bool replace) {
  std::error_code ec;
  fs::remove(fs::path(tmp) / kOwnerFile, ec);
  for (const auto& e : fs::recursive_directory_iterator(tmp, ec))
    if (e.is_regular_file()) fsync_path(e.path().string());
  fsync_path(tmp);
  const fs::path parent = parent_dir(target);
  if (fs::exists(target, ec)) {
    if (!replace) fail("io", "'" + target + "' exists; choose another output or ask to replace it");
    // One atomic step: readers see the old directory or the new one, never neither.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
      fsync_path(parent.string());
      fs::remove_all(tmp, ec);  // now holds the old target
      return;
    }
    if (errno != EINVAL && errno != ENOSYS)
      fail("io", "cannot replace '" + target + "': " + std::strerror(errno));
    // File system without RENAME_EXCHANGE.
    replace_dir_by_renames(tmp, target);
    return;
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0)
    fail("io", "cannot rename '" + tmp + "' onto '" + target + "': " + std::strerror(errno));
  fsync_path(parent.string());
}

}  // namespace lowbit::io
