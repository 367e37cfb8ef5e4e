// Content hashes recorded in manifests and baselines (SHA-256 via OpenSSL, hex-encoded).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace lowbit {

std::string sha256_hex(const void* data, size_t n);
inline std::string sha256_hex(std::string_view s) {
  return sha256_hex(s.data(), s.size());
}
// Hash of a whole file, streamed; throws [core] error if it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace lowbit
