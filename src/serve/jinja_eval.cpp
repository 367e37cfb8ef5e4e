// Rendering: statements write to an output string, expressions evaluate to Values. Scopes follow Jinja2: a
// for-loop iteration and a macro call each get their own scope (so `set` inside a loop does not leak out,
// which is why templates use namespace()), `if` does not. Every step counts against the render's Budget.
#include <cmath>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "serve/jinja_internal.h"

namespace lowbit::serve {

namespace jinja {
namespace {

using Frame = std::unordered_map<std::string, Value>;
enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  Renderer(const Dict& context, Budget& budget) : ctx_(context), b_(budget) { scopes_.push_back(&top_); }

  std::string run(const Body& body) {
    std::string out;
    out_ = &out;
    exec_body(body);
    return out;
  }

 private:
  const Dict& ctx_;
  Budget& b_;
  Frame top_;
  std::vector<Frame*> scopes_;
  std::string* out_ = nullptr;
  int depth_ = 0, macro_depth_ = 0;
  const Stmt* caller_ = nullptr;  // the {% call %} block whose body caller() renders

  struct Deeper {
    Renderer& r;
    Deeper(Renderer& renderer, int line, int col) : r(renderer) {
      if (++r.depth_ > r.b_.lim.max_depth)
        fail("nesting deeper than " + std::to_string(r.b_.lim.max_depth) + " levels while rendering", line,
             col);
    }
    ~Deeper() { --r.depth_; }
  };

  void here(int line, int col) {
    b_.line = line;
    b_.col = col;
  }

  Value lookup(const std::string& name) const {
    for (size_t i = scopes_.size(); i-- > 0;) {
      auto it = scopes_[i]->find(name);
      if (it != scopes_[i]->end()) return it->second;
    }
    if (const Value* v = ctx_.find(name)) return *v;
    return Value::undefined("'" + name + "' is undefined");
  }

  void write(const std::string& s) {
    out_->append(s);
    if (out_->size() > b_.lim.max_output)
      fail_here("the rendered text is over the " + std::to_string(b_.lim.max_output) + "-byte bound");
  }

  // ---- statements ----

  Flow exec_body(const Body& body) {
    for (const auto& s : body) {
      const Flow f = exec(*s);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s) {
    Deeper d(*this, s.line, s.col);
    here(s.line, s.col);
    charge_steps(1);
    switch (s.k) {
      case Stmt::K::Text:
        write(s.text);
        return Flow::Normal;
      case Stmt::K::Output:
        write(to_str(eval(*s.expr)));
        return Flow::Normal;
      case Stmt::K::If:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond))) return exec_body(body);
        return exec_body(s.else_body);
      case Stmt::K::For:
        exec_for(s);
        return Flow::Normal;
      case Stmt::K::Set:
        assign(s.targets, eval(*s.expr), s);
        return Flow::Normal;
      case Stmt::K::SetAttr: {
        const Value ns = lookup(s.targets[0]);
        if (!ns.is(Value::T::Namespace))
          fail("'" + s.targets[0] + "' is not a namespace(): only a namespace's attributes can be set",
               s.line, s.col);
        Value v = eval(*s.expr);
        ns.ns->set(s.text, std::move(v));
        return Flow::Normal;
      }
      case Stmt::K::SetBlock:
        assign(s.targets, Value::str(capture(s.body)), s);
        return Flow::Normal;
      case Stmt::K::Macro: {
        Value m = Value::with(Value::T::Macro);
        m.macro = &s;
        scopes_.back()->insert_or_assign(s.text, std::move(m));
        return Flow::Normal;
      }
      case Stmt::K::CallBlock: {
        const Stmt* saved = caller_;
        caller_ = &s;
        Value v;
        try {
          v = eval(*s.expr);
        } catch (...) {
          caller_ = saved;
          throw;
        }
        caller_ = saved;
        write(to_str(v));
        return Flow::Normal;
      }
      case Stmt::K::Break:
        return Flow::Break;
      case Stmt::K::Continue:
        return Flow::Continue;
      case Stmt::K::Block:
        return exec_body(s.body);
    }
    return Flow::Normal;
  }

  // The body rendered into a string of its own ({% set x %}...{% endset %}, macros).
  std::string capture(const Body& body) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    try {
      exec_body(body);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buf;
  }

