#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.h"
#include "formats/ggml_types.h"
#include "io/byte_reader.h"

namespace lowbit::io {
namespace {

using detail::add_ok;
using detail::ByteReader;
using detail::mul_ok;

constexpr uint64_t kMaxKeyBytes = 1 << 16;        // keys are short dotted names
constexpr uint64_t kMaxStringBytes = 1ull << 30;  // a single metadata string (e.g. a chat template)
constexpr uint64_t kMaxNameBytes = 1 << 12;       // tensor names (llama.cpp uses 64)
constexpr int kMaxArrayDepth = 8;                 // nested arrays: bounded recursion
constexpr uint32_t kMaxDims = 4;

const char* type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8:
      return "uint8";
    case GgufType::INT8:
      return "int8";
    case GgufType::UINT16:
      return "uint16";
    case GgufType::INT16:
      return "int16";
    case GgufType::UINT32:
      return "uint32";
    case GgufType::INT32:
      return "int32";
    case GgufType::FLOAT32:
      return "float32";
    case GgufType::BOOL:
      return "bool";
    case GgufType::STRING:
      return "string";
    case GgufType::ARRAY:
      return "array";
    case GgufType::UINT64:
      return "uint64";
    case GgufType::INT64:
      return "int64";
    case GgufType::FLOAT64:
      return "float64";
  }
  return "unknown";
}

// Smallest encoding of one value of type t (for bounding element counts before allocating).
uint64_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL:
      return 1;
    case GgufType::UINT16:
    case GgufType::INT16:
      return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32:
      return 4;
    case GgufType::UINT64:
    case GgufType::INT64:
    case GgufType::FLOAT64:
    case GgufType::STRING:
      return 8;
    case GgufType::ARRAY:
      return 12;
  }
  return 1;
}

[[noreturn]] void bad(const ByteReader& r, const std::string& msg) {
  fail("io", r.name() + ": " + msg);
}

std::string read_string(ByteReader& r, uint64_t max_len, const std::string& what) {
  uint64_t len = r.u64(what + " length");
  if (len > max_len) {
    bad(r, what + " length " + std::to_string(len) + " at offset " + std::to_string(r.pos() - 8) +
               " exceeds the limit of " + std::to_string(max_len) + " bytes; the file is corrupt");
  }
  const uint8_t* b = r.bytes(len, what);
  return std::string(reinterpret_cast<const char*>(b), static_cast<size_t>(len));
}

GgufType read_type(ByteReader& r, const std::string& what) {
  uint32_t t = r.u32(what + " type");
  if (t > static_cast<uint32_t>(GgufType::FLOAT64)) {
    bad(r, what + " has unknown metadata value type " + std::to_string(t) + " at offset " +
               std::to_string(r.pos() - 4) + " (valid: 0..12)");
  }
  return static_cast<GgufType>(t);
}

// Bytes of one element of a fixed-size type; 0 for STRING and ARRAY (variable size).
uint64_t fixed_value_bytes(GgufType t) {
  return t == GgufType::STRING || t == GgufType::ARRAY ? 0 : min_value_bytes(t);
}

void check_array_fits(ByteReader& r, GgufType elem, uint64_t count, const std::string& what) {
  uint64_t min_bytes;
  if (!mul_ok(count, min_value_bytes(elem), &min_bytes) || min_bytes > r.remaining()) {
    bad(r, what + ": array of " + std::to_string(count) + " " + type_name(elem) +
               " values cannot fit in the " + std::to_string(r.remaining()) +
               " bytes left; the file is corrupt");
  }
}

// Validates one value and moves past it without decoding it (nested arrays inside an encoded array).
void skip_value(ByteReader& r, GgufType type, const std::string& what, int depth);

// Validates `count` elements of type `elem` at the cursor and moves past them. `starts`, when given, receives
// the start of each variable-size element relative to `base`.
void skip_elements(ByteReader& r, GgufType elem, uint64_t count, const std::string& what, int depth,
                   size_t base, std::vector<uint64_t>* starts) {
  if (const uint64_t size = fixed_value_bytes(elem)) {
    const uint8_t* p = r.bytes(count * size, what);  // check_array_fits bounded count * size
    if (elem == GgufType::BOOL) {
      for (uint64_t i = 0; i < count; ++i) {
        if (p[i] > 1) bad(r, what + ": bool value " + std::to_string(p[i]) + " is not 0 or 1");
      }
    }
    return;
  }
  if (starts) starts->reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    if (starts) starts->push_back(r.pos() - base);
    skip_value(r, elem, what, depth);
  }
}

