// GGUF v2/v3 reader and writer (llama.cpp's single-file format).
// Layout: magic "GGUF", u32 version, u64 tensor count, u64 kv count, kv pairs (string key, u32 type, value),
// tensor infos (name, u32 n_dims, u64 dims[n_dims] innermost first, u32 ggml type, u64 offset), padding to
// general.alignment (default 32), tensor data. All counts, lengths and offsets are checked (hostile input):
// v1 and big-endian files are rejected; keys <= 64 KiB, strings <= 1 GiB, arrays nest <= 8 deep, counts must
// fit the bytes left; tensors have <= 4 dims, each > 0, a known ggml type (formats/ggml_types.h), a row
// length that is a multiple of the block size, and aligned, non-overlapping offsets inside the data section.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "io/mapped_file.h"
#include "tensor/tensor.h"

namespace lowbit::io {

enum class GgufType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12
};

class GgufArray;
struct GgufValue {
  GgufType type = GgufType::UINT32;
  GgufType elem_type = GgufType::UINT32;  // for ARRAY
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> v;

  // Typed accessors; throw Error("io") on a type mismatch naming the expected type.
  int64_t as_int() const;
  double as_float() const;
  bool as_bool() const;
  const std::string& as_string() const&;
  const GgufArray& as_array() const&;
  // On a temporary (an element decoded from a GgufArray) these return their own copy, so
  // `const std::string& s = arr[i].as_string();` and `for (auto& e : arr[i].as_array())` stay valid.
  std::string as_string() &&;
  GgufArray as_array() &&;
};

// A metadata array. Arrays read from a file keep their encoded bytes (one copy, little-endian, plus an 8-byte
// start offset per string / nested-array element) and decode an element on access: a GgufValue per element
// would hold ~48 bytes for each 1-byte uint8 in the file, so a crafted 1 GB file could demand ~48 GB.
// Arrays built in memory (writer, tests) hold their GgufValues. Elements come back by value.
class GgufArray {
 public:
  class iterator {
   public:
    using value_type = GgufValue;
    using difference_type = std::ptrdiff_t;
    iterator(const GgufArray* a, size_t i) : a_(a), i_(i) {}
    GgufValue operator*() const { return (*a_)[i_]; }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const iterator& o) const { return i_ == o.i_; }

   private:
    const GgufArray* a_;
    size_t i_;
  };

  GgufArray() = default;
  GgufArray(std::initializer_list<GgufValue> values) : values_(values) {}
  // Encoded elements of type `elem` exactly as in a file (already validated by the reader): they are copied.
  static GgufArray from_encoded(GgufType elem, uint64_t count, const uint8_t* bytes, size_t nbytes,
                                std::vector<uint64_t> starts);

  size_t size() const { return encoded() ? count_ : values_.size(); }
  bool empty() const { return size() == 0; }
  GgufValue operator[](size_t i) const;  // decoded on access; Error("io") when out of range
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, size()}; }
  void reserve(size_t n) { values_.reserve(n); }
  void push_back(GgufValue v);  // in-memory arrays only

  // Encoded form (for the writer's byte-exact copy); empty for in-memory arrays.
  bool encoded() const { return encoded_; }
  GgufType encoded_elem_type() const { return elem_; }
  const std::vector<uint8_t>& encoded_bytes() const { return bytes_; }
  // Heap bytes this array holds (the memory bound the reader promises; tests check it).
  size_t memory_bytes() const;

 private:
  std::vector<GgufValue> values_;
  bool encoded_ = false;
  GgufType elem_ = GgufType::UINT8;
  uint64_t count_ = 0;
  std::vector<uint8_t> bytes_;
  std::vector<uint64_t> starts_;  // element start in bytes_, for STRING / ARRAY elements only
};

struct GgufFile {
  std::string path;
  uint32_t version = 3;
  uint64_t alignment = 32;
  std::shared_ptr<MappedFile> file;
  std::vector<std::string> kv_order;  // keys in file order
  std::map<std::string, GgufValue> kv;
  std::vector<std::string> tensor_order;      // tensor names in file order
  std::map<std::string, TensorView> tensors;  // shapes outermost-first (reversed from the file); F32/F16/BF16
                                              // become those DTypes, block types are GGML_BLOCK + ggml_type

  static GgufFile open(const std::string& path);
  // Parse from memory (fuzzing, tests); tensor views point into `bytes`, which must outlive the result.
  static GgufFile parse(const uint8_t* bytes, size_t n, const std::string& name_for_errors);

  bool has(const std::string& key) const { return kv.count(key) != 0; }
  const GgufValue& get(const std::string& key) const;  // Error("io") when absent
};

// Writer: metadata in insertion order, then tensors. Tensors are given outermost-first like TensorView; the
// writer reverses dims for the file. Written atomically.
class GgufWriter {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_array_string(const std::string& key, const std::vector<std::string>& v);
  void set_array_f32(const std::string& key, const std::vector<float>& v);
  void set_array_i32(const std::string& key, const std::vector<int32_t>& v);
  // Any value, including nested arrays (e.g. copied from a GgufFile). Setting a key again replaces it in
  // place.
  void set_value(const std::string& key, const GgufValue& v);
  // ggml_type: 0 F32, 1 F16, 30 BF16, or a block type id; data holds the exact bytes. The writer keeps the
  // pointer, not a copy: `data` must stay valid until write() returns (nullptr: for file_bytes() only).
  // Checks the type id, the shape (dims > 0, at most 4, row a multiple of the block size) and nbytes,
  // throwing Error("io") naming the tensor.
  void add_tensor(const std::string& name, int ggml_type, const std::vector<int64_t>& shape, const void* data,
                  size_t nbytes);
  // Writes GGUF v3. An alignment other than 32 (power of two) is recorded as general.alignment.
  void write(const std::string& path, uint32_t alignment = 32) const;
  // The size of the file write() would produce: the aligned header (metadata, tensor infos) plus every
  // tensor's bytes padded to the alignment. The header does not depend on the tensors' types.
  uint64_t file_bytes(uint32_t alignment = 32) const;

 private:
  std::vector<uint8_t> header(uint32_t alignment, std::vector<uint64_t>* offsets) const;
  struct Kv {
    std::string key;
    std::vector<uint8_t> encoded;  // type + value, already serialised
  };
  struct T {
    std::string name;
    int type;
    std::vector<int64_t> shape;
    const void* data;
    size_t nbytes;
  };
  std::vector<Kv> kvs_;
  std::vector<T> tensors_;
};

}  // namespace lowbit::io