  void assign(const std::vector<std::string>& targets, const Value& v, const Stmt& s) {
    if (targets.size() == 1) {
      scopes_.back()->insert_or_assign(targets[0], v);
      return;
    }
    const ValueList items = iterate(v);
    if (items.size() != targets.size())
      fail("cannot unpack " + std::to_string(items.size()) + " values into " +
               std::to_string(targets.size()) + " names",
           s.line, s.col);
    for (size_t i = 0; i < targets.size(); ++i) scopes_.back()->insert_or_assign(targets[i], items[i]);
  }

  static Value loop_info(const ValueList& items, size_t i) {
    const auto n = static_cast<int64_t>(items.size());
    const auto k = static_cast<int64_t>(i);
    Dict d;
    d.set("index", Value::integer(k + 1));
    d.set("index0", Value::integer(k));
    d.set("revindex", Value::integer(n - k));
    d.set("revindex0", Value::integer(n - k - 1));
    d.set("first", Value::boolean(k == 0));
    d.set("last", Value::boolean(k == n - 1));
    d.set("length", Value::integer(n));
    d.set("depth", Value::integer(1));
    d.set("depth0", Value::integer(0));
    if (k > 0) d.set("previtem", items[i - 1]);
    if (k + 1 < n) d.set("nextitem", items[i + 1]);
    return Value::dict(std::move(d));
  }

  void exec_for(const Stmt& s) {
    ValueList items = iterate(eval(*s.expr));
    if (s.cond) {  // the filter runs first: loop.length and loop.last count only the kept items
      ValueList kept;
      Frame f;
      scopes_.push_back(&f);
      try {
        for (auto& x : items) {
          count_iteration(s);
          bind(f, s, x);
          if (truthy(eval(*s.cond))) kept.push_back(std::move(x));
        }
      } catch (...) {
        scopes_.pop_back();
        throw;
      }
      scopes_.pop_back();
      items = std::move(kept);
    }
    if (items.empty()) {
      exec_body(s.else_body);
      return;
    }
    for (size_t i = 0; i < items.size(); ++i) {
      count_iteration(s);
      Frame f;
      f.emplace("loop", loop_info(items, i));
      bind(f, s, items[i]);
      scopes_.push_back(&f);
      Flow fl;
      try {
        fl = exec_body(s.body);
      } catch (...) {
        scopes_.pop_back();
        throw;
      }
      scopes_.pop_back();
      if (fl == Flow::Break) break;
    }
  }

  void count_iteration(const Stmt& s) {
    if (++b_.iterations > b_.lim.max_iterations)
      fail("over " + std::to_string(b_.lim.max_iterations) + " loop iterations in one render", s.line, s.col);
  }

  void bind(Frame& f, const Stmt& s, const Value& x) {
    if (s.targets.size() == 1) {
      f.insert_or_assign(s.targets[0], x);
      return;
    }
    const ValueList parts = iterate(x);
    if (parts.size() != s.targets.size())
      fail("cannot unpack " + std::to_string(parts.size()) + " values into the loop's " +
               std::to_string(s.targets.size()) + " names",
           s.line, s.col);
    for (size_t i = 0; i < parts.size(); ++i) f.insert_or_assign(s.targets[i], parts[i]);
  }

  // ---- expressions ----

