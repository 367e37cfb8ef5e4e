// QuantScheme parsing, validation and bits-per-weight accounting (see scheme.h).
#include "formats/scheme.h"

#include <cctype>
#include <string>
#include <vector>

#include "core/error.h"

namespace lowbit {
namespace {

[[noreturn]] void usage(const std::string& msg) {
  throw UsageError("formats", msg);
}

bool is_fp8(FormatId f) {
  return f == FormatId::E4M3FN || f == FormatId::E5M2 || f == FormatId::E4M3FNUZ || f == FormatId::E5M2FNUZ;
}
bool is_plain(FormatId f) {
  return f == FormatId::F32 || f == FormatId::F16 || f == FormatId::BF16;
}

bool parse_int(std::string_view s, int* out) {
  if (s.empty() || s.size() > 9) return false;
  int v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  while (true) {
    size_t e = s.find(sep, b);
    out.emplace_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) break;
    b = e + 1;
  }
  return out;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

const char* granularity_name(Granularity g) {
  switch (g) {
    case Granularity::Tensor:
      return "tensor";
    case Granularity::Channel:
      return "channel";
    case Granularity::Group:
      return "group";
    case Granularity::Block2D:
      return "block";
    case Granularity::Token:
      return "token";
    case Granularity::Native:
      return "native";
  }
  return "?";
}

QuantScheme default_scheme(FormatId f) {
  const FormatInfo& fi = format_info(f);
  QuantScheme s;
  s.format = f;
  s.symmetric = true;
  if (fi.is_gguf() || is_plain(f)) {
    s.gran = Granularity::Native;
    s.group_size = fi.is_gguf() ? fi.block_elems : 0;
    s.scale_type = ScaleType::None;
  } else if (fi.is_microscaled()) {
    s.gran = Granularity::Group;
    s.group_size = fi.block_elems;
    s.scale_type = fi.native_scale;
  } else if (fi.kind == FormatKind::Int) {
    s.gran = Granularity::Group;
    s.group_size = 128;
    s.scale_type = ScaleType::F16;
  } else if (fi.kind == FormatKind::Codebook) {  // one f16 table of 2^b values per output row
    s.gran = Granularity::Channel;
    s.group_size = 0;
    s.scale_type = ScaleType::F16;
  } else if (f == FormatId::NF4) {
    s.gran = Granularity::Group;
    s.group_size = 64;
    s.scale_type = ScaleType::F32;
  } else if (is_fp8(f)) {
    s.gran = Granularity::Channel;
    s.group_size = 0;
    s.scale_type = ScaleType::F32;
  } else if (fi.kind == FormatKind::Float) {  // e2m1, e2m3, e3m2 with external scales
    s.gran = Granularity::Group;
    s.group_size = 32;
    s.scale_type = ScaleType::F16;
  } else {
    usage(std::string("format '") + fi.name + "' is a scale type, not a weight format; try mxfp4 or int4");
  }
  return s;
}

QuantScheme parse_scheme(std::string_view text) {
  auto toks = split(text, ':');
  if (toks.empty() || toks[0].empty())
    usage("empty quantization scheme; expected e.g. 'int4:g128:sym:f16', 'nf4:g64:dq', 'mxfp4', 'q4_k'");
  const FormatInfo& fi = format_by_name(toks[0]);
  QuantScheme s = default_scheme(fi.id);
  const bool codebook = fi.kind == FormatKind::Codebook;
  const bool fixed = fi.is_gguf() || is_plain(fi.id) || fi.is_microscaled() || codebook;
  bool sym_given = false;
  for (size_t i = 1; i < toks.size(); ++i) {
    const std::string t = lower(toks[i]);
    const std::string where = " in scheme '" + std::string(text) + "'";
    if (t.empty()) usage("empty token" + where + "; remove the extra ':'");
    int n = 0;
    ScaleType st;
    if (t == "sym" || t == "asym") {
      s.symmetric = t == "sym";
      sym_given = true;
    } else if (t == "absmax" || t == "minmax") {
      s.search = ScaleSearch::Absmax;
    } else if (t == "mse" || t == "clip") {
      s.search = ScaleSearch::Mse;
    } else if (t == "dq") {
      s.double_quant = true;
    } else if (fixed && (t == "tensor" || t == "channel" || t == "token" || t[0] == 'g' ||
                         t.rfind("block", 0) == 0 || scale_type_from_name(t, &st))) {
      // Fixed-layout formats accept their own native spelling and nothing else.
      bool same = (t[0] == 'g' && parse_int(t.substr(1), &n) && n == s.group_size) ||
                  (scale_type_from_name(t, &st) && st == s.scale_type) || (codebook && t == "channel");
      if (!same)
        usage("'" + t + "'" + where + ": " + fi.name + " has a fixed layout (" +
              (fi.is_gguf()      ? std::to_string(fi.block_elems) + "-element ggml blocks"
               : is_plain(fi.id) ? std::string("no scales")
               : codebook        ? "one table of " + std::to_string(1 << fi.bits) + " f16 values per row"
                                 : "blocks of " + std::to_string(s.group_size) + " with " +
                                scale_type_name(s.scale_type) + " scales") +
              "); drop the token");
    } else if (t == "tensor") {
      s.gran = Granularity::Tensor;
      s.group_size = 0;
    } else if (t == "channel" || t == "row") {
      s.gran = Granularity::Channel;
      s.group_size = 0;
    } else if (t == "token") {
      s.gran = Granularity::Token;
      s.group_size = 0;
    } else if (t[0] == 'g' && parse_int(t.substr(1), &n)) {
      if (n < 1) usage("group size must be >= 1" + where);
      s.gran = Granularity::Group;
      s.group_size = n;
    } else if (t.rfind("block", 0) == 0 || (t[0] == 'b' && t.find('x') != std::string::npos)) {
      std::string dims = t.substr(t.rfind("block", 0) == 0 ? 5 : 1);
      auto x = dims.find('x');
      int r = 0, c = 0;
      if (x == std::string::npos || !parse_int(dims.substr(0, x), &r) || !parse_int(dims.substr(x + 1), &c) ||
          r < 1 || c < 1)
        usage("bad 2-D block '" + t + "'" + where + "; write block<ROWS>x<COLS>, e.g. block128x128");
      s.gran = Granularity::Block2D;
      s.block_rows = r;
      s.block_cols = c;
      s.group_size = 0;
    } else if (scale_type_from_name(t, &st)) {
      s.scale_type = st;
    } else if (t == "fp32" || t == "fp16") {
      s.scale_type = t == "fp32" ? ScaleType::F32 : ScaleType::F16;
    } else {
      usage("unknown token '" + t + "'" + where +
            "; expected tensor|channel|token|g<N>|block<R>x<C>, sym|asym, f32|f16|bf16|e4m3|e8m0, "
            "absmax|mse, dq");
    }
  }
  if (!s.symmetric && fi.kind != FormatKind::Int)
    usage(std::string("asymmetric (zero point) quantization is only defined for int formats, not '") +
          fi.name + "'; drop ':asym'");
  (void)sym_given;
  if (s.double_quant && fi.id != FormatId::NF4)
    usage(std::string("double quantization ':dq' is only defined for nf4, not '") + fi.name + "'");
  if (s.double_quant && s.gran != Granularity::Group)
    usage("nf4 double quantization needs per-group scales (e.g. nf4:g64:dq)");
  if (fixed && s.search == ScaleSearch::Mse && !fi.is_microscaled())  // lut*: the fit is always k-means
    usage(std::string("':mse' scale search does not apply to '") + fi.name + "'");
  return s;
}

std::string to_string(const QuantScheme& s) {
  const FormatInfo& fi = s.info();
  std::string out = fi.name;
  if (s.gran == Granularity::Native || fi.kind == FormatKind::Codebook) return out;
  if (fi.is_microscaled()) return s.search == ScaleSearch::Mse ? out + ":mse" : out;
  switch (s.gran) {
    case Granularity::Tensor:
      out += ":tensor";
      break;
    case Granularity::Channel:
      out += ":channel";
      break;
    case Granularity::Token:
      out += ":token";
      break;
    case Granularity::Group:
      out += ":g" + std::to_string(s.group_size);
      break;
    case Granularity::Block2D:
      out += ":block" + std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols);
      break;
    case Granularity::Native:
      break;
  }
  if (fi.kind == FormatKind::Int) out += s.symmetric ? ":sym" : ":asym";
  out += std::string(":") + scale_type_name(s.scale_type);
  if (s.search == ScaleSearch::Mse) out += ":mse";
  if (s.double_quant) out += ":dq";
  return out;
}

void validate(const QuantScheme& s, int64_t rows, int64_t cols) {
  const FormatInfo& fi = s.info();
  const std::string shape = "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
  if (rows < 1 || cols < 1) usage("cannot quantize an empty matrix " + shape);
  if (fi.kind == FormatKind::Scale)
    usage(std::string("'") + fi.name + "' is a scale type, not a weight format");
  if (fi.is_gguf()) {
    if (cols % fi.block_elems != 0)
      usage(std::string(fi.name) + " needs rows whose length is a multiple of " +
            std::to_string(fi.block_elems) + "; matrix " + shape + " has " + std::to_string(cols) +
            " columns; use a non-GGUF scheme for it");
    return;
  }
  if (s.gran == Granularity::Native) {
    if (!is_plain(fi.id)) usage(std::string("format '") + fi.name + "' needs a scale granularity");
    return;
  }
  if (s.scale_type == ScaleType::None) usage(std::string("scheme for '") + fi.name + "' needs a scale type");
  if (s.gran == Granularity::Group) {
    if (s.group_size < 1) usage("group size must be >= 1");
    if (s.group_size > cols)
      usage("group size " + std::to_string(s.group_size) + " does not fit matrix " + shape + " (only " +
            std::to_string(cols) + " columns per row); use a group <= " + std::to_string(cols) +
            " or ':channel'");
  }
  if (s.gran == Granularity::Block2D) {
    if (s.block_rows < 1 || s.block_cols < 1) usage("2-D block dimensions must be >= 1");
    if (s.block_rows > rows || s.block_cols > cols)
      usage("2-D block " + std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols) +
            " does not fit matrix " + shape + "; use a smaller block or ':tensor'");
  }
  if (fi.id == FormatId::NVFP4 && s.gran != Granularity::Group) usage("nvfp4 uses blocks of 16");
}

