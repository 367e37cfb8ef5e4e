#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace lowbit::io {
namespace {

std::string os_reason(int err) {
  return std::strerror(err);
}

// Closes the fd on every path out of open(), including exceptions.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

// A non-null address for empty files: parsers may then treat data() uniformly.
const uint8_t kEmpty[1] = {0};

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    fail("io", "cannot open '" + path + "': " + os_reason(e) + "; check the path and its permissions");
  }
  FdGuard guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    fail("io", "cannot stat '" + path + "': " + os_reason(e));
  }
  if (!S_ISREG(st.st_mode)) {
    fail("io", "'" + path + "' is not a regular file" + (S_ISDIR(st.st_mode) ? " (it is a directory)" : "") +
                   "; pass the path of a file");
  }
  auto mf = std::shared_ptr<MappedFile>(new MappedFile());
  mf->path_ = path;
  mf->size_ = static_cast<size_t>(st.st_size);
  if (mf->size_ == 0) {
    mf->data_ = kEmpty;
    return mf;
  }
  void* p = ::mmap(nullptr, mf->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    mf->size_ = 0;
    fail("io", "cannot mmap '" + path + "' (" + std::to_string(st.st_size) + " bytes): " + os_reason(e));
  }
  mf->data_ = static_cast<const uint8_t*>(p);
  return mf;
}

void MappedFile::release_pages(const void* p, size_t n) const {
  const auto* b = static_cast<const uint8_t*>(p);
  if (size_ == 0 || b < data_ || b + n > data_ + size_ || n == 0) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(b) + page - 1) / page * page,
                  hi = (reinterpret_cast<uintptr_t>(b) + n) / page * page;
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (size_ > 0 && data_ != nullptr && data_ != kEmpty) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void write_file_atomic(const std::string& path, const void* bytes, size_t n) {
  write_file_atomic(path, std::vector<ByteSpan>{{bytes, n}});
}

void write_file_atomic(const std::string& path, const std::vector<ByteSpan>& pieces) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  // The temporary lives next to the target so that rename() is atomic (same file system).
  std::string tmpl = dir.string();
  tmpl += "/.";
  tmpl += target.filename().string();
  tmpl += ".tmp.XXXXXX";
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) {
    int e = errno;
    fail("io", "cannot create a temporary file in '" + dir.string() + "' to write '" + path +
                   "': " + os_reason(e) + "; check that the directory exists and is writable");
  }
  auto abandon = [&](const std::string& what, int e) {
    ::close(fd);
    ::unlink(tmpl.c_str());
    std::string hint =
        (e == ENOSPC || e == EDQUOT) ? "; the disk is full: free space or write elsewhere" : "";
    fail("io", "writing '" + path + "' failed (" + what + "): " + os_reason(e) + hint +
                   "; the original file, if any, is unchanged");
  };
  ::fchmod(fd, 0644);  // mkstemp creates 0600; checkpoints are meant to be shared
  for (const ByteSpan& piece : pieces) {
    const char* p = static_cast<const char*>(piece.data);
    size_t left = piece.size;
    while (left > 0) {
      ssize_t w = ::write(fd, p, left);
      if (w < 0) {
        if (errno == EINTR) continue;
        abandon("write", errno);
      }
      if (w == 0) abandon("write returned 0", ENOSPC);
      p += w;
      left -= static_cast<size_t>(w);
    }
  }
  if (::fsync(fd) != 0) abandon("fsync", errno);
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(tmpl.c_str());
    fail("io", "writing '" + path + "' failed (close): " + os_reason(e));
  }
  if (::rename(tmpl.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmpl.c_str());
    fail("io", "cannot rename the temporary file onto '" + path + "': " + os_reason(e) +
                   "; check that the path is not a directory and is writable");
  }
  // Persist the directory entry too (best effort: some file systems refuse fsync on directories).
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace lowbit::io
