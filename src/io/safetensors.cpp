#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/json_text.h"
#include "io/byte_reader.h"

namespace lowbit::io {
namespace {

using json = nlohmann::json;
using detail::mul_ok;

// The reference implementation caps the header at 100 MB; a larger one is a corrupt or hostile length.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

[[noreturn]] void bad(const std::string& file, const std::string& msg) {
  fail("io", file + ": " + msg);
}

uint64_t json_u64(const json& j, const std::string& file, const std::string& what) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return static_cast<uint64_t>(j.get<int64_t>());
  bad(file, what + " must be a non-negative integer, got " + json_text(j).substr(0, 64));
}

struct Span {
  uint64_t begin, end;
  const std::string* name;
};

}  // namespace

SafetensorsFile SafetensorsFile::parse(const uint8_t* bytes, size_t n, const std::string& name) {
  SafetensorsFile out;
  out.path = name;
  if (n < 8) {
    bad(name, "file is " + std::to_string(n) +
                  " bytes, too small for the 8-byte safetensors header length; not a safetensors file");
  }
  uint64_t hlen;
  std::memcpy(&hlen, bytes, 8);
  if (hlen > kMaxHeaderBytes) {
    bad(name, "header length " + std::to_string(hlen) +
                  " exceeds the 100 MB limit; the file is corrupt or not "
                  "a safetensors file");
  }
  if (hlen > n - 8) {
    bad(name, "header length " + std::to_string(hlen) + " runs past the end of the file (" +
                  std::to_string(n) + " bytes); the file is truncated or not a safetensors file");
  }
  const char* hp = reinterpret_cast<const char*>(bytes + 8);
  const uint8_t* data = bytes + 8 + hlen;
  const uint64_t data_size = n - 8 - hlen;

  // Duplicate top-level keys would silently shadow each other in nlohmann; reject them while parsing.
  std::set<std::string> seen;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth == 1 && ev == json::parse_event_t::key) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second) bad(name, "header lists tensor '" + k + "' twice");
    }
    return true;
  };
  json header;
  try {
    header = json::parse(hp, hp + hlen, cb);
  } catch (const json::exception& e) {
    bad(name, std::string("header is not valid JSON (") + e.what() + "); the file is corrupt");
  }
  if (!header.is_object()) bad(name, "header must be a JSON object mapping tensor names to entries");

  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& tname = it.key();
    const json& e = it.value();
    if (tname == "__metadata__") {
      if (!e.is_object()) bad(name, "__metadata__ must be an object of string values");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) bad(name, "__metadata__ value for '" + m.key() + "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + tname + "'";
    if (!e.is_object()) bad(name, where + ": entry must be an object with dtype, shape and data_offsets");
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto of = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string()) bad(name, where + ": missing or non-string \"dtype\"");
    if (sh == e.end() || !sh->is_array()) bad(name, where + ": missing or non-array \"shape\"");
    if (of == e.end() || !of->is_array() || of->size() != 2) {
      bad(name, where + ": \"data_offsets\" must be an array [begin, end]");
    }
    TensorView v;
    const std::string dts = dt->get<std::string>();
    if (!dtype_from_name(dts, &v.dtype)) {
      bad(name, where + ": unknown dtype \"" + dts.substr(0, 32) +
                    "\" (supported: F32 F16 BF16 F64 I8 U8 I16 U16 I32 U32 I64 U64 BOOL F8_E4M3 F8_E5M2)");
    }
    uint64_t numel = 1;
    for (const json& d : *sh) {
      uint64_t dim = json_u64(d, name, where + ": shape dimension");
      if (!mul_ok(numel, dim, &numel) || numel > static_cast<uint64_t>(INT64_MAX)) {
        bad(name, where + ": shape " + sh->dump().substr(0, 128) + " overflows 64-bit element count");
      }
      v.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t nbytes;
    if (!mul_ok(numel, dtype_size(v.dtype), &nbytes)) {
      bad(name, where + ": shape " + shape_str(v.shape) + " overflows 64-bit byte count");
    }
    uint64_t b = json_u64((*of)[0], name, where + ": data_offsets begin");
    uint64_t en = json_u64((*of)[1], name, where + ": data_offsets end");
    if (b > en)
      bad(name, where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(en) + "] reversed");
    if (en > data_size) {
      bad(name, where + ": data_offsets end " + std::to_string(en) +
                    " is past the end of the data section (" + std::to_string(data_size) +
                    " bytes); the file is truncated or the header is wrong");
    }
    if (en - b != nbytes) {
      bad(name, where + ": shape " + shape_str(v.shape) + " x " + dts + " needs " + std::to_string(nbytes) +
                    " bytes but data_offsets span " + std::to_string(en - b));
    }
    v.data = data + b;
    v.nbytes = static_cast<size_t>(nbytes);
    auto ins = out.tensors.emplace(tname, std::move(v));
    spans.push_back({b, en, &ins.first->first});
  }

  // No two tensors may share bytes (a writer bug or an attempt to alias weights).
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  const Span* prev = nullptr;
  for (const Span& s : spans) {
    if (s.begin == s.end) continue;
    if (prev && s.begin < prev->end) {
      bad(name, "tensors '" + *prev->name + "' and '" + *s.name + "' overlap in the data section (bytes " +
                    std::to_string(s.begin) + ".." + std::to_string(prev->end) + ")");
    }
    prev = &s;
  }
  return out;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto mf = MappedFile::open(path);
  SafetensorsFile f = parse(mf->data(), mf->size(), path);
  f.file = std::move(mf);
  return f;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const TensorToWrite& t = *order[i];
    const std::string where = "write_safetensors '" + path + "': tensor '" + t.name + "'";
    if (t.name == "__metadata__" || t.name.empty()) fail("io", where + ": reserved or empty tensor name");
    if (i > 0 && order[i - 1]->name == t.name) fail("io", where + ": given twice");
    if (t.dtype == DType::GGML_BLOCK) fail("io", where + ": GGML block data cannot be stored in safetensors");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || !mul_ok(numel, static_cast<uint64_t>(d), &numel)) {
        fail("io", where + ": invalid shape " + shape_str(t.shape));
      }
    }
    uint64_t expect;
    if (!mul_ok(numel, dtype_size(t.dtype), &expect) || expect != t.nbytes) {
      fail("io", where + ": shape " + shape_str(t.shape) + " x " + dtype_name(t.dtype) + " needs " +
                     std::to_string(expect) + " bytes but " + std::to_string(t.nbytes) + " were given");
    }
    header[t.name] = {
        {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string h = json_text(header);
  // Pad with spaces so the data section starts 8-byte aligned (as the reference writer does).
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  uint64_t hlen = h.size();
  std::vector<ByteSpan> pieces;
  pieces.push_back({&hlen, 8});
  pieces.push_back({h.data(), h.size()});
  for (auto* t : order) pieces.push_back({t->data, t->nbytes});
  write_file_atomic(path, pieces);
}

}  // namespace lowbit::io
