// Internal to the io rung: a bounds-checked little-endian cursor over untrusted bytes, and overflow-checked
// arithmetic. Every parser reads through this so that a lying length or count becomes an Error("io") that
// says what was being read, at which offset, and in which file, instead of an out-of-bounds read.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.h"

namespace lowbit::io::detail {

static_assert(std::endian::native == std::endian::little, "lowbit io assumes a little-endian host");

// a * b into *out; false on overflow.
inline bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
inline bool add_ok(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

class ByteReader {
 public:
  ByteReader(const uint8_t* p, size_t n, std::string_view name) : p_(p), n_(n), name_(name) {}

  size_t pos() const { return pos_; }
  size_t size() const { return n_; }
  size_t remaining() const { return n_ - pos_; }
  const std::string& name() const { return name_; }

  // Throws when fewer than k bytes are left.
  void need(uint64_t k, std::string_view what) const {
    if (k > remaining()) {
      fail("io", name_ + ": file truncated while reading " + std::string(what) + " at offset " +
                     std::to_string(pos_) + " (need " + std::to_string(k) + " bytes, " +
                     std::to_string(remaining()) +
                     " left); the file is incomplete or not in the expected format");
    }
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint8_t u8(std::string_view what) { return read<uint8_t>(what); }
  uint32_t u32(std::string_view what) { return read<uint32_t>(what); }
  uint64_t u64(std::string_view what) { return read<uint64_t>(what); }
  int32_t i32(std::string_view what) { return read<int32_t>(what); }

  // k raw bytes (pointer into the input).
  const uint8_t* bytes(uint64_t k, std::string_view what) {
    need(k, what);
    const uint8_t* r = p_ + pos_;
    pos_ += static_cast<size_t>(k);
    return r;
  }
  void skip(uint64_t k, std::string_view what) { bytes(k, what); }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  std::string name_;
};

}  // namespace lowbit::io::detail