ScaleGrid scale_grid(const QuantScheme& s, int64_t rows, int64_t cols) {
  ScaleGrid g;
  switch (s.gran) {
    case Granularity::Native:
      return g;
    case Granularity::Tensor:
      g.rows = g.cols = 1;
      g.row_block = rows;
      g.col_block = cols;
      break;
    case Granularity::Channel:
    case Granularity::Token:
      g.rows = rows;
      g.cols = 1;
      g.col_block = cols;
      // Per-row codebooks: the grid holds row r's 2^b table entries, cell (r, u) = the value of code u (every
      // cell's column range is the whole row: none of them is a scale of a column range).
      if (s.info().kind == FormatKind::Codebook) g.cols = int64_t{1} << s.info().bits;
      break;
    case Granularity::Group:
      g.rows = rows;
      g.col_block = s.group_size;
      g.cols = (cols + s.group_size - 1) / s.group_size;
      break;
    case Granularity::Block2D:
      g.row_block = s.block_rows;
      g.col_block = s.block_cols;
      g.rows = (rows + s.block_rows - 1) / s.block_rows;
      g.cols = (cols + s.block_cols - 1) / s.block_cols;
      break;
  }
  return g;
}

StorageBits storage_bits(const QuantScheme& s, int64_t rows, int64_t cols) {
  const FormatInfo& fi = s.info();
  StorageBits b;
  if (fi.is_gguf()) {
    b.elements = rows * (cols / fi.block_elems) * fi.block_bytes * 8;
    return b;
  }
  b.elements = rows * cols * fi.bits;
  const ScaleGrid g = scale_grid(s, rows, cols);
  const int64_t cells = g.cells();
  if (s.double_quant) {
    b.scales = cells * 8;
    b.second_level = (cells + 255) / 256 * 32 + 32;
  } else {
    b.scales = cells * scale_type_bits(s.scale_type);
  }
  if (fi.kind == FormatKind::Int && !s.symmetric) b.zeros = cells * fi.bits;
  if (fi.id == FormatId::NVFP4) b.second_level += 32;
  return b;
}

double bits_per_weight(const QuantScheme& s, int64_t rows, int64_t cols) {
  return static_cast<double>(storage_bits(s, rows, cols).total()) / static_cast<double>(rows * cols);
}

}  // namespace lowbit