  CallArgs args_of(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i]));
    for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x));
    return a;
  }

  Value call_macro(const Stmt& m, const CallArgs& a, const Expr& e) {
    if (++macro_depth_ > b_.lim.max_macro_depth) {
      --macro_depth_;
      fail("macro calls nest deeper than " + std::to_string(b_.lim.max_macro_depth) + " (runaway recursion?)",
           e.line, e.col);
    }
    Frame f;
    const bool is_caller = m.k == Stmt::K::CallBlock;
    if (!is_caller && a.pos.size() > m.params.size())
      fail("macro '" + m.text + "' takes " + std::to_string(m.params.size()) + " arguments, " +
               std::to_string(a.pos.size()) + " given",
           e.line, e.col);
    std::vector<Frame*> saved = std::move(scopes_);
    scopes_ = {&top_, &f};
    const Stmt* saved_caller = caller_;
    std::string text;
    try {
      for (size_t i = 0; i < m.params.size(); ++i) {
        const auto& [name, def] = m.params[i];
        const Value* given = a.get(i, name.c_str());
        f.insert_or_assign(name, given ? *given
                                 : def ? eval(*def)
                                       : Value::undefined("'" + name + "' is undefined"));
      }
      if (caller_ && !is_caller) {
        Value c = Value::with(Value::T::Macro);
        c.macro = caller_;
        f.insert_or_assign("caller", std::move(c));
        caller_ = nullptr;
      }
      text = capture(m.body);
    } catch (...) {
      scopes_ = std::move(saved);
      caller_ = saved_caller;
      --macro_depth_;
      throw;
    }
    scopes_ = std::move(saved);
    caller_ = saved_caller;
    --macro_depth_;
    return Value::str(std::move(text));
  }

  Value eval_call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.k == Expr::K::Attr) {
      const Value obj = eval(*callee.args[0]);
      if (obj.is(Value::T::Undefined)) get_attr(obj, callee.name);  // throws: undefined has no methods
      if (obj.is(Value::T::Dict) || obj.is(Value::T::Namespace)) {
        const Value m = get_attr(obj, callee.name);
        if (m.is(Value::T::Macro)) return call_macro(*m.macro, args_of(e, 1), e);
      }
      const CallArgs a = args_of(e, 1);
      here(e.line, e.col);
      Value out;
      if (call_method(obj, callee.name, a, &out)) return out;
      fail(std::string(type_name(obj)) + " has no method '" + callee.name + "'", e.line, e.col);
    }
    if (callee.k == Expr::K::Name) {
      const Value v = lookup(callee.name);
      if (v.is(Value::T::Macro)) return call_macro(*v.macro, args_of(e, 1), e);
      if (v.is(Value::T::Undefined)) {
        const CallArgs a = args_of(e, 1);
        here(e.line, e.col);
        Value out;
        if (call_global(callee.name, a, &out)) return out;
        fail("unknown function '" + callee.name + "'", e.line, e.col);
      }
      fail("'" + callee.name + "' is " + type_name(v) + ", not a function or macro", e.line, e.col);
    }
    const Value v = eval(callee);
    if (v.is(Value::T::Macro)) return call_macro(*v.macro, args_of(e, 1), e);
    fail(std::string(type_name(v)) + " is not callable", e.line, e.col);
  }

  static int64_t slice_index(const Value* v, int64_t n, int64_t def, bool neg_step) {
    if (!v || v->is(Value::T::None)) return def;
    if (!v->is(Value::T::Int)) fail_here("slice indices must be integers or none");
    int64_t i = v->i;
    if (i < 0) {
      i += n;
      if (i < 0) i = neg_step ? -1 : 0;
    } else if (i >= n) {
      i = neg_step ? n - 1 : n;
    }
    return i;
  }

  Value eval_slice(const Expr& e) {
    const Value obj = eval(*e.args[0]);
    Value parts[3];
    const Value* p[3] = {nullptr, nullptr, nullptr};
    for (int i = 0; i < 3; ++i)
      if (e.args[i + 1]) {
        parts[i] = eval(*e.args[i + 1]);
        p[i] = &parts[i];
      }
    here(e.line, e.col);
    if (obj.is(Value::T::Undefined)) get_attr(obj, "");
    if (!obj.is(Value::T::List) && !obj.is(Value::T::Str))
      fail_here(std::string(type_name(obj)) + " cannot be sliced");
    int64_t step = 1;
    if (p[2] && !p[2]->is(Value::T::None)) {
      if (!p[2]->is(Value::T::Int) || p[2]->i == 0) fail_here("a slice step must be a non-zero integer");
      step = p[2]->i == INT64_MIN ? -INT64_MAX : p[2]->i;
    }
    std::vector<std::string_view> cps;
    if (obj.is(Value::T::Str)) cps = code_points(obj.sv());
    const auto n = static_cast<int64_t>(obj.is(Value::T::Str) ? cps.size() : obj.l->size());
    const int64_t start = slice_index(p[0], n, step > 0 ? 0 : n - 1, step < 0);
    const int64_t stop = slice_index(p[1], n, step > 0 ? n : -1, step < 0);
    std::string s;
    ValueList l;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (obj.is(Value::T::Str))
        s += cps[static_cast<size_t>(i)];
      else
        l.push_back((*obj.l)[static_cast<size_t>(i)]);
      if (step > 0 ? i > INT64_MAX - step : i < INT64_MIN - step) break;
    }
    charge_steps(static_cast<int64_t>(l.size()));
    return obj.is(Value::T::Str) ? Value::str(std::move(s)) : Value::list(std::move(l));
  }

  Value arith(const std::string& op, const Value& a, const Value& b);

  Value eval_compare(const Expr& e) {
    Value left = eval(*e.args[0]);
    for (size_t i = 0; i < e.ops.size(); ++i) {
      Value right = eval(*e.args[i + 1]);
      here(e.line, e.col);
      const std::string& op = e.ops[i];
      bool r;
      if (op == "==")
        r = equal(left, right);
      else if (op == "!=")
        r = !equal(left, right);
      else if (op == "in")
        r = contains(right, left);
      else if (op == "not in")
        r = !contains(right, left);
      else
        r = less(left, right, op);
      if (!r) return Value::boolean(false);
      left = std::move(right);
    }
    return Value::boolean(true);
  }

  Value eval_literal_container(const Expr& e) {
    if (e.k == Expr::K::List) {
      ValueList l;
      l.reserve(e.args.size());
      for (const auto& x : e.args) l.push_back(eval(*x));
      charge_alloc(l.size() * 32);
      Value v = Value::list(std::move(l));
      v.tuple = e.name == "tuple";
      return v;
    }
    Dict d;
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      const Value k = eval(*e.args[i]);
      Value v = eval(*e.args[i + 1]);
      d.set(k.is(Value::T::Str) ? k.sv() : to_str(k), std::move(v));
    }
    charge_alloc(d.items.size() * 32);
    return Value::dict(std::move(d));
  }

  Value eval(const Expr& e) {
    Deeper d(*this, e.line, e.col);
    charge_steps(1);
    switch (e.k) {
      case Expr::K::Lit:
        return e.lit;
      case Expr::K::Name:
        return lookup(e.name);
      case Expr::K::Attr: {
        const Value obj = eval(*e.args[0]);
        here(e.line, e.col);
        return get_attr(obj, e.name);
      }
      case Expr::K::Item: {
        const Value obj = eval(*e.args[0]);
        const Value key = eval(*e.args[1]);
        here(e.line, e.col);
        return get_item(obj, key);
      }
      case Expr::K::Slice:
        return eval_slice(e);
      case Expr::K::Call:
        return eval_call(e);
      case Expr::K::Filter: {
        const Value v = eval(*e.args[0]);
        const CallArgs a = args_of(e, 1);
        here(e.line, e.col);
        return apply_filter(e.name, v, a);
      }
      case Expr::K::Test: {
        const Value v = eval(*e.args[0]);
        const CallArgs a = args_of(e, 1);
        here(e.line, e.col);
        return Value::boolean(apply_test(e.name, v, a) != e.negate);
      }
      case Expr::K::Neg:
      case Expr::K::Pos: {
        const Value v = eval(*e.args[0]);
        here(e.line, e.col);
        if (e.k == Expr::K::Pos && v.is_number()) return v.is(Value::T::Bool) ? Value::integer(v.b) : v;
        if (e.k == Expr::K::Neg && v.is(Value::T::Float)) return Value::number(-v.f);
        return arith("-", Value::integer(0), v);
      }
      case Expr::K::Not:
        return Value::boolean(!truthy(eval(*e.args[0])));
      case Expr::K::And: {
        Value l = eval(*e.args[0]);
        return truthy(l) ? eval(*e.args[1]) : l;
      }
      case Expr::K::Or: {
        Value l = eval(*e.args[0]);
        return truthy(l) ? l : eval(*e.args[1]);
      }
      case Expr::K::Binary: {
        const Value l = eval(*e.args[0]);
        const Value r = eval(*e.args[1]);
        here(e.line, e.col);
        return arith(e.name, l, r);
      }
      case Expr::K::Compare:
        return eval_compare(e);
      case Expr::K::Cond:
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2])
                         : Value::undefined("the condition was false and there is no else");
      case Expr::K::List:
      case Expr::K::Dict:
        return eval_literal_container(e);
    }
    return Value();
  }
};

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  for (const Value* v : {&a, &b})
    if (v->is(Value::T::Undefined)) get_attr(*v, "");  // Jinja2: "'x' is undefined"
  fail_here("unsupported operand types for " + op + ": " + type_name(a) + " and " + type_name(b));
}