void skip_value(ByteReader& r, GgufType type, const std::string& what, int depth) {
  if (type == GgufType::STRING) {
    // No `what + "..."` per element: a 10 M-string array would allocate (and free) 10 M error labels.
    if (r.remaining() < 8) r.u64(what + " length");  // throws, naming the field
    const uint64_t len = r.u64(what);
    if (len > kMaxStringBytes) {
      bad(r, what + " length " + std::to_string(len) + " at offset " + std::to_string(r.pos() - 8) +
                 " exceeds the limit of " + std::to_string(kMaxStringBytes) + " bytes; the file is corrupt");
    }
    r.skip(len, what);
    return;
  }
  if (type != GgufType::ARRAY) {
    skip_elements(r, type, 1, what, depth, 0, nullptr);
    return;
  }
  if (depth >= kMaxArrayDepth) {
    bad(r, what + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
  }
  const GgufType elem = read_type(r, what + " element");
  const uint64_t count = r.u64(what + " element count");
  check_array_fits(r, elem, count, what);
  skip_elements(r, elem, count, what, depth + 1, 0, nullptr);
}

GgufValue read_value(ByteReader& r, GgufType type, const std::string& what, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::UINT8:
      v.v = uint64_t{r.read<uint8_t>(what)};
      break;
    case GgufType::INT8:
      v.v = int64_t{r.read<int8_t>(what)};
      break;
    case GgufType::UINT16:
      v.v = uint64_t{r.read<uint16_t>(what)};
      break;
    case GgufType::INT16:
      v.v = int64_t{r.read<int16_t>(what)};
      break;
    case GgufType::UINT32:
      v.v = uint64_t{r.read<uint32_t>(what)};
      break;
    case GgufType::INT32:
      v.v = int64_t{r.read<int32_t>(what)};
      break;
    case GgufType::UINT64:
      v.v = r.read<uint64_t>(what);
      break;
    case GgufType::INT64:
      v.v = r.read<int64_t>(what);
      break;
    case GgufType::FLOAT32:
      v.v = double{r.read<float>(what)};
      break;
    case GgufType::FLOAT64:
      v.v = r.read<double>(what);
      break;
    case GgufType::BOOL: {
      uint8_t b = r.u8(what);
      if (b > 1) bad(r, what + ": bool value " + std::to_string(b) + " is not 0 or 1");
      v.v = b != 0;
      break;
    }
    case GgufType::STRING:
      v.v = read_string(r, kMaxStringBytes, what);
      break;
    case GgufType::ARRAY: {
      if (depth >= kMaxArrayDepth) {
        bad(r, what + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
      }
      v.elem_type = read_type(r, what + " element");
      const uint64_t count = r.u64(what + " element count");
      check_array_fits(r, v.elem_type, count, what);
      // Validate now, keep the encoded bytes, decode elements on access (see GgufArray).
      const size_t start = r.pos();
      const uint8_t* first = r.bytes(0, what);  // the cursor, not moved
      std::vector<uint64_t> starts;
      skip_elements(r, v.elem_type, count, what, depth + 1, start, &starts);
      auto arr = std::make_shared<GgufArray>(
          GgufArray::from_encoded(v.elem_type, count, first, r.pos() - start, std::move(starts)));
      v.v = std::move(arr);
      break;
    }
  }
  return v;
}

[[noreturn]] void type_mismatch(const GgufValue& v, const char* wanted) {
  fail("io", std::string("GGUF value has type ") + type_name(v.type) + " but " + wanted +
                 " was expected; check the key");
}

DType element_dtype(int ggml_type) {
  switch (ggml_type) {
    case 0:
      return DType::F32;
    case 1:
      return DType::F16;
    case 30:
      return DType::BF16;
    case 24:
      return DType::I8;
    case 25:
      return DType::I16;
    case 26:
      return DType::I32;
    case 27:
      return DType::I64;
    case 28:
      return DType::F64;
    default:
      return DType::GGML_BLOCK;
  }
}

uint64_t align_up(uint64_t x, uint64_t a, bool* ok) {
  uint64_t y;
  *ok = add_ok(x, a - 1, &y);
  return y / a * a;
}

}  // namespace

// ---- GgufValue accessors ----

int64_t GgufValue::as_int() const {
  if (auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(INT64_MAX))
      fail("io", "GGUF integer value " + std::to_string(*u) + " overflows int64");
    return static_cast<int64_t>(*u);
  }
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  type_mismatch(*this, "an integer");
}
double GgufValue::as_float() const {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  type_mismatch(*this, "a number");
}
bool GgufValue::as_bool() const {
  if (auto* b = std::get_if<bool>(&v)) return *b;
  type_mismatch(*this, "a bool");
}
const std::string& GgufValue::as_string() const& {
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  type_mismatch(*this, "a string");
}
const GgufArray& GgufValue::as_array() const& {
  if (auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v)) return **a;
  type_mismatch(*this, "an array");
}
std::string GgufValue::as_string() && {
  if (auto* s = std::get_if<std::string>(&v)) return std::move(*s);
  type_mismatch(*this, "a string");
}
GgufArray GgufValue::as_array() && {
  if (auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v)) {
    if (a->use_count() == 1) return std::move(**a);  // the only owner: hand the array over
    return **a;
  }
  type_mismatch(*this, "an array");
}

