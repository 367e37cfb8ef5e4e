// The filters, tests, str/dict methods and global functions chat templates use, with Jinja2's (and Python's)
// behaviour, plus attribute/item lookup, ordering and membership.
#include <algorithm>
#include <cmath>
#include <ctime>

#include "serve/jinja_internal.h"

namespace lowbit::serve::jinja {

const Value* CallArgs::get(size_t i, const char* name) const {
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return i < pos.size() ? &pos[i] : nullptr;
}

namespace {

[[noreturn]] void undefined_error(const Value& v) {
  fail_here(v.s && !v.s->empty() ? *v.s : "a value is undefined");
}

std::string text_of(const Value& v) {
  return to_str(v);
}

Value str_value(std::string s) {
  charge_alloc(s.size());
  return Value::str(std::move(s));
}

Value list_value(ValueList l) {
  charge_alloc(l.size() * 32);
  return Value::list(std::move(l));
}

int64_t int_arg(const CallArgs& a, size_t i, const char* name, int64_t def) {
  const Value* v = a.get(i, name);
  if (!v || v->is(Value::T::None)) return def;
  if (v->is(Value::T::Int)) return v->i;
  if (v->is(Value::T::Bool)) return v->b;
  fail_here(std::string("argument '") + name + "' must be an integer, not " + type_name(*v));
}

std::string str_arg(const CallArgs& a, size_t i, const char* name, const char* def) {
  const Value* v = a.get(i, name);
  if (!v) return def;
  if (!v->is(Value::T::Str))
    fail_here(std::string("argument '") + name + "' must be a string, not " + type_name(*v));
  return v->sv();
}

bool is_py_space(std::string_view cp) {
  if (cp.size() != 1)
    return cp == "\xc2\x85" || cp == "\xc2\xa0" || cp == "\xe2\x80\xa8" || cp == "\xe2\x80\xa9";
  const char c = cp[0];
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

// str.strip / lstrip / rstrip: chars null = whitespace.
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  const auto cps = code_points(s);
  std::vector<std::string_view> set;
  const bool ws = !chars || chars->is(Value::T::None);
  if (!ws) {
    if (!chars->is(Value::T::Str)) fail_here("strip: the characters must be a string");
    set = code_points(chars->sv());
  }
  auto strippable = [&](std::string_view cp) {
    return ws ? is_py_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strippable(cps[b])) ++b;
  if (right)
    while (e > b && strippable(cps[e - 1])) --e;
  if (b == e) return "";
  return std::string(cps[b].data(), cps[e - 1].data() + cps[e - 1].size() - cps[b].data());
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  size_t pos = 0;
  int64_t n = 0;
  if (from.empty()) {  // Python inserts `to` around every code point
    const auto cps = code_points(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (i < cps.size()) out += cps[i];
      charge_alloc(0);
      if (tl_budget && out.size() > tl_budget->lim.max_output) charge_alloc(out.size());
    }
    return out;
  }
  while (count < 0 || n < count) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += to;
    if (tl_budget && out.size() > tl_budget->lim.max_output) charge_alloc(out.size());
    pos = at + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}
std::string upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}
std::string capitalize(const std::string& s) {
  std::string out = lower(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}
// Jinja2's title filter: each word (after the start or a run of whitespace, '-', '(', '{', '[', '<') starts
// upper case, the rest lower case.
std::string title(const std::string& s, bool jinja_rules) {
  std::string out = lower(s);
  bool start = true;
  for (char& c : out) {
    const bool sep = jinja_rules ? (std::string_view(" \t\n\r\f\v-({[<").find(c) != std::string_view::npos)
                                 : !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c & 0x80));
    if (start && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    start = sep;
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Python's str.split(sep=None, maxsplit=-1).
ValueList split(const std::string& s, const Value* sep, int64_t maxsplit) {
  ValueList out;
  if (!sep || sep->is(Value::T::None)) {
    const auto cps = code_points(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && is_py_space(cps[i])) ++i;
      if (i == cps.size()) break;
      size_t j = i;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = cps.size();
        while (e > i && is_py_space(cps[e - 1])) --e;
        out.push_back(
            Value::str(std::string(cps[i].data(), cps[e - 1].data() + cps[e - 1].size() - cps[i].data())));
        break;
      }
      while (j < cps.size() && !is_py_space(cps[j])) ++j;
      out.push_back(
          Value::str(std::string(cps[i].data(), cps[j - 1].data() + cps[j - 1].size() - cps[i].data())));
      i = j;
      charge_steps(1);
    }
    return out;
  }
  if (!sep->is(Value::T::Str)) fail_here("split: the separator must be a string");
  if (sep->sv().empty()) fail_here("split: empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t at = s.find(sep->sv(), pos);
    if (at == std::string::npos) break;
    out.push_back(Value::str(s.substr(pos, at - pos)));
    pos = at + sep->sv().size();
    charge_steps(1);
  }
  out.push_back(Value::str(s.substr(pos)));
  return out;
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is(Value::T::Str))
      fail_here(std::string(prefix ? "startswith" : "endswith") +
                ": the argument must be a string or a list of strings");
    const std::string& x = a.sv();
    return x.size() <= s.size() &&
           (prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
  };
  if (affix.is(Value::T::List)) {
    for (const auto& a : *affix.l)
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

// Jinja2's attribute getter for filters (selectattr, map, join...): "a.b" walks items; a missing one is
// undefined.
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (cur.is(Value::T::Undefined)) return cur;
    cur = digits && part.size() < 18 ? get_item(cur, Value::integer(std::stoll(part)))
                                     : get_item(cur, Value::str(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

Value select(const Value& v, const CallArgs& a, bool attr, bool keep) {
  ValueList out;
  const char* what = attr ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject");
  size_t first_arg = 0;
  std::string attribute;
  if (attr) {
    if (a.pos.empty() || !a.pos[0].is(Value::T::Str))
      fail_here(std::string(what) + " needs an attribute name");
    attribute = a.pos[0].sv();
    first_arg = 1;
  }
  CallArgs test_args;
  std::string test;
  if (a.pos.size() > first_arg) {
    if (!a.pos[first_arg].is(Value::T::Str))
      fail_here(std::string(what) + ": the test name must be a string");
    test = a.pos[first_arg].sv();
    test_args.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(first_arg) + 1, a.pos.end());
  }
  for (const Value& item : iterate(v)) {
    charge_steps(1);
    const Value x = attr ? attr_path(item, attribute) : item;
    const bool ok = test.empty() ? truthy(x) : apply_test(test, x, test_args);
    if (ok == keep) out.push_back(item);
  }
  return list_value(std::move(out));
}

Value map_filter(const Value& v, const CallArgs& a) {
  ValueList out;
  if (const Value* attribute = a.get(99, "attribute")) {
    if (!attribute->is(Value::T::Str)) fail_here("map: attribute must be a string");
    const Value* def = a.get(99, "default");
    for (const Value& item : iterate(v)) {
      charge_steps(1);
      Value x = attr_path(item, attribute->sv());
      out.push_back(x.is(Value::T::Undefined) && def ? *def : x);
    }
    return list_value(std::move(out));
  }
  if (a.pos.empty() || !a.pos[0].is(Value::T::Str)) fail_here("map needs a filter name or attribute=");
  CallArgs fa;
  fa.pos.assign(a.pos.begin() + 1, a.pos.end());
  fa.kw = a.kw;
  for (const Value& item : iterate(v)) {
    charge_steps(1);
    out.push_back(apply_filter(a.pos[0].sv(), item, fa));
  }
  return list_value(std::move(out));
}

Value join(const Value& v, const CallArgs& a) {
  const std::string sep = str_arg(a, 0, "d", "");
  const Value* attribute = a.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += text_of(attribute && attribute->is(Value::T::Str) ? attr_path(item, attribute->sv()) : item);
    charge_steps(1);
    if (tl_budget && out.size() > tl_budget->lim.max_output) charge_alloc(out.size());
  }
  return str_value(std::move(out));
}

Value indent(const Value& v, const CallArgs& a) {
  const Value* w = a.get(0, "width");
  std::string pad =
      w && w->is(Value::T::Str)
          ? w->sv()
          : std::string(static_cast<size_t>(std::clamp<int64_t>(int_arg(a, 0, "width", 4), 0, 1024)), ' ');
  const bool first = a.get(1, "first") && truthy(*a.get(1, "first"));
  const bool blank = a.get(2, "blank") && truthy(*a.get(2, "blank"));
  const std::string s = text_of(v);
  std::string out;
  size_t pos = 0;
  bool is_first = true;
  while (true) {
    const size_t nl = s.find('\n', pos);
    const std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    if (is_first ? first : (blank || !line.empty())) out += pad;
    out += line;
    if (tl_budget && out.size() > tl_budget->lim.max_output) charge_alloc(out.size());
    if (nl == std::string::npos) break;
    out += '\n';
    pos = nl + 1;
    is_first = false;
  }
  return str_value(std::move(out));
}

Value to_int(const Value& v, const CallArgs& a) {
  const int64_t def = int_arg(a, 0, "default", 0);
  switch (v.t) {
    case Value::T::Int:
      return v;
    case Value::T::Bool:
      return Value::integer(v.b);
    case Value::T::Float:
      return std::isfinite(v.f) && std::fabs(v.f) < 9.2e18 ? Value::integer(static_cast<int64_t>(v.f))
                                                           : Value::integer(def);
    case Value::T::Str: {
      const std::string s = strip(v.sv(), nullptr, true, true);
      char* end = nullptr;
      errno = 0;
      const long long i = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end && *end == '\0' && errno == 0) return Value::integer(i);
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(d));
      return Value::integer(def);
    }
    default:
      return Value::integer(def);
  }
}

