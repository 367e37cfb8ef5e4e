// Helpers shared by the fuzz targets above the raw parsers: splitting one input into several files, and a
// per-process scratch directory for the loaders that only take paths.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace lowbit::fuzz {

// The first `n - 1` NUL-separated parts of the input, then everything after them (which may hold NULs, e.g. a
// binary file). Parts missing from a short input are empty.
inline std::vector<std::string_view> split_parts(const uint8_t* data, size_t size, size_t n) {
  std::vector<std::string_view> parts;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (parts.size() + 1 < n) {
    const size_t nul = rest.find('\0');
    if (nul == std::string_view::npos) {
      parts.push_back(rest);
      rest = {};
      continue;
    }
    parts.push_back(rest.substr(0, nul));
    rest.remove_prefix(nul + 1);
  }
  parts.push_back(rest);
  return parts;
}

// /tmp/lowbit_fuzz_<tag>_<pid>/, created once and removed at exit: parallel fuzzers never share files.
inline const std::filesystem::path& scratch_dir(const char* tag) {
  struct Dir {
    std::filesystem::path p;
    explicit Dir(const char* tag) {
      p = std::filesystem::temp_directory_path() /
          ("lowbit_fuzz_" + std::string(tag) + "_" + std::to_string(::getpid()));
      std::filesystem::create_directories(p);
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  };
  static Dir d(tag);
  return d.p;
}

// Writes `bytes` to `path`, or removes `path` when `present` is false (so a previous input's file never
// leaks into this one).
inline void put_file(const std::filesystem::path& path, std::string_view bytes, bool present = true) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (!present) return;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();  // the scratch directory itself is broken: not the input's fault
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) __builtin_trap();
  std::fclose(f);
}

}  // namespace lowbit::fuzz