// ---- GgufArray ----

GgufArray GgufArray::from_encoded(GgufType elem, uint64_t count, const uint8_t* bytes, size_t nbytes,
                                  std::vector<uint64_t> starts) {
  GgufArray a;
  a.encoded_ = true;
  a.elem_ = elem;
  a.count_ = count;
  a.bytes_.assign(bytes, bytes + nbytes);
  a.starts_ = std::move(starts);
  return a;
}

GgufValue GgufArray::operator[](size_t i) const {
  if (i >= size()) {
    fail("io", "GGUF array index " + std::to_string(i) + " is out of range (" + std::to_string(size()) +
                   " elements)");
  }
  if (!encoded_) return values_[i];
  const uint64_t size = fixed_value_bytes(elem_);
  const uint64_t at = size ? i * size : starts_[i];
  // The bytes were validated when the file was read, so this decode cannot fail.
  ByteReader r(bytes_.data() + at, bytes_.size() - at, "GGUF array element");
  return read_value(r, elem_, "array element", 0);
}

void GgufArray::push_back(GgufValue v) {
  if (encoded_) fail("io", "GgufArray: an array read from a file is read-only; build a new one to change it");
  values_.push_back(std::move(v));
}

size_t GgufArray::memory_bytes() const {
  return bytes_.capacity() + starts_.capacity() * sizeof(uint64_t) + values_.capacity() * sizeof(GgufValue);
}

const GgufValue& GgufFile::get(const std::string& key) const {
  auto it = kv.find(key);
  if (it == kv.end()) fail("io", path + ": GGUF metadata key '" + key + "' is missing");
  return it->second;
}

// ---- reader ----