Value to_float(const Value& v) {
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is(Value::T::Str)) {
    const std::string s = strip(v.sv(), nullptr, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return Value::number(d);
  }
  return Value::number(0.0);
}

Value first_last(const Value& v, bool first) {
  if (v.is(Value::T::List)) {
    if (v.l->empty()) return Value::undefined("first/last of an empty list");
    return first ? v.l->front() : v.l->back();
  }
  ValueList items = iterate(v);
  if (items.empty()) return Value::undefined("first/last of an empty sequence");
  return first ? items.front() : items.back();
}

Value length(const Value& v) {
  switch (v.t) {
    case Value::T::Undefined:
      return Value::integer(0);
    case Value::T::Str:
      return Value::integer(static_cast<int64_t>(code_point_count(v.sv())));
    case Value::T::List:
      return Value::integer(static_cast<int64_t>(v.l->size()));
    case Value::T::Dict:
      return Value::integer(static_cast<int64_t>(v.d->items.size()));
    default:
      fail_here(std::string("length: ") + type_name(v) + " has no length");
  }
}

Value items(const Value& v) {
  if (v.is(Value::T::Undefined)) return Value::list({});
  if (!v.is(Value::T::Dict)) fail_here(std::string("items: ") + type_name(v) + " is not a dict");
  ValueList out;
  for (const auto& [k, x] : v.d->items) {
    out.push_back(Value::list({Value::str(k), x}));
    out.back().tuple = true;
  }
  return list_value(std::move(out));
}

