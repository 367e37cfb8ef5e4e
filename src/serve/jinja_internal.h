// The pieces of the Jinja interpreter (serve/jinja.h): values, tokens, the syntax tree, and the functions the
// lexer, parser, value operations and evaluator share. Not for use outside src/serve/jinja_*.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "serve/jinja.h"

namespace lowbit::serve::jinja {

struct Stmt;
struct Value;
[[noreturn]] void fail_here(const std::string& what);  // at the expression being evaluated
// Lists and dicts nest at most this deep: deeper chains (built in a loop) would overflow the stack when
// compared, printed or destroyed.
constexpr int kMaxValueDepth = 256;
int check_depth(int child_depth);  // child_depth + 1, or a JinjaError past kMaxValueDepth
using ValueList = std::vector<Value>;
// A dict keeps insertion order (Python's dict, and the order tojson and items() show).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  std::unordered_map<std::string, size_t> index;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

// A template value. Strings, lists and dicts are shared and immutable (the sandbox forbids mutation), so a
// copy is cheap; a namespace() is the one mutable object and is shared by reference, as in Python.
struct Value {
  enum class T : uint8_t { Undefined, None, Bool, Int, Float, Str, List, Dict, Namespace, Macro };
  T t = T::Undefined;
  bool b = false;
  bool tuple = false;  // a List that Python would show as a tuple: (a, b) from items() or a literal
  uint16_t depth = 0;  // List / Dict: how deep they nest
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // Str; Undefined: the name, for the error message
  std::shared_ptr<const ValueList> l;
  std::shared_ptr<const Dict> d;
  std::shared_ptr<Dict> ns;
  const Stmt* macro = nullptr;

