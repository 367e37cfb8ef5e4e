// GgufWriter: serialises metadata and tensor infos into one header buffer, then streams tensor data from the
// callers' memory through write_file_atomic (no second copy of the weights).
#include <cstring>

#include "core/error.h"
#include "formats/ggml_types.h"
#include "io/byte_reader.h"
#include "io/gguf.h"

namespace lowbit::io {
namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// The value alone (no leading type tag); arrays carry their element type and count.
void put_value(std::vector<uint8_t>& out, const GgufValue& v, const std::string& key) {
  auto num = [&]() -> uint64_t {
    if (auto* u = std::get_if<uint64_t>(&v.v)) return *u;
    if (auto* i = std::get_if<int64_t>(&v.v)) return static_cast<uint64_t>(*i);
    if (auto* b = std::get_if<bool>(&v.v)) return *b ? 1 : 0;
    fail("io", "GgufWriter: value for '" + key + "' does not hold an integer as its type says");
  };
  switch (v.type) {
    case GgufType::UINT8:
    case GgufType::INT8:
      put<uint8_t>(out, static_cast<uint8_t>(num()));
      return;
    case GgufType::UINT16:
    case GgufType::INT16:
      put<uint16_t>(out, static_cast<uint16_t>(num()));
      return;
    case GgufType::UINT32:
    case GgufType::INT32:
      put<uint32_t>(out, static_cast<uint32_t>(num()));
      return;
    case GgufType::UINT64:
    case GgufType::INT64:
      put<uint64_t>(out, num());
      return;
    case GgufType::BOOL:
      put<uint8_t>(out, v.as_bool() ? 1 : 0);
      return;
    case GgufType::FLOAT32:
      put<float>(out, static_cast<float>(v.as_float()));
      return;
    case GgufType::FLOAT64:
      put<double>(out, v.as_float());
      return;
    case GgufType::STRING:
      put_string(out, v.as_string());
      return;
    case GgufType::ARRAY: {
      const GgufArray& a = v.as_array();
      put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      put<uint64_t>(out, a.size());
      if (a.encoded() && a.encoded_elem_type() == v.elem_type) {  // read from a file: already encoded
        out.insert(out.end(), a.encoded_bytes().begin(), a.encoded_bytes().end());
        return;
      }
      for (const GgufValue& e : a) {
        if (e.type != v.elem_type) fail("io", "GgufWriter: array '" + key + "' mixes element types");
        put_value(out, e, key);
      }
      return;
    }
  }
  fail("io", "GgufWriter: value for '" + key + "' has an invalid type");
}

GgufValue scalar(GgufType t,
                 std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> v) {
  GgufValue g;
  g.type = t;
  g.v = std::move(v);
  return g;
}

template <typename T, typename F>
GgufValue array_of(GgufType elem, const std::vector<T>& xs, F make) {
  auto arr = std::make_shared<GgufArray>();
  arr->reserve(xs.size());
  for (const T& x : xs) arr->push_back(make(x));
  GgufValue g;
  g.type = GgufType::ARRAY;
  g.elem_type = elem;
  g.v = std::move(arr);
  return g;
}

}  // namespace

void GgufWriter::set_value(const std::string& key, const GgufValue& v) {
  if (key.empty()) fail("io", "GgufWriter: empty metadata key");
  std::vector<uint8_t> enc;
  put<uint32_t>(enc, static_cast<uint32_t>(v.type));
  put_value(enc, v, key);
  for (Kv& kv : kvs_) {
    if (kv.key == key) {
      kv.encoded = std::move(enc);
      return;
    }
  }
  kvs_.push_back({key, std::move(enc)});
}

void GgufWriter::set_u32(const std::string& k, uint32_t v) {
  set_value(k, scalar(GgufType::UINT32, uint64_t{v}));
}
void GgufWriter::set_i32(const std::string& k, int32_t v) {
  set_value(k, scalar(GgufType::INT32, int64_t{v}));
}
void GgufWriter::set_u64(const std::string& k, uint64_t v) {
  set_value(k, scalar(GgufType::UINT64, v));
}
void GgufWriter::set_f32(const std::string& k, float v) {
  set_value(k, scalar(GgufType::FLOAT32, double{v}));
}
void GgufWriter::set_bool(const std::string& k, bool v) {
  set_value(k, scalar(GgufType::BOOL, v));
}
void GgufWriter::set_string(const std::string& k, const std::string& v) {
  set_value(k, scalar(GgufType::STRING, v));
}
void GgufWriter::set_array_string(const std::string& k, const std::vector<std::string>& v) {
  set_value(k,
            array_of(GgufType::STRING, v, [](const std::string& s) { return scalar(GgufType::STRING, s); }));
}
void GgufWriter::set_array_f32(const std::string& k, const std::vector<float>& v) {
  set_value(k, array_of(GgufType::FLOAT32, v, [](float x) { return scalar(GgufType::FLOAT32, double{x}); }));
}
void GgufWriter::set_array_i32(const std::string& k, const std::vector<int32_t>& v) {
  set_value(k, array_of(GgufType::INT32, v, [](int32_t x) { return scalar(GgufType::INT32, int64_t{x}); }));
}