Value reverse(const Value& v) {
  if (v.is(Value::T::Str)) {
    auto cps = code_points(v.sv());
    std::string out;
    for (size_t i = cps.size(); i-- > 0;) out += cps[i];
    return Value::str(std::move(out));
  }
  ValueList l = iterate(v);
  std::reverse(l.begin(), l.end());
  return list_value(std::move(l));
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, const CallArgs& a) {
  charge_steps(1);
  if (name == "safe") return v;
  if (name == "string") return v.is(Value::T::Str) ? v : str_value(text_of(v));
  if (name == "trim") return str_value(strip(text_of(v), a.get(0, "chars"), true, true));
  if (name == "upper") return str_value(upper(text_of(v)));
  if (name == "lower") return str_value(lower(text_of(v)));
  if (name == "capitalize") return str_value(capitalize(text_of(v)));
  if (name == "title") return str_value(title(text_of(v), true));
  if (name == "escape" || name == "e") return str_value(html_escape(text_of(v)));
  if (name == "length" || name == "count") return length(v);
  if (name == "tojson") {
    const Value* ind = a.get(0, "indent");
    const int indent = ind && !ind->is(Value::T::None)
                           ? static_cast<int>(std::clamp<int64_t>(int_arg(a, 0, "indent", 0), 0, 64))
                           : -1;
    return str_value(to_json(v, indent, tl_budget ? tl_budget->line : 1, tl_budget ? tl_budget->col : 1));
  }
  if (name == "int") return to_int(v, a);
  if (name == "float") return to_float(v);
  if (name == "abs") {
    if (v.is(Value::T::Int))
      return v.i == INT64_MIN ? Value::number(9.223372036854775808e18) : Value::integer(std::llabs(v.i));
    if (v.is_number()) return v.is(Value::T::Bool) ? Value::integer(v.b) : Value::number(std::fabs(v.f));
    fail_here(std::string("abs: ") + type_name(v) + " is not a number");
  }
  if (name == "default" || name == "d") {
    const Value* def = a.get(0, "default_value");
    const Value* boolean = a.get(1, "boolean");
    const bool use_default = v.is(Value::T::Undefined) || (boolean && truthy(*boolean) && !truthy(v));
    return use_default ? (def ? *def : Value::str("")) : v;
  }
  if (name == "join") return join(v, a);
  if (name == "first") return first_last(v, true);
  if (name == "last") return first_last(v, false);
  if (name == "list") return v.is(Value::T::List) ? v : list_value(iterate(v));
  if (name == "items") return items(v);
  if (name == "reverse") return reverse(v);
  if (name == "selectattr" || name == "rejectattr") return select(v, a, true, name == "selectattr");
  if (name == "select" || name == "reject") return select(v, a, false, name == "select");
  if (name == "map") return map_filter(v, a);
  if (name == "indent") return indent(v, a);
  if (name == "replace") {
    if (a.pos.size() < 2 || !a.pos[0].is(Value::T::Str) || !a.pos[1].is(Value::T::Str))
      fail_here("replace needs two strings: replace(old, new[, count])");
    return str_value(replace_all(text_of(v), a.pos[0].sv(), a.pos[1].sv(), int_arg(a, 2, "count", -1)));
  }
  fail_here("unknown filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& a) {
  charge_steps(1);
  using T = Value::T;
  const Value* arg = a.get(0, "value");
  auto need_arg = [&]() -> const Value& {
    if (!arg) fail_here("the test '" + name + "' needs an argument");
    return *arg;
  };
  if (name == "defined") return !v.is(T::Undefined);
  if (name == "undefined") return v.is(T::Undefined);
  if (name == "none") return v.is(T::None);
  if (name == "string") return v.is(T::Str);
  if (name == "mapping") return v.is(T::Dict);
  if (name == "iterable") return v.is(T::Str) || v.is(T::List) || v.is(T::Dict) || v.is(T::Undefined);
  if (name == "sequence") return v.is(T::Str) || v.is(T::List) || v.is(T::Dict);
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is(T::Int);
  if (name == "float") return v.is(T::Float);
  if (name == "boolean") return v.is(T::Bool);
  if (name == "true") return v.is(T::Bool) && v.b;
  if (name == "false") return v.is(T::Bool) && !v.b;
  if (name == "callable") return v.is(T::Macro);
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return equal(v, need_arg());
  if (name == "ne" || name == "!=") return !equal(v, need_arg());
  if (name == "lt" || name == "lessthan") return less(v, need_arg(), "<");
  if (name == "le") return less(v, need_arg(), "<=");
  if (name == "gt" || name == "greaterthan") return less(v, need_arg(), ">");
  if (name == "ge") return less(v, need_arg(), ">=");
  if (name == "in") return contains(need_arg(), v);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is(T::Int) && !v.is(T::Bool))
      fail_here("the test '" + name + "' needs an integer, not " + type_name(v));
    const int64_t x = v.is(T::Bool) ? v.b : v.i;
    if (name == "odd") return x % 2 != 0;
    if (name == "even") return x % 2 == 0;
    const Value& d = need_arg();
    if (!d.is(T::Int) || d.i == 0) fail_here("divisibleby needs a non-zero integer");
    return d.i == -1 || x % d.i == 0;
  }
  if (name == "lower" || name == "upper") {
    if (!v.is(T::Str)) return false;
    return name == "lower" ? lower(v.sv()) == v.sv() : upper(v.sv()) == v.sv();
  }
  fail_here("unknown test '" + name + "'");
}

