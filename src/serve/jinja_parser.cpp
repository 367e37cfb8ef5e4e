// Tokens -> syntax tree, by recursive descent with Jinja2's operator precedence (lowest first):
//   x if c else y;  or;  and;  not;  comparisons (== != < <= > >= in, not in; chained);  + -;  ~;
//   * / // %;  **;  unary - +;  postfix (.attr [item] [a:b:c] (call));  |filter and `is` test.
// Nesting (brackets, blocks) is bounded so that a hostile template cannot exhaust the stack.
#include <set>

#include "serve/jinja_internal.h"

namespace lowbit::serve::jinja {

namespace {

constexpr int kMaxNesting = 128;

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Program program() {
    Program p;
    std::string end;
    p.body = body({}, &end);
    return p;
  }

 private:
  std::vector<Token> t_;
  size_t p_ = 0;
  int depth_ = 0;

  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser, const Token& at) : p(parser) {
      if (++p.depth_ > kMaxNesting)
        fail("nesting deeper than " + std::to_string(kMaxNesting) + " levels", at.line, at.col);
    }
    ~Nest() { --p.depth_; }
  };

  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(p_ + n, t_.size() - 1)]; }
  [[noreturn]] void error(const std::string& what) const { fail(what, cur().line, cur().col); }
  static std::string describe(const Token& t) {
    switch (t.k) {
      case Token::K::Eof:
        return "the end of the template";
      case Token::K::VarEnd:
        return "'}}'";
      case Token::K::BlockEnd:
        return "'%}'";
      case Token::K::Text:
        return "text";
      case Token::K::Str:
        return "a string";
      case Token::K::Int:
      case Token::K::Float:
        return "a number";
      default:
        return "'" + t.s + "'";
    }
  }
  bool is_op(const char* op) const { return cur().k == Token::K::Op && cur().s == op; }
  bool is_name(const char* n) const { return cur().k == Token::K::Name && cur().s == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++p_;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++p_;
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(std::string("expected '") + op + "', found " + describe(cur()));
  }
  std::string expect_name(const char* what) {
    if (cur().k != Token::K::Name) error(std::string("expected ") + what + ", found " + describe(cur()));
    return t_[p_++].s;
  }
  void expect_block_end() {
    if (cur().k != Token::K::BlockEnd) error("expected '%}', found " + describe(cur()));
    ++p_;
  }

  ExprPtr node(Expr::K k, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->k = k;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  std::unique_ptr<Stmt> stmt(Stmt::K k, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->k = k;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  // ---- statements ----

  // Statements up to a block tag named in `ends` (consumed up to its name; *end says which) or the end.
  Body body(const std::set<std::string>& ends, std::string* end) {
    Body out;
    while (true) {
      const Token& t = cur();
      if (t.k == Token::K::Eof) {
        if (!ends.empty()) error("unclosed block: expected '{% " + *ends.begin() + " %}' before the end");
        return out;
      }
      if (t.k == Token::K::Text) {
        auto s = stmt(Stmt::K::Text, t);
        s->text = t.s;
        out.push_back(std::move(s));
        ++p_;
      } else if (t.k == Token::K::VarBegin) {
        ++p_;
        auto s = stmt(Stmt::K::Output, t);
        s->expr = tuple_expr();
        if (cur().k != Token::K::VarEnd) error("expected '}}', found " + describe(cur()));
        ++p_;
        out.push_back(std::move(s));
      } else if (t.k == Token::K::BlockBegin) {
        ++p_;
        const Token& name = cur();
        if (name.k == Token::K::Name && ends.count(name.s)) {
          *end = name.s;
          ++p_;
          return out;
        }
        out.push_back(statement());
      } else {
        error("unexpected " + describe(t));
      }
    }
  }

  std::unique_ptr<Stmt> statement() {
    const Token at = cur();
    Nest n(*this, at);
    const std::string kw = expect_name("a statement name");
    if (kw == "if") return if_stmt(at);
    if (kw == "for") return for_stmt(at);
    if (kw == "set") return set_stmt(at);
    if (kw == "macro") return macro_stmt(at);
    if (kw == "call") return call_stmt(at);
    if (kw == "break" || kw == "continue") {
      expect_block_end();
      return stmt(kw == "break" ? Stmt::K::Break : Stmt::K::Continue, at);
    }
    if (kw == "generation" || kw == "filter" || kw == "raw") {
      if (kw != "generation")
        fail("'{% " + kw + " %}' is not supported by lowbit's Jinja interpreter", at.line, at.col);
      expect_block_end();  // HF's AssistantTracker marks assistant text; rendering is unchanged
      auto s = stmt(Stmt::K::Block, at);
      std::string end;
      s->body = body({"endgeneration"}, &end);
      expect_block_end();
      return s;
    }
    fail("unknown statement '" + kw + "'" +
             (kw.rfind("end", 0) == 0 ? " (no block is open that it could close)" : ""),
         at.line, at.col);
  }

  std::unique_ptr<Stmt> if_stmt(const Token& at) {
    auto s = stmt(Stmt::K::If, at);
    ExprPtr c = tuple_expr();
    expect_block_end();
    while (true) {
      std::string end;
      Body b = body({"elif", "else", "endif"}, &end);
      s->branches.emplace_back(std::move(c), std::move(b));
      if (end == "elif") {
        c = tuple_expr();
        expect_block_end();
        continue;
      }
      expect_block_end();
      if (end == "else") {
        s->else_body = body({"endif"}, &end);
        expect_block_end();
      }
      return s;
    }
  }

  std::vector<std::string> targets() {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    do {
      names.push_back(expect_name("a variable name"));
    } while (skip_op(","));
    if (paren) expect_op(")");
    return names;
  }

  std::unique_ptr<Stmt> for_stmt(const Token& at) {
    auto s = stmt(Stmt::K::For, at);
    s->targets = targets();
    if (!skip_name("in")) error("expected 'in' in the for statement, found " + describe(cur()));
    s->expr = or_expr();  // no `x if c else y` here: `if` starts the loop filter
    if (skip_name("if")) s->cond = or_expr();
    if (skip_name("recursive"))
      fail("recursive loops are not supported by lowbit's Jinja interpreter", at.line, at.col);
    expect_block_end();
    std::string end;
    s->body = body({"else", "endfor"}, &end);
    expect_block_end();
    if (end == "else") {
      s->else_body = body({"endfor"}, &end);
      expect_block_end();
    }
    return s;
  }

  std::unique_ptr<Stmt> set_stmt(const Token& at) {
    const std::string first = expect_name("a variable name");
    if (skip_op(".")) {
      auto s = stmt(Stmt::K::SetAttr, at);
      s->targets = {first};
      s->text = expect_name("an attribute name");
      expect_op("=");
      s->expr = tuple_expr();
      expect_block_end();
      return s;
    }
    std::vector<std::string> names = {first};
    while (skip_op(",")) names.push_back(expect_name("a variable name"));
    if (names.size() == 1 && cur().k == Token::K::BlockEnd) {
      ++p_;
      auto s = stmt(Stmt::K::SetBlock, at);
      s->targets = names;
      std::string end;
      s->body = body({"endset"}, &end);
      expect_block_end();
      return s;
    }
    auto s = stmt(Stmt::K::Set, at);
    s->targets = std::move(names);
    expect_op("=");
    s->expr = tuple_expr();
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> macro_stmt(const Token& at) {
    auto s = stmt(Stmt::K::Macro, at);
    s->text = expect_name("a macro name");
    expect_op("(");
    while (!skip_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (skip_op(")")) break;
      std::string name = expect_name("a parameter name");
      ExprPtr def;
      if (skip_op("=")) def = expr();
      s->params.emplace_back(std::move(name), std::move(def));
    }
    expect_block_end();
    std::string end;
    s->body = body({"endmacro"}, &end);
    if (cur().k == Token::K::Name) ++p_;  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> call_stmt(const Token& at) {
    auto s = stmt(Stmt::K::CallBlock, at);
    s->expr = expr();
    if (s->expr->k != Expr::K::Call) fail("'{% call %}' needs a macro call", at.line, at.col);
    expect_block_end();
    std::string end;
    s->body = body({"endcall"}, &end);
    expect_block_end();
    return s;
  }

  // ---- expressions ----

  // `a, b` without brackets is a tuple (a list here).
  ExprPtr tuple_expr() {
    const Token at = cur();
    ExprPtr first = expr();
    if (!is_op(",")) return first;
    auto l = node(Expr::K::List, at);
    l->name = "tuple";  // shown as (a, b)
    l->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().k == Token::K::VarEnd || cur().k == Token::K::BlockEnd || is_op(")")) break;
      l->args.push_back(expr());
    }
    return l;
  }

  ExprPtr expr() {
    const Token at = cur();
    Nest n(*this, at);
    ExprPtr e = or_expr();
    if (!is_name("if")) return e;
    ++p_;
    auto c = node(Expr::K::Cond, at);
    c->args.push_back(std::move(e));
    c->args.push_back(or_expr());
    c->args.push_back(skip_name("else") ? expr() : nullptr);
    return c;
  }

  ExprPtr binary(Expr::K k, ExprPtr l, ExprPtr r, const Token& at, std::string op = {}) {
    auto b = node(k, at);
    b->name = std::move(op);
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      const Token at = t_[p_++];
      e = binary(Expr::K::Or, std::move(e), and_expr(), at);
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      const Token at = t_[p_++];
      e = binary(Expr::K::And, std::move(e), not_expr(), at);
    }
    return e;
  }
  ExprPtr not_expr() {
    if (!is_name("not")) return compare();
    const Token at = t_[p_++];
    Nest n(*this, at);
    auto e = node(Expr::K::Not, at);
    e->args.push_back(not_expr());
    return e;
  }

  ExprPtr compare() {
    const Token at = cur();
    ExprPtr first = math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().k == Token::K::Op && (cur().s == "==" || cur().s == "!=" || cur().s == "<" ||
                                      cur().s == "<=" || cur().s == ">" || cur().s == ">=")) {
        op = t_[p_++].s;
      } else if (is_name("in")) {
        ++p_;
        op = "in";
      } else if (is_name("not") && peek().k == Token::K::Name && peek().s == "in") {
        p_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(Expr::K::Compare, at);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const Token at = t_[p_++];
      e = binary(Expr::K::Binary, std::move(e), concat(), at, at.s);
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      const Token at = t_[p_++];
      e = binary(Expr::K::Binary, std::move(e), math2(), at, "~");
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token at = t_[p_++];
      e = binary(Expr::K::Binary, std::move(e), power(), at, at.s);
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary(true);
    while (is_op("**")) {
      const Token at = t_[p_++];
      e = binary(Expr::K::Binary, std::move(e), unary(true), at, "**");
    }
    return e;
  }

  ExprPtr unary(bool with_filter) {
    const Token at = cur();
    Nest n(*this, at);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      ++p_;
      e = node(at.s == "-" ? Expr::K::Neg : Expr::K::Pos, at);
      e->args.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    return with_filter ? filters(std::move(e)) : std::move(e);
  }

  ExprPtr primary() {
    const Token at = cur();
    switch (at.k) {
      case Token::K::Name: {
        ++p_;
        auto e = node(Expr::K::Lit, at);
        if (at.s == "true" || at.s == "True")
          e->lit = Value::boolean(true);
        else if (at.s == "false" || at.s == "False")
          e->lit = Value::boolean(false);
        else if (at.s == "none" || at.s == "None")
          e->lit = Value::none();
        else {
          e->k = Expr::K::Name;
          e->name = at.s;
        }
        return e;
      }
      case Token::K::Str: {
        std::string s;
        while (cur().k == Token::K::Str) s += t_[p_++].s;  // adjacent literals concatenate
        auto e = node(Expr::K::Lit, at);
        e->lit = Value::str(std::move(s));
        return e;
      }
      case Token::K::Int:
      case Token::K::Float: {
        ++p_;
        auto e = node(Expr::K::Lit, at);
        e->lit = at.k == Token::K::Int ? Value::integer(at.i) : Value::number(at.f);
        return e;
      }
      case Token::K::Op:
        if (at.s == "(") {
          ++p_;
          ExprPtr e = is_op(")") ? node(Expr::K::List, at) : tuple_expr();
          if (e->k == Expr::K::List && is_op(")") && t_[p_ - 1].s == "(") e->name = "tuple";  // ()
          expect_op(")");
          return e;
        }
        if (at.s == "[") return list_literal(at);
        if (at.s == "{") return dict_literal(at);
        break;
      default:
        break;
    }
    error("expected an expression, found " + describe(at));
  }

  ExprPtr list_literal(const Token& at) {
    ++p_;
    auto l = node(Expr::K::List, at);
    while (!skip_op("]")) {
      if (!l->args.empty()) expect_op(",");
      if (skip_op("]")) break;
      l->args.push_back(expr());
    }
    return l;
  }

  ExprPtr dict_literal(const Token& at) {
    ++p_;
    auto d = node(Expr::K::Dict, at);
    while (!skip_op("}")) {
      if (!d->args.empty()) expect_op(",");
      if (skip_op("}")) break;
      d->args.push_back(expr());
      expect_op(":");
      d->args.push_back(expr());
    }
    return d;
  }

  // (args, kwargs) of a call, after its '('.
  void call_args(Expr& call) {
    while (!skip_op(")")) {
      if (call.args.size() + call.kwargs.size() > (call.k == Expr::K::Call ? 1 : 1)) expect_op(",");
      if (skip_op(")")) break;
      if (cur().k == Token::K::Name && peek().k == Token::K::Op && peek().s == "=") {
        std::string key = t_[p_].s;
        p_ += 2;
        call.kwargs.emplace_back(std::move(key), expr());
      } else {
        if (!call.kwargs.empty()) error("a positional argument after a keyword argument");
        call.args.push_back(expr());
      }
    }
  }

  ExprPtr postfix(ExprPtr e) {
    while (true) {
      const Token at = cur();
      if (skip_op(".")) {
        auto a = node(Expr::K::Attr, at);
        if (cur().k == Token::K::Int) {  // a.0 is a[0] in Jinja
          auto i = node(Expr::K::Item, at);
          i->args.push_back(std::move(e));
          auto lit = node(Expr::K::Lit, cur());
          lit->lit = Value::integer(t_[p_++].i);
          i->args.push_back(std::move(lit));
          e = std::move(i);
          continue;
        }
        a->name = expect_name("an attribute name");
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (skip_op("[")) {
        e = subscript(std::move(e), at);
      } else if (skip_op("(")) {
        Nest n(*this, at);
        auto c = node(Expr::K::Call, at);
        c->line = e->line;  // errors of a call (raise_exception...) point at its name
        c->col = e->col;
        c->args.push_back(std::move(e));
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr obj, const Token& at) {
    Nest n(*this, at);
    ExprPtr parts[3];
    int colons = 0;
    while (!is_op("]")) {
      if (skip_op(":")) {
        if (++colons > 2) error("a slice has at most two ':'");
        continue;
      }
      if (parts[colons]) error("expected ':' or ']', found " + describe(cur()));
      parts[colons] = expr();
    }
    ++p_;
    if (colons == 0) {
      if (!parts[0]) error("an empty subscript '[]'");
      auto i = node(Expr::K::Item, at);
      i->args.push_back(std::move(obj));
      i->args.push_back(std::move(parts[0]));
      return i;
    }
    auto s = node(Expr::K::Slice, at);
    s->args.push_back(std::move(obj));
    for (auto& p : parts) s->args.push_back(std::move(p));
    return s;
  }

  ExprPtr filters(ExprPtr e) {
    while (true) {
      const Token at = cur();
      if (skip_op("|")) {
        auto f = node(Expr::K::Filter, at);
        f->name = dotted_name("a filter name");
        f->args.push_back(std::move(e));
        if (skip_op("(")) call_args(*f);
        e = std::move(f);
      } else if (skip_name("is")) {
        auto t = node(Expr::K::Test, at);
        t->negate = skip_name("not");
        t->name = dotted_name("a test name");
        t->args.push_back(std::move(e));
        if (skip_op("(")) {
          call_args(*t);
        } else if ((cur().k == Token::K::Name || cur().k == Token::K::Str || cur().k == Token::K::Int ||
                    cur().k == Token::K::Float || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("is")) {
          // `x is divisibleby 3`, `x is equalto 'a'`: one argument without brackets
          t->args.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::string dotted_name(const char* what) {
    std::string n = expect_name(what);
    while (is_op(".") && peek().k == Token::K::Name) {
      n += "." + peek().s;
      p_ += 2;
    }
    return n;
  }
};

}  // namespace

Program parse(std::vector<Token> tokens) {
  return Parser(std::move(tokens)).program();
}

}  // namespace lowbit::serve::jinja