  static Value none() { return with(T::None); }
  static Value boolean(bool v) {
    Value x = with(T::Bool);
    x.b = v;
    return x;
  }
  static Value integer(int64_t v) {
    Value x = with(T::Int);
    x.i = v;
    return x;
  }
  static Value number(double v) {
    Value x = with(T::Float);
    x.f = v;
    return x;
  }
  static Value str(std::string v) {
    Value x = with(T::Str);
    x.s = std::make_shared<const std::string>(std::move(v));
    return x;
  }
  static Value list(ValueList v) {
    Value x = with(T::List);
    int d = 0;
    for (const Value& e : v) d = e.depth > d ? e.depth : d;
    x.depth = static_cast<uint16_t>(check_depth(d));
    x.l = std::make_shared<const ValueList>(std::move(v));
    return x;
  }
  static Value dict(Dict v) {
    Value x = with(T::Dict);
    int d = 0;
    for (const auto& e : v.items) d = e.second.depth > d ? e.second.depth : d;
    x.depth = static_cast<uint16_t>(check_depth(d));
    x.d = std::make_shared<const Dict>(std::move(v));
    return x;
  }
  static Value undefined(std::string name) {
    Value x;
    x.s = std::make_shared<const std::string>(std::move(name));
    return x;
  }
  static Value with(T t) {
    Value x;
    x.t = t;
    return x;
  }
  bool is(T k) const { return t == k; }
  bool is_number() const { return t == T::Int || t == T::Float || t == T::Bool; }
  double as_double() const { return t == T::Float ? f : t == T::Bool ? (b ? 1 : 0) : static_cast<double>(i); }
  const std::string& sv() const { return *s; }
};

// ---- tokens ----
struct Token {
  enum class K : uint8_t { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Str, Int, Float, Op, Eof };
  K k = K::Eof;
  std::string s;  // Text, Name, Str, Op
  int64_t i = 0;
  double f = 0;
  int line = 1, col = 1;
};
// Source -> tokens, with Jinja2's newline normalisation (\r\n and \r become \n, one trailing newline
// dropped), trim_blocks, lstrip_blocks and the -/+ markers applied to the text tokens; comments are dropped.
std::vector<Token> lex(std::string_view source);

// ---- syntax tree ----
struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
struct Expr {
  enum class K : uint8_t {
    Lit,
    Name,
    Attr,
    Item,
    Slice,
    Call,
    Filter,
    Test,
    Neg,
    Pos,
    Not,
    And,
    Or,
    Binary,
    Compare,
    Cond,
    List,
    Dict
  };
  K k = K::Lit;
  int line = 1, col = 1;
  Value lit;
  std::string name;  // Name, Attr, Call (method name when args[0] is the object), Filter, Test, Binary op
  std::vector<std::string> ops;  // Compare: one per pair of operands
  std::vector<ExprPtr> args;     // operands; Call: callee first; Filter/Test: the operand first
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negate = false;  // Test: `is not`
};

using Body = std::vector<std::unique_ptr<Stmt>>;
struct Stmt {
  enum class K : uint8_t {
    Text,
    Output,
    If,
    For,
    Set,
    SetAttr,
    SetBlock,
    Macro,
    CallBlock,
    Break,
    Continue,
    Block
  };
  K k = K::Text;
  int line = 1, col = 1;
  std::string text;                  // Text; Macro: its name; SetAttr: the attribute
  ExprPtr expr;                      // Output, Set/SetAttr value, For iterable, CallBlock call
  std::vector<std::string> targets;  // For / Set / SetBlock names; SetAttr: the namespace variable
  ExprPtr cond;                      // For: the `if` filter
  std::vector<std::pair<ExprPtr, Body>> branches;  // If / elif
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro parameters and defaults (null: none)
};

struct Program {
  Body body;
};
Program parse(std::vector<Token> tokens);

// ---- limits of the render in progress ----
struct Budget {
  JinjaLimits lim;
  int64_t iterations = 0, steps = 0;
  size_t allocated = 0;
  int line = 1, col = 1;  // the expression being evaluated: where errors from deep inside are reported
  // The namespaces this render made: emptied at its end, since one may hold itself (ns.x = [ns]) and a
  // shared_ptr cycle would never be freed.
  std::vector<std::weak_ptr<Dict>> namespaces;
};
// The render in progress on this thread; null outside a render (then nothing is bounded).
extern thread_local Budget* tl_budget;
// One unit of work per expression, loop iteration and element visited by ==, repr, tojson...
void charge_steps(int64_t n);
// A string or list about to be built: `bytes` counts against the one-string bound (max_output) and the total.
void charge_alloc(size_t bytes);

// ---- value operations (jinja_value.cpp) ----
[[noreturn]] void fail(const std::string& what, int line, int col);
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
// Python's str(): the text {{ v }} prints. repr(): how it looks inside a list or dict.
std::string to_str(const Value& v);
std::string repr(const Value& v);
std::string repr_float(double x);
// json.dumps(v, ensure_ascii=False, indent=indent) as HF's tojson filter; indent < 0: none. Throws on an
// undefined, a macro or a non-finite-safe value the same way Python would refuse it (a JinjaError).
std::string to_json(const Value& v, int indent, int line, int col);
Value from_json(const nlohmann::ordered_json& j);
const char* type_name(const Value& v);
// UTF-8 code points (Python's str is a sequence of them); invalid bytes count one each.
std::vector<std::string_view> code_points(std::string_view s);
size_t code_point_count(std::string_view s);

// ---- filters, tests, methods, globals (jinja_builtins.cpp) ----
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The argument at position `i` or keyword `name`; null when not given.
  const Value* get(size_t i, const char* name) const;
};
Value apply_filter(const std::string& name, const Value& v, const CallArgs& a);
bool apply_test(const std::string& name, const Value& v, const CallArgs& a);
// obj.name(args) for the str and dict methods; false when `obj` has no such method.
bool call_method(const Value& obj, const std::string& name, const CallArgs& a, Value* out);
// range, namespace, dict, raise_exception, strftime_now; false when `name` is none of them.
bool call_global(const std::string& name, const CallArgs& a, Value* out);
// obj.attr / obj[key] as Jinja2 looks them up (an undefined obj is an error, a missing key is undefined).
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
// Python's a < b (op "<", "<=", ">", ">=") and `item in container`.
bool less(const Value& a, const Value& b, const std::string& op);
bool contains(const Value& container, const Value& item);
// The items a for loop, list filter or `in` visits: list elements, dict keys, string code points.
ValueList iterate(const Value& v);

}  // namespace lowbit::serve::jinja