bool call_method(const Value& obj, const std::string& name, const CallArgs& a, Value* out) {
  charge_steps(1);
  if (obj.is(Value::T::Str)) {
    const std::string& s = obj.sv();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      *out = str_value(strip(s, a.get(0, "chars"), name != "rstrip", name != "lstrip"));
    } else if (name == "split") {
      *out = list_value(split(s, a.get(0, "sep"), int_arg(a, 1, "maxsplit", -1)));
    } else if (name == "startswith" || name == "endswith") {
      const Value* x = a.get(0, "prefix");
      if (!x) fail_here(name + " needs an argument");
      *out = Value::boolean(affix_match(s, *x, name == "startswith"));
    } else if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      *out = str_value(name == "upper"   ? upper(s)
                       : name == "lower" ? lower(s)
                       : name == "title" ? title(s, false)
                                         : capitalize(s));
    } else if (name == "replace") {
      if (a.pos.size() < 2 || !a.pos[0].is(Value::T::Str) || !a.pos[1].is(Value::T::Str))
        fail_here("replace needs two strings: replace(old, new[, count])");
      *out = str_value(replace_all(s, a.pos[0].sv(), a.pos[1].sv(), int_arg(a, 2, "count", -1)));
    } else if (name == "find") {
      const std::string sub = str_arg(a, 0, "sub", "");
      const size_t at = s.find(sub);
      *out = Value::integer(at == std::string::npos
                                ? -1
                                : static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, at))));
    } else if (name == "join") {
      CallArgs ja;
      ja.pos.push_back(obj);
      *out = a.pos.empty() ? str_value("") : join(a.pos[0], ja);
    } else {
      return false;
    }
    return true;
  }
  if (obj.is(Value::T::Dict)) {
    if (name == "get") {
      if (a.pos.empty()) fail_here("get needs a key");
      const Value* def = a.get(1, "default");
      const Value* found = a.pos[0].is(Value::T::Str) ? obj.d->find(a.pos[0].sv()) : nullptr;
      *out = found ? *found : def ? *def : Value::none();
    } else if (name == "items") {
      *out = items(obj);
    } else if (name == "keys" || name == "values") {
      ValueList l;
      for (const auto& [k, x] : obj.d->items) l.push_back(name == "keys" ? Value::str(k) : x);
      *out = list_value(std::move(l));
    } else {
      return false;
    }
    return true;
  }
  return false;
}

