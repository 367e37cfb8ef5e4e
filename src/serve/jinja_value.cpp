// Template values as Python shows them: truthiness, equality, str(), repr() and json.dumps(), so that what
// lowbit renders is byte for byte what Jinja2 renders.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "serve/jinja_internal.h"

namespace lowbit::serve {

JinjaError::JinjaError(const std::string& message, int line, int col)
    : std::runtime_error("[serve] chat template: " + message + ", at line " + std::to_string(line) + ":" +
                         std::to_string(col)),
      message_(message),
      line_(line),
      col_(col) {}

namespace jinja {

void fail(const std::string& what, int line, int col) {
  throw JinjaError(what, line, col);
}

thread_local Budget* tl_budget = nullptr;

void fail_here(const std::string& what) {
  fail(what, tl_budget ? tl_budget->line : 1, tl_budget ? tl_budget->col : 1);
}

int check_depth(int child_depth) {
  if (child_depth + 1 > kMaxValueDepth)
    fail_here("lists and dicts nest deeper than " + std::to_string(kMaxValueDepth) + " levels");
  return child_depth + 1;
}

void charge_steps(int64_t n) {
  Budget* b = tl_budget;
  if (!b) return;
  b->steps += n;
  if (b->steps > b->lim.max_steps)
    fail_here("the template does too much work (over " + std::to_string(b->lim.max_steps) +
              " steps; a runaway loop or recursion?)");
}

void charge_alloc(size_t bytes) {
  Budget* b = tl_budget;
  if (!b) return;
  if (bytes > b->lim.max_output)
    fail_here("a string or list of " + std::to_string(bytes) + " bytes is over the " +
              std::to_string(b->lim.max_output) + "-byte bound");
  b->allocated += bytes;
  if (b->allocated > b->lim.max_allocated)
    fail_here("the template builds over " + std::to_string(b->lim.max_allocated) +
              " bytes of strings and lists in all");
}

namespace {
// A string being built by repr/tojson: bounded like the output.
void check_building(const std::string& out) {
  if (tl_budget && out.size() > tl_budget->lim.max_output)
    fail_here("a value's text is over the " + std::to_string(tl_budget->lim.max_output) + "-byte bound");
}
}  // namespace

const Value* Dict::find(const std::string& key) const {
  auto it = index.find(key);
  return it == index.end() ? nullptr : &items[it->second].second;
}

void Dict::set(const std::string& key, Value v) {
  auto it = index.find(key);
  if (it != index.end()) {
    items[it->second].second = std::move(v);
    return;
  }
  index.emplace(key, items.size());
  items.emplace_back(key, std::move(v));
}

bool truthy(const Value& v) {
  switch (v.t) {
    case Value::T::Undefined:
    case Value::T::None:
      return false;
    case Value::T::Bool:
      return v.b;
    case Value::T::Int:
      return v.i != 0;
    case Value::T::Float:
      return v.f != 0;
    case Value::T::Str:
      return !v.s->empty();
    case Value::T::List:
      return !v.l->empty();
    case Value::T::Dict:
      return !v.d->items.empty();
    default:
      return true;
  }
}

bool equal(const Value& a, const Value& b) {
  charge_steps(1);
  if (a.is_number() && b.is_number()) {
    if (a.t == Value::T::Float || b.t == Value::T::Float) return a.as_double() == b.as_double();
    return (a.t == Value::T::Bool ? a.b : a.i) == (b.t == Value::T::Bool ? b.b : b.i);
  }
  if (a.t != b.t) return false;
  switch (a.t) {
    case Value::T::Undefined:
    case Value::T::None:
      return true;
    case Value::T::Str:
      return *a.s == *b.s;
    case Value::T::List:
      if (a.l == b.l) return true;
      if (a.l->size() != b.l->size()) return false;
      for (size_t i = 0; i < a.l->size(); ++i)
        if (!equal((*a.l)[i], (*b.l)[i])) return false;
      return true;
    case Value::T::Dict:
      if (a.d == b.d) return true;
      if (a.d->items.size() != b.d->items.size()) return false;
      for (const auto& [k, v] : a.d->items) {
        const Value* o = b.d->find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    case Value::T::Namespace:
      return a.ns == b.ns;
    case Value::T::Macro:
      return a.macro == b.macro;
    default:
      return false;
  }
}

// Python's repr(float): the shortest digits that read back the same, fixed notation for exponents in
// [-4, 16), else d.ddde+XX.
std::string repr_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // -d.ddde+XX
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  std::string mant = sci.substr(0, e);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -5 + 1 && exp < 16) {  // -4 <= exp < 16
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return neg ? "-" + out : out;
}

namespace {

std::string repr_str(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == static_cast<unsigned char>(q))
      out += std::string("\\") + q;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

void json_str(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_dump(std::string& out, const Value& v, int indent, int level, int line, int col) {
  if (level > 512) fail("tojson: the value nests too deeply", line, col);
  charge_steps(1);
  check_building(out);
  const bool pretty = indent >= 0;
  auto newline = [&](int lv) {
    if (!pretty) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * lv, ' ');
  };
  switch (v.t) {
    case Value::T::None:
      out += "null";
      return;
    case Value::T::Bool:
      out += v.b ? "true" : "false";
      return;
    case Value::T::Int:
      out += std::to_string(v.i);
      return;
    case Value::T::Float:
      out += std::isnan(v.f)   ? "NaN"
             : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity")
                               : repr_float(v.f);
      return;
    case Value::T::Str:
      json_str(out, *v.s);
      return;
    case Value::T::List: {
      if (v.l->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.l->size(); ++i) {
        if (i) out += pretty ? "," : ", ";
        newline(level + 1);
        json_dump(out, (*v.l)[i], indent, level + 1, line, col);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::T::Dict:
    case Value::T::Namespace: {
      if (v.t == Value::T::Namespace) fail("tojson: a namespace is not JSON serializable", line, col);
      if (v.d->items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.d->items) {
        if (!first) out += pretty ? "," : ", ";
        first = false;
        newline(level + 1);
        json_str(out, k);
        out += ": ";
        json_dump(out, x, indent, level + 1, line, col);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      fail(std::string("tojson: ") + type_name(v) + " is not JSON serializable", line, col);
  }
}

}  // namespace

std::string to_json(const Value& v, int indent, int line, int col) {
  std::string out;
  json_dump(out, v, indent, 0, line, col);
  return out;
}

namespace {
void repr_into(std::string& out, const Value& v, int level) {
  if (level > 512) fail_here("repr: the value nests too deeply");
  charge_steps(1);
  check_building(out);
  switch (v.t) {
    case Value::T::Str:
      out += repr_str(*v.s);
      return;
    case Value::T::List:
      out += v.tuple ? '(' : '[';
      for (size_t i = 0; i < v.l->size(); ++i) {
        if (i) out += ", ";
        repr_into(out, (*v.l)[i], level + 1);
      }
      if (v.tuple && v.l->size() == 1) out += ',';
      out += v.tuple ? ')' : ']';
      return;
    case Value::T::Dict: {
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.d->items) {
        out += (first ? "" : ", ") + repr_str(k) + ": ";
        repr_into(out, x, level + 1);
        first = false;
      }
      out += '}';
      return;
    }
    default:
      out += to_str(v);
  }
}
}  // namespace

std::string repr(const Value& v) {
  std::string out;
  repr_into(out, v, 0);
  return out;
}

std::string to_str(const Value& v) {
  switch (v.t) {
    case Value::T::Undefined:
      return "";
    case Value::T::None:
      return "None";
    case Value::T::Bool:
      return v.b ? "True" : "False";
    case Value::T::Int:
      return std::to_string(v.i);
    case Value::T::Float:
      return repr_float(v.f);
    case Value::T::Str:
      return *v.s;
    case Value::T::Namespace:
      return "<Namespace>";
    case Value::T::Macro:
      return "<Macro>";
    default:
      return repr(v);
  }
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Value::number(static_cast<double>(u))
                                                  : Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e));
      return Value::list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) d.set(k, from_json(e));
      return Value::dict(std::move(d));
    }
    default:
      return Value::none();
  }
}

const char* type_name(const Value& v) {
  switch (v.t) {
    case Value::T::Undefined:
      return "undefined";
    case Value::T::None:
      return "none";
    case Value::T::Bool:
      return "a boolean";
    case Value::T::Int:
      return "an integer";
    case Value::T::Float:
      return "a float";
    case Value::T::Str:
      return "a string";
    case Value::T::List:
      return "a list";
    case Value::T::Dict:
      return "a dict";
    case Value::T::Namespace:
      return "a namespace";
    case Value::T::Macro:
      return "a macro";
  }
  return "a value";
}

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t code_point_count(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return code_points(s).size();
  return s.size();
}

}  // namespace jinja
}  // namespace lowbit::serve