int64_t int_of(const Value& v) {
  return v.is(Value::T::Bool) ? v.b : v.i;
}

Value int_arith(const std::string& op, int64_t x, int64_t y) {
  int64_t r = 0;
  bool overflow = false;
  if (op == "+")
    overflow = __builtin_add_overflow(x, y, &r);
  else if (op == "-")
    overflow = __builtin_sub_overflow(x, y, &r);
  else if (op == "*")
    overflow = __builtin_mul_overflow(x, y, &r);
  else if (op == "/") {
    if (y == 0) fail_here("division by zero");
    return Value::number(static_cast<double>(x) / static_cast<double>(y));
  } else if (op == "//" || op == "%") {
    if (y == 0) fail_here(op == "%" ? "modulo by zero" : "division by zero");
    if (x == INT64_MIN && y == -1)
      return op == "%" ? Value::integer(0) : Value::number(9.223372036854775808e18);
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    return Value::integer(op == "%" ? m : q);
  } else if (op == "**") {
    if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
    r = 1;
    for (int64_t i = 0; i < y && !overflow; ++i) {
      overflow = __builtin_mul_overflow(r, x, &r);
      if (r == 0 || r == 1) break;
      if (r == -1) {
        r = (y % 2) ? -1 : 1;
        break;
      }
    }
  }
  if (overflow) fail_here("integer overflow in " + std::to_string(x) + " " + op + " " + std::to_string(y));
  return Value::integer(r);
}