namespace {

Value range(const CallArgs& a) {
  if (a.pos.empty() || a.pos.size() > 3) fail_here("range takes 1 to 3 integers");
  int64_t start = 0, stop, step = 1;
  for (const Value& v : a.pos)
    if (!v.is(Value::T::Int)) fail_here(std::string("range: ") + type_name(v) + " is not an integer");
  if (a.pos.size() == 1) {
    stop = a.pos[0].i;
  } else {
    start = a.pos[0].i;
    stop = a.pos[1].i;
    if (a.pos.size() == 3) step = a.pos[2].i;
  }
  if (step == 0) fail_here("range: the step must not be zero");
  const long double st = static_cast<long double>(step);
  const long double n = step > 0 ? (static_cast<long double>(stop) - start + st - 1) / st
                                 : (static_cast<long double>(start) - stop - st - 1) / -st;
  const int64_t limit = tl_budget ? tl_budget->lim.max_iterations : INT64_MAX;
  if (n > static_cast<long double>(limit))
    fail_here("range of over " + std::to_string(limit) + " numbers (the loop iteration bound)");
  ValueList out;
  const int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
  int64_t x = start;  // stepping (not start + i * step) never leaves [start, stop]: no overflow
  for (int64_t i = 0; i < count; ++i) {
    out.push_back(Value::integer(x));
    if (i + 1 < count) x += step;
  }
  return list_value(std::move(out));
}

}  // namespace

