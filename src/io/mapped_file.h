// Read-only memory-mapped file. All readers in io map the file and hand out TensorViews into the mapping
// (zero-copy); the MappedFile is shared by every view's owner so the mapping lives as long as any user.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lowbit::io {

class MappedFile {
 public:
  // Throws Error("io") with the path and the OS reason when the file cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // An empty file maps to a valid, non-null pointer with size() == 0.
  // Drops this process's mapping of the whole pages inside [p, p + n) (which must lie in the file): they
  // leave the resident set, and a later read faults them back in from the file (the mapping is read-only).
  // Used once a loader holds a repacked copy of a tensor. Ranges outside the mapping are ignored.
  void release_pages(const void* p, size_t n) const;

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Writes `bytes` to `path` atomically: a temporary file in the same directory, fsync, then rename.
// On any failure the temporary is removed and Error("io") is thrown; `path` is never left half-written.
void write_file_atomic(const std::string& path, const void* bytes, size_t n);

// Same, for a file made of several pieces written in order (header, then tensors straight from their owners'
// memory), so that writers never need a second in-memory copy of a large checkpoint. A full disk gives an
// Error that says so.
struct ByteSpan {
  const void* data;
  size_t size;
};
void write_file_atomic(const std::string& path, const std::vector<ByteSpan>& pieces);

}  // namespace lowbit::io