GgufFile GgufFile::parse(const uint8_t* bytes, size_t n, const std::string& name) {
  GgufFile f;
  f.path = name;
  ByteReader r(bytes, n, name);
  r.need(4, "the GGUF magic");
  if (std::memcmp(bytes, "GGUF", 4) != 0) {
    bad(r, "wrong magic (expected \"GGUF\"); this is not a GGUF file");
  }
  r.skip(4, "magic");
  f.version = r.u32("version");
  if (f.version == 1) {
    bad(r, "GGUF version 1 is not supported (only v2 and v3); re-convert the model with a current llama.cpp");
  }
  if (f.version != 2 && f.version != 3) {
    uint32_t swapped = __builtin_bswap32(f.version);
    if (swapped == 2 || swapped == 3)
      bad(r, "big-endian GGUF files are not supported; convert to little-endian");
    bad(r, "unsupported GGUF version " + std::to_string(f.version) + " (supported: 2, 3)");
  }
  uint64_t n_tensors = r.u64("tensor count");
  uint64_t n_kv = r.u64("metadata count");
  // Bound counts by the smallest possible encoding before allocating anything.
  if (n_kv > r.remaining() / 13) {
    bad(r, "metadata count " + std::to_string(n_kv) + " cannot fit in a file of " + std::to_string(n) +
               " bytes");
  }
  if (n_tensors > r.remaining() / 24) {
    bad(r, "tensor count " + std::to_string(n_tensors) + " cannot fit in a file of " + std::to_string(n) +
               " bytes");
  }

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = read_string(r, kMaxKeyBytes, "metadata key " + std::to_string(i));
    if (key.empty()) bad(r, "metadata key " + std::to_string(i) + " is empty");
    GgufType t = read_type(r, "metadata '" + key + "'");
    GgufValue v = read_value(r, t, "metadata '" + key + "'", 0);
    if (f.kv.count(key)) bad(r, "metadata key '" + key + "' appears twice");
    f.kv_order.push_back(key);
    f.kv.emplace(std::move(key), std::move(v));
  }

  if (auto it = f.kv.find("general.alignment"); it != f.kv.end()) {
    const GgufValue& a = it->second;
    if (!std::holds_alternative<uint64_t>(a.v) && !std::holds_alternative<int64_t>(a.v)) {
      bad(r, std::string("general.alignment must be an integer, got ") + type_name(a.type));
    }
    uint64_t al = 0;
    if (auto* u = std::get_if<uint64_t>(&a.v)) al = *u;
    if (auto* i = std::get_if<int64_t>(&a.v)) al = *i < 0 ? 0 : static_cast<uint64_t>(*i);
    if (al == 0 || (al & (al - 1)) != 0 || al > (1u << 30)) {
      bad(r, "general.alignment " + std::to_string(al) + " must be a non-zero power of two (at most 2^30)");
    }
    f.alignment = static_cast<uint64_t>(al);
  }

  struct Info {
    std::string name;
    std::vector<int64_t> shape;  // outermost first
    int type;
    uint64_t offset, nbytes;
  };
  std::vector<Info> infos;
  infos.reserve(static_cast<size_t>(n_tensors));
  std::set<std::string> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Info in;
    in.name = read_string(r, kMaxNameBytes, "tensor " + std::to_string(i) + " name");
    const std::string where = "tensor '" + in.name + "'";
    if (!names.insert(in.name).second) bad(r, where + " appears twice");
    uint32_t n_dims = r.u32(where + " n_dims");
    if (n_dims > kMaxDims) {
      bad(r, where + " has " + std::to_string(n_dims) + " dimensions (at most " + std::to_string(kMaxDims) +
                 ")");
    }
    std::vector<uint64_t> ne(n_dims);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      ne[d] = r.u64(where + " dimension");
      if (ne[d] == 0) bad(r, where + " has a zero dimension");
      if (!mul_ok(numel, ne[d], &numel) || numel > static_cast<uint64_t>(INT64_MAX)) {
        bad(r, where + ": element count overflows 64 bits");
      }
    }
    uint32_t type = r.u32(where + " type");
    const GgmlTypeInfo* ti = type <= 0xffff ? ggml_type_info(static_cast<int>(type)) : nullptr;
    if (!ti) {
      bad(r, where + " has unknown or unsupported ggml type id " + std::to_string(type) +
                 "; lowbit reads F32 F16 BF16 I8 I16 I32 I64 F64 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K IQ4_NL "
                 "IQ4_XS MXFP4");
    }
    in.type = static_cast<int>(type);
    uint64_t row = n_dims ? ne[0] : 1;
    if (row % static_cast<uint64_t>(ti->block_elems) != 0) {
      bad(r, where + ": row length " + std::to_string(row) + " is not a multiple of the " + ti->name +
                 " block size " + std::to_string(ti->block_elems));
    }
    if (!mul_ok(numel / ti->block_elems, static_cast<uint64_t>(ti->block_bytes), &in.nbytes)) {
      bad(r, where + ": byte size overflows 64 bits");
    }
    in.offset = r.u64(where + " offset");
    if (in.offset % f.alignment != 0) {
      bad(r, where + ": data offset " + std::to_string(in.offset) + " is not a multiple of the alignment " +
                 std::to_string(f.alignment));
    }
    for (uint32_t d = n_dims; d-- > 0;) in.shape.push_back(static_cast<int64_t>(ne[d]));
    infos.push_back(std::move(in));
  }

  bool ok;
  uint64_t data_start = align_up(r.pos(), f.alignment, &ok);
  if (!ok || (n_tensors > 0 && data_start > n)) {
    bad(r, "tensor data section starts at " + std::to_string(data_start) + ", past the end of the file (" +
               std::to_string(n) + " bytes); the file is truncated");
  }
  const uint64_t data_size = data_start <= n ? n - data_start : 0;
  std::vector<const Info*> by_offset;
  for (const Info& in : infos) {
    uint64_t end;
    if (!add_ok(in.offset, in.nbytes, &end) || end > data_size) {
      bad(r, "tensor '" + in.name + "' data [" + std::to_string(in.offset) + ", +" +
                 std::to_string(in.nbytes) + ") runs past the end of the data section (" +
                 std::to_string(data_size) + " bytes); the file is truncated");
    }
    by_offset.push_back(&in);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->offset < by_offset[i - 1]->offset + by_offset[i - 1]->nbytes) {
      bad(r, "tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name + "' overlap");
    }
  }
  for (Info& in : infos) {
    TensorView v;
    v.dtype = element_dtype(in.type);
    v.ggml_type = in.type;
    v.shape = std::move(in.shape);
    v.data = bytes + data_start + in.offset;
    v.nbytes = static_cast<size_t>(in.nbytes);
    f.tensor_order.push_back(in.name);
    f.tensors.emplace(std::move(in.name), std::move(v));
  }
  return f;
}

GgufFile GgufFile::open(const std::string& path) {
  auto mf = MappedFile::open(path);
  GgufFile f = parse(mf->data(), mf->size(), path);
  f.file = std::move(mf);
  return f;
}

}  // namespace lowbit::io