bool call_global(const std::string& name, const CallArgs& a, Value* out) {
  charge_steps(1);
  if (name == "range") {
    *out = range(a);
  } else if (name == "namespace" || name == "dict") {
    auto d = std::make_shared<Dict>();
    for (const Value& p : a.pos) {
      if (!p.is(Value::T::Dict)) fail_here(name + "() takes keyword arguments or a dict");
      for (const auto& [k, v] : p.d->items) d->set(k, v);
    }
    for (const auto& [k, v] : a.kw) d->set(k, v);
    charge_alloc(d->items.size() * 32);
    if (name == "dict") {
      *out = Value::dict(std::move(*d));
    } else {
      *out = Value::with(Value::T::Namespace);
      if (tl_budget) tl_budget->namespaces.push_back(d);
      out->ns = std::move(d);
    }
  } else if (name == "raise_exception") {
    fail_here("the template raised an error: " + (a.pos.empty() ? std::string() : text_of(a.pos[0])));
  } else if (name == "strftime_now") {
    const std::string fmt = str_arg(a, 0, "format", "");
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    const size_t n = fmt.size() < 200 ? std::strftime(buf, sizeof buf, fmt.c_str(), &tm) : 0;
    *out = Value::str(std::string(buf, n));
  } else {
    return false;
  }
  return true;
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.t) {
    case Value::T::Undefined:
      undefined_error(obj);
    case Value::T::Dict:
      if (const Value* v = obj.d->find(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    case Value::T::Namespace:
      if (const Value* v = obj.ns->find(name)) return *v;
      return Value::undefined("the namespace has no attribute '" + name + "'");
    default:
      return Value::undefined(std::string("'") + type_name(obj) + "' has no attribute '" + name + "'");
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is(Value::T::Undefined)) undefined_error(obj);
  if (key.is(Value::T::Str) && (obj.is(Value::T::Dict) || obj.is(Value::T::Namespace)))
    return get_attr(obj, key.sv());
  if ((key.is(Value::T::Int) || key.is(Value::T::Bool)) &&
      (obj.is(Value::T::List) || obj.is(Value::T::Str))) {
    int64_t i = key.is(Value::T::Bool) ? key.b : key.i;
    if (obj.is(Value::T::List)) {
      const int64_t n = static_cast<int64_t>(obj.l->size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return (*obj.l)[static_cast<size_t>(i)];
    } else {
      const auto cps = code_points(obj.sv());
      const int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::str(std::string(cps[static_cast<size_t>(i)]));
    }
    return Value::undefined("index " + std::to_string(key.i) + " is out of range");
  }
  return Value::undefined(std::string("'") + type_name(obj) + "' has no item " + repr(key));
}

bool less(const Value& a, const Value& b, const std::string& op) {
  int c = 0;
  if (a.is_number() && b.is_number()) {
    if (a.is(Value::T::Float) || b.is(Value::T::Float)) {
      const double x = a.as_double(), y = b.as_double();
      if (std::isnan(x) || std::isnan(y)) return false;
      c = x < y ? -1 : x > y ? 1 : 0;
    } else {
      const int64_t x = a.is(Value::T::Bool) ? a.b : a.i, y = b.is(Value::T::Bool) ? b.b : b.i;
      c = x < y ? -1 : x > y ? 1 : 0;
    }
  } else if (a.is(Value::T::Str) && b.is(Value::T::Str)) {
    c = a.sv().compare(b.sv());
  } else if (a.is(Value::T::List) && b.is(Value::T::List)) {
    size_t i = 0;
    while (i < a.l->size() && i < b.l->size() && equal((*a.l)[i], (*b.l)[i])) ++i;
    if (i < a.l->size() && i < b.l->size()) return less((*a.l)[i], (*b.l)[i], op);
    c = a.l->size() < b.l->size() ? -1 : a.l->size() > b.l->size() ? 1 : 0;
  } else {
    if (a.is(Value::T::Undefined)) undefined_error(a);
    if (b.is(Value::T::Undefined)) undefined_error(b);
    fail_here("'" + op + "' is not supported between " + type_name(a) + " and " + type_name(b));
  }
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

bool contains(const Value& container, const Value& item) {
  switch (container.t) {
    case Value::T::Str:
      if (!item.is(Value::T::Str))
        fail_here(std::string("'in <string>' needs a string on the left, not ") + type_name(item));
      return container.sv().find(item.sv()) != std::string::npos;
    case Value::T::List:
      for (const Value& x : *container.l)
        if (equal(x, item)) return true;
      return false;
    case Value::T::Dict:
      return item.is(Value::T::Str) && container.d->find(item.sv()) != nullptr;
    case Value::T::Undefined:
      return false;
    default:
      fail_here(std::string("'in': ") + type_name(container) + " is not a container");
  }
}

ValueList iterate(const Value& v) {
  switch (v.t) {
    case Value::T::List:
      return *v.l;
    case Value::T::Dict: {
      ValueList out;
      out.reserve(v.d->items.size());
      for (const auto& [k, x] : v.d->items) out.push_back(Value::str(k));
      return out;
    }
    case Value::T::Str: {
      ValueList out;
      for (std::string_view cp : code_points(v.sv())) out.push_back(Value::str(std::string(cp)));
      charge_alloc(out.size() * 32);
      return out;
    }
    case Value::T::Undefined:
      return {};
    default:
      fail_here(std::string(type_name(v)) + " is not iterable");
  }
}

}  // namespace lowbit::serve::jinja