void GgufWriter::add_tensor(const std::string& name, int ggml_type, const std::vector<int64_t>& shape,
                            const void* data, size_t nbytes) {
  const std::string where = "GgufWriter: tensor '" + name + "'";
  if (name.empty()) fail("io", "GgufWriter: empty tensor name");
  for (const T& t : tensors_) {
    if (t.name == name) fail("io", where + " added twice");
  }
  const GgmlTypeInfo* ti = ggml_type_info(ggml_type);
  if (!ti) fail("io", where + ": unknown ggml type id " + std::to_string(ggml_type));
  if (shape.size() > 4)
    fail("io", where + ": GGUF tensors have at most 4 dimensions, got " + shape_str(shape));
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d <= 0 || !detail::mul_ok(numel, static_cast<uint64_t>(d), &numel)) {
      fail("io", where + ": invalid shape " + shape_str(shape));
    }
  }
  int64_t row = shape.empty() ? 1 : shape.back();
  if (row % ti->block_elems != 0) {
    fail("io", where + ": row length " + std::to_string(row) + " is not a multiple of the " + ti->name +
                   " block size " + std::to_string(ti->block_elems));
  }
  uint64_t expect = numel / ti->block_elems * ti->block_bytes;
  if (expect != nbytes) {
    fail("io", where + ": " + ti->name + " " + shape_str(shape) + " needs " + std::to_string(expect) +
                   " bytes but " + std::to_string(nbytes) + " were given");
  }
  tensors_.push_back({name, ggml_type, shape, data, nbytes});
}

std::vector<uint8_t> GgufWriter::header(uint32_t alignment, std::vector<uint64_t>* offsets) const {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    fail("io", "GgufWriter: alignment " + std::to_string(alignment) + " is not a power of two");
  }
  // Record a non-default alignment (or keep the one the caller set, overriding its value).
  std::vector<Kv> kvs = kvs_;
  bool has_alignment = false;
  for (const Kv& kv : kvs) has_alignment |= kv.key == "general.alignment";
  if (alignment != 32 || has_alignment) {
    GgufWriter tmp;
    tmp.kvs_ = kvs;
    tmp.set_u32("general.alignment", alignment);
    kvs = std::move(tmp.kvs_);
  }

  std::vector<uint8_t> head;
  put<uint32_t>(head, 0x46554747);  // "GGUF" little-endian
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kvs.size());
  for (const Kv& kv : kvs) {
    put_string(head, kv.key);
    head.insert(head.end(), kv.encoded.begin(), kv.encoded.end());
  }
  auto align = [&](uint64_t x) { return (x + alignment - 1) / alignment * alignment; };
  uint64_t offset = 0;
  for (const T& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.shape.size()));
    for (size_t d = t.shape.size(); d-- > 0;) put<uint64_t>(head, static_cast<uint64_t>(t.shape[d]));
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, offset);
    if (offsets) offsets->push_back(offset);
    offset = align(offset + t.nbytes);
  }
  head.resize(align(head.size()), 0);
  return head;
}

uint64_t GgufWriter::file_bytes(uint32_t alignment) const {
  uint64_t n = header(alignment, nullptr).size();
  for (const T& t : tensors_) n += (t.nbytes + alignment - 1) / alignment * alignment;
  return n;
}

void GgufWriter::write(const std::string& path, uint32_t alignment) const {
  std::vector<uint64_t> offsets;
  const std::vector<uint8_t> head = header(alignment, &offsets);
  auto align = [&](uint64_t x) { return (x + alignment - 1) / alignment * alignment; };
  const std::vector<uint8_t> zeros(alignment, 0);
  std::vector<ByteSpan> pieces;
  pieces.push_back({head.data(), head.size()});
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const T& t = tensors_[i];
    if (!t.data) fail("io", "GgufWriter: tensor '" + t.name + "' was added for sizing only (no data)");
    pieces.push_back({t.data, t.nbytes});
    size_t pad = align(offsets[i] + t.nbytes) - (offsets[i] + t.nbytes);
    if (pad) pieces.push_back({zeros.data(), pad});
  }
  write_file_atomic(path, pieces);
}

}  // namespace lowbit::io