Value float_arith(const std::string& op, double x, double y) {
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "**") {
    if (x == 0 && y < 0) fail_here("zero to a negative power");
    if (x < 0 && std::floor(y) != y) fail_here("a negative number to a fractional power");
    return Value::number(std::pow(x, y));
  }
  if (y == 0) fail_here(op == "%" ? "modulo by zero" : "division by zero");
  if (op == "/") return Value::number(x / y);
  const double m = std::fmod(x, y);
  const double mod = (m != 0 && ((m < 0) != (y < 0))) ? m + y : m;
  if (op == "%") return Value::number(mod);
  return Value::number(std::floor(x / y));
}

Value repeat(const Value& seq, int64_t n) {
  if (n <= 0) return seq.is(Value::T::Str) ? Value::str("") : Value::list({});
  const size_t unit = seq.is(Value::T::Str) ? seq.s->size() : seq.l->size() * 32;
  if (unit > 0 && static_cast<uint64_t>(n) > (size_t{1} << 40) / unit) charge_alloc(size_t{1} << 40);
  charge_alloc(unit * static_cast<size_t>(n));
  if (seq.is(Value::T::Str)) {
    std::string out;
    out.reserve(unit * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.sv();
    return Value::str(std::move(out));
  }
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.l->begin(), seq.l->end());
  return Value::list(std::move(out));
}

Value Renderer::arith(const std::string& op, const Value& a, const Value& b) {
  using T = Value::T;
  if (op == "~") {
    std::string s = to_str(a);
    s += to_str(b);
    charge_alloc(s.size());
    return Value::str(std::move(s));
  }
  if (a.is_number() && b.is_number()) {
    if (a.is(T::Float) || b.is(T::Float)) return float_arith(op, a.as_double(), b.as_double());
    return int_arith(op, int_of(a), int_of(b));
  }
  if (op == "+" && a.t == b.t && (a.is(T::Str) || a.is(T::List))) {
    if (a.is(T::Str)) {
      charge_alloc(a.s->size() + b.s->size());
      return Value::str(a.sv() + b.sv());
    }
    charge_alloc((a.l->size() + b.l->size()) * 32);
    ValueList l = *a.l;
    l.insert(l.end(), b.l->begin(), b.l->end());
    return Value::list(std::move(l));
  }
  if (op == "*") {
    if ((a.is(T::Str) || a.is(T::List)) && (b.is(T::Int) || b.is(T::Bool))) return repeat(a, int_of(b));
    if ((b.is(T::Str) || b.is(T::List)) && (a.is(T::Int) || a.is(T::Bool))) return repeat(b, int_of(a));
  }
  if (op == "%" && a.is(T::Str))
    fail_here("'%' string formatting is not supported by lowbit's Jinja interpreter");
  bad_operands(op, a, b);
}

}  // namespace
}  // namespace jinja

JinjaTemplate::JinjaTemplate(std::string_view source)
    : prog_(std::make_shared<const jinja::Program>(jinja::parse(jinja::lex(source)))) {}
JinjaTemplate::~JinjaTemplate() = default;
JinjaTemplate::JinjaTemplate(JinjaTemplate&&) noexcept = default;
JinjaTemplate& JinjaTemplate::operator=(JinjaTemplate&&) noexcept = default;

std::string JinjaTemplate::render(const nlohmann::ordered_json& context, const JinjaLimits& limits) const {
  using namespace jinja;
  Budget budget;
  budget.lim = limits;
  Budget* saved = tl_budget;
  tl_budget = &budget;
  struct Restore {
    Budget* saved;
    Budget& mine;
    ~Restore() {
      tl_budget = saved;
      for (auto& w : mine.namespaces)
        if (auto ns = w.lock()) {
          auto items = std::move(ns->items);  // destroyed after the namespace is emptied
          ns->items.clear();
          ns->index.clear();
        }
    }
  } restore{saved, budget};
  Dict ctx;
  if (context.is_object())
    for (const auto& [k, v] : context.items()) ctx.set(k, from_json(v));
  return Renderer(ctx, budget).run(prog_->body);
}

}  // namespace lowbit::serve
