#include "core/hash.h"

#include <openssl/evp.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include "core/error.h"

namespace lowbit {
namespace {
struct Ctx {
  EVP_MD_CTX* c = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(c); }
};
std::string hex(const unsigned char* d, unsigned n) {
  static const char* k = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (unsigned i = 0; i < n; ++i) {
    s[2 * i] = k[d[i] >> 4];
    s[2 * i + 1] = k[d[i] & 15];
  }
  return s;
}
}  // namespace

std::string sha256_hex(const void* data, size_t n) {
  Ctx ctx;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestInit_ex(ctx.c, EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx.c, data, n);
  EVP_DigestFinal_ex(ctx.c, md, &len);
  return hex(md, len);
}

std::string sha256_file_hex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("core", "cannot read '" + path + "' to hash it; check the path and permissions");
  Ctx ctx;
  EVP_DigestInit_ex(ctx.c, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    EVP_DigestUpdate(ctx.c, buf.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx.c, md, &len);
  return hex(md, len);
}

}  // namespace lowbit
