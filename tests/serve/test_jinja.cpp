// lowbit's Jinja interpreter (serve/jinja.h) against the real thing: every template here is also rendered by
// Python's jinja2 set up as Hugging Face transformers sets it up (tests/reference/render_jinja.py), and the
// two texts must agree byte for byte; where jinja2 fails, lowbit must fail too. Then the error reports, the
// bounds that keep a hostile template from hanging or exhausting the server, the start-up choice, and
// /v1/chat/completions rendering a model's own template end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "serve/chat_template.h"
#include "serve/jinja.h"
#include "tests/serve/test_server_process.h"

namespace {

using lowbit::serve::JinjaError;
using lowbit::serve::JinjaLimits;
using lowbit::serve::JinjaTemplate;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

struct Outcome {
  bool ok = false;
  std::string text;  // the rendering, or the error message
};

Outcome lowbit_render(const std::string& tpl, const ojson& ctx, const JinjaLimits& lim = {}) {
  try {
    return {true, JinjaTemplate(tpl).render(ctx, lim)};
  } catch (const JinjaError& e) {
    return {false, e.what()};
  }
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "lowbit_jinja_" + std::to_string(::getpid()) + "_" + name;
}

// jinja2's renderings of `cases` ({template, context} each), in one Python process.
std::vector<Outcome> reference_render(const std::vector<std::pair<std::string, ojson>>& cases) {
  ojson in = ojson::array();
  for (const auto& [t, c] : cases) in.push_back({{"template", t}, {"context", c}});
  const std::string in_path = temp_path("in.json"), out_path = temp_path("out.json");
  std::ofstream(in_path) << in.dump();
  const std::string cmd = "/usr/bin/python3 " + std::string(LOWBIT_SOURCE_DIR) +
                          "/tests/reference/render_jinja.py < " + in_path + " > " + out_path;
  const int rc = std::system(cmd.c_str());
  std::ifstream f(out_path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::remove(in_path.c_str());
  std::remove(out_path.c_str());
  if (rc != 0)
    ADD_FAILURE() << "the reference renderer failed (python3-jinja2 missing? scripts/setup.sh): " << cmd;
  std::vector<Outcome> out;
  if (rc != 0) return out;
  for (const auto& r : ojson::parse(ss.str()))
    out.push_back({r["ok"].get<bool>(),
                   r.contains("text") ? r["text"].get<std::string>() : r["error"].get<std::string>()});
  return out;
}

// Every case rendered by both; texts equal, failures on both sides.
void expect_same_as_jinja2(const std::vector<std::pair<std::string, ojson>>& cases) {
  const auto ref = reference_render(cases);
  ASSERT_EQ(ref.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Outcome got = lowbit_render(cases[i].first, cases[i].second);
    SCOPED_TRACE("template: " + cases[i].first + "\ncontext: " + cases[i].second.dump());
    EXPECT_EQ(got.ok, ref[i].ok) << "lowbit: " << got.text << "\njinja2: " << ref[i].text;
    if (got.ok && ref[i].ok) {
      EXPECT_EQ(got.text, ref[i].text);
    }
  }
}

ojson msgs(std::initializer_list<std::pair<const char*, const char*>> m) {
  ojson a = ojson::array();
  for (const auto& [r, c] : m) a.push_back({{"role", r}, {"content", c}});
  return a;
}

// ---- chat templates written for this test in the style of the widely used ones ----

const char* kQwenStyle = R"({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {{- tools | tojson }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)";

const char* kLlama3Style = R"({{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{%- if system_message %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" + system_message + "<|eot_id|>" }}
{%- endif %}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)";

const char* kLlama2Style = R"({% if messages[0]['role'] == 'system' %}
{% set loop_messages = messages[1:] %}
{% set system_message = messages[0]['content'] %}
{% else %}
{% set loop_messages = messages %}
{% set system_message = false %}
{% endif %}
{% for message in loop_messages %}
{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
{% endif %}
{% if loop.index0 == 0 and system_message != false %}
{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}
{% else %}
{% set content = message['content'] %}
{% endif %}
{% if message['role'] == 'user' %}
{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}
{% elif message['role'] == 'assistant' %}
{{ ' '  + content.strip() + ' ' + eos_token }}
{% endif %}
{% endfor %}
)";

const char* kGemmaStyle = R"({{ bos_token }}
{% set ns = namespace(system='', turns=0) %}
{% for m in messages %}
  {% if m.role == 'system' %}
    {% set ns.system = ns.system ~ m.content ~ '\n\n' %}
  {% endif %}
{% endfor %}
{% set role_map = {'user': 'user', 'assistant': 'model'} %}
{% for message in messages if message.role != 'system' %}
  {% set role = role_map[message.role] %}
  {% set ns.turns = ns.turns + 1 %}
{{ '<start_of_turn>' + role + '\n' + (ns.system if loop.first else '') + message.content | trim + '<end_of_turn>\n' }}
{% endfor %}
{% if add_generation_prompt %}
{{'<start_of_turn>model\n'}}
{% endif %}
{# turns: {{ ns.turns }} #}
)";

const char* kDeepSeekStyle =
    R"({% set system_messages = messages | selectattr('role', 'equalto', 'system') | list %}
{% if system_messages | length > 0 %}{{ bos_token }}{{ system_messages[0].content }}{% endif %}
{%- for message in messages | rejectattr('role', 'equalto', 'system') %}
  {%- if message.role == 'user' %}<|User|>{{ message.content }}
  {%- elif message.role == 'assistant' %}<|Assistant|>{{ message.content.split('</think>')[-1] | replace('\n\n', '\n') }}<|end_of_sentence|>
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|Assistant|><think>
{% endif %}
)";

const char* kMacroStyle = R"({% macro render_content(c, sep='') -%}
{% if c is string %}{{ c }}{% else %}{% for p in c %}{% if p.type == 'text' %}{{ p.text }}{{ sep }}{% endif %}{% endfor %}{% endif %}
{%- endmacro %}
{% for m in messages %}
<|{{ m.role }}|>
{{ render_content(m.content) }}<|end|>
{% endfor %}
{% if add_generation_prompt %}
<|assistant|>
{% endif %}
)";

std::vector<ojson> conversations() {
  return {
      msgs({{"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}}),
      msgs({{"user", "Hello  "}}),
      msgs({{"user", "h\u00e9llo \u2713 \u65e5\u672c"},
            {"assistant", "  <think>x</think>spaced\n\nout\n"},
            {"user", "quote ' and \" and \\ and {{ not a tag }} {% raw %}"}}),
      msgs({{"system", "only a system prompt"}}),
      msgs({{"user", "a"}, {"user", "b"}}),  // out of order: the Llama-2 style raises
  };
}

TEST(Jinja, ChatTemplatesMatchJinja2) {
  std::vector<std::pair<std::string, ojson>> cases;
  for (const char* t : {kQwenStyle, kLlama3Style, kLlama2Style, kGemmaStyle, kDeepSeekStyle, kMacroStyle})
    for (const ojson& m : conversations())
      for (bool gen : {true, false})
        cases.emplace_back(t, ojson{{"messages", m},
                                    {"add_generation_prompt", gen},
                                    {"bos_token", "<s>"},
                                    {"eos_token", "</s>"}});
  // A message whose content is a list of parts, and tools given (the Qwen style prints them as JSON).
  ojson parts = ojson::array({{{"role", "user"},
                               {"content", ojson::array({{{"type", "text"}, {"text", "p1"}},
                                                         {{"type", "image"}},
                                                         {{"type", "text"}, {"text", "p2"}}})}}});
  cases.emplace_back(kMacroStyle, ojson{{"messages", parts}, {"add_generation_prompt", true}});
  cases.emplace_back(kQwenStyle,
                     ojson{{"messages", msgs({{"user", "x"}})},
                           {"tools", ojson::array({{{"name", "f"}, {"z", 1}, {"a", {1.5, nullptr}}}})}});
  expect_same_as_jinja2(cases);
}

TEST(Jinja, Llama2StyleRaisesOnRoleOrder) {
  const Outcome o = lowbit_render(
      kLlama2Style,
      {{"messages", msgs({{"user", "a"}, {"user", "b"}})}, {"bos_token", "<s>"}, {"eos_token", "</s>"}});
  ASSERT_FALSE(o.ok);
  EXPECT_NE(o.text.find("Conversation roles must alternate user/assistant/user/assistant/..."),
            std::string::npos)
      << o.text;
  EXPECT_EQ(o.text.rfind("[serve] chat template: ", 0), 0u) << o.text;
  EXPECT_NE(o.text.find("at line 10:"), std::string::npos) << o.text;
}

// One feature per template, each compared with jinja2.
TEST(Jinja, FeaturesMatchJinja2) {
  const ojson ctx = {{"s", "  Hello World  "},
                     {"n", 7},
                     {"f", 2.5},
                     {"l", {3, 1, 2}},
                     {"d", {{"b", 1}, {"a", "x"}}},
                     {"msgs", msgs({{"system", "S"}, {"user", "U"}, {"assistant", "A"}})},
                     {"t", true},
                     {"z", nullptr},
                     {"u8", "\u00e9t\u00e9 \u2713"}};
  const char* features[] = {
      // output, comments, whitespace control, trim_blocks / lstrip_blocks
      "a{{ s }}b{# comment #}c",
      "a  {{- s -}}  b",
      "x\n  {% if t %}\n  y\n  {% endif %}\nz\n",
      "x {% if t %}y{% endif %} z",
      "{%- if t -%}  a  {%- endif -%}",
      "  {%+ if t %}k{% endif %}",
      "line\n{# c #}\nnext",
      "{% for i in l %}\n  {{ i }}\n{% endfor %}\n",
      "a\r\nb\rc\n\n",
      // literals and operators
      "{{ 'a\\tb\\n' }}{{ \"q'\" }}{{ '\\u00e9\\x41' }}",
      "{{ 1 + 2 * 3 - 4 / 2 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}",
      "{{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 3.0 }} {{ 10 / 4 }} {{ -0.0 }}",
      "{{ 'a' ~ 1 ~ none ~ true }}",
      "{{ [1, 'a', none, true, 2.0, {'k': [1]}] }}",
      "{{ {'a': 1, 'b': 'c'} }}",
      "{{ 'ab' * 3 }}{{ [1] + [2] }}",
      "{{ n > 3 and n < 10 }} {{ not t }} {{ n == 7.0 }} {{ 1 < 2 < 3 }} {{ 'b' > 'a' }} {{ [1,2] < [1,3] }}",
      "{{ 'ell' in s }} {{ 3 in l }} {{ 'a' in d }} {{ 'q' not in d }} {{ z is none }}",
      "{{ 'y' if t else 'n' }} {{ 'y' if z else 'n' }} [{{ 'y' if z }}]",
      "{{ t and 'A' or 'B' }} {{ z or 'dflt' }}",
      "{{ True }} {{ False }} {{ None }} {{ true == 1 }}",
      // subscripts, attributes, slices
      "{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[::-1] }} {{ l[:-1] }} {{ l[5] }} {{ s[2:7] }} {{ u8[1:3] }} "
      "{{ u8[-1] }}",
      "{{ d.a }} {{ d['b'] }} {{ d.missing }} {{ msgs[1].role }} {{ msgs[0]['content'] }}",
      "{{ l[::2] }} {{ s[::-2] }}",
      // statements
      "{% if n > 10 %}big{% elif n > 5 %}mid{% else %}small{% endif %}",
      "{% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ "
      "loop.first }}/{{ loop.last }}/{{ loop.length }} {% endfor %}",
      "{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}",
      "{% for x in [] %}a{% else %}empty{% endfor %}",
      "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
      "{% for k in d %}{{ k }}{% endfor %}{% for c in 'abc' %}{{ c }}.{% endfor %}",
      "{% for x in l %}{% if x == 1 %}{% break %}{% endif %}{{ x }}{% endfor %}",
      "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}",
      "{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}",
      "{% set x = 5 %}{% for i in l %}{{ x }}{% set x = i %}{% endfor %}{{ x }}",
      "{% set a, b = [1, 2] %}{{ a }}{{ b }}",
      "{% set ns = namespace(c=0, s='') %}{% for i in l %}{% set ns.c = ns.c + i %}{% set ns.s = ns.s ~ i "
      "%}{% endfor %}{{ ns.c }} {{ ns.s }}",
      "{% set blk %}inner {{ n }}{% endset %}[{{ blk }}]",
      "{% macro m(a, b='dflt') %}<{{ a }}|{{ b }}>{% endmacro %}{{ m(1) }}{{ m(2, 'x') }}{{ m(b=3, a=4) }}",
      "{% macro outer() %}{{ caller() }}!{% endmacro %}{% call outer() %}called {{ n }}{% endcall %}",
      "{% macro m() %}{{ late }}{% endmacro %}{% set late = 'seen' %}{{ m() }}",
      "{% for i in range(3) %}{{ i }}{% endfor %}{{ range(2, 8, 3) | list }}{{ range(5, 0, -2) | list }}",
      "{{ dict(a=1, b=2) }}",
      "{% set x = 1, 'b' %}{{ x }} {{ (1,) }} {{ () }} {{ ([1]) }} {{ (2) }}",
      // filters
      "[{{ s | trim }}] [{{ s | upper }}] [{{ s | lower }}] [{{ s | capitalize }}] [{{ 'hello world-x(y' | "
      "title }}]",
      "{{ l | length }} {{ s | length }} {{ u8 | length }} {{ d | length }} {{ undefined_thing | length }} "
      "{{ l | count }}",
      "{{ d | tojson }} {{ l | tojson }} {{ msgs | tojson(indent=2) }} {{ 'x\"<>&\\u00e9\\n' | tojson }} {{ "
      "f | tojson }} {{ z | tojson }}",
      "{{ n | string }}{{ l | string }} {{ '42' | int + 1 }} {{ '4.7' | int }} {{ 'x' | int }} {{ 3.9 | int "
      "}} {{ '2.5' | float }}",
      "{{ nope | default('D') }} {{ '' | default('E', true) }} {{ '' | default('F') }} {{ z | d('G') }}",
      "{{ l | join(', ') }} {{ msgs | join('|', attribute='role') }} {{ l | first }} {{ l | last }} {{ s | "
      "first }}",
      "{{ 'abc' | list }} {{ d | list }} {{ d | items | list }} {{ l | reverse | list }}",
      "{{ msgs | selectattr('role', 'equalto', 'user') | list }} {{ msgs | rejectattr('role', 'eq', 'user') "
      "| map(attribute='content') | list }}",
      "{{ msgs | selectattr('role') | list | length }} {{ l | select('odd') | list }} {{ l | reject('even') "
      "| list }}",
      "{{ msgs | map(attribute='missing', default='m') | list }} {{ ['a', 'b'] | map('upper') | list }}",
      "{{ s | replace('l', 'L') }} {{ s | replace('l', 'L', 1) }} {{ '<a&b>' | escape }} {{ '<a>' | safe }} "
      "{{ -3 | abs }}",
      "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(4, true) }}",
      // tests
      "{{ n is defined }} {{ nope is defined }} {{ nope is undefined }} {{ z is none }} {{ s is string }} {{ "
      "d is mapping }}",
      "{{ l is iterable }} {{ s is sequence }} {{ n is number }} {{ f is number }} {{ t is boolean }} {{ t "
      "is true }} {{ t is false }}",
      "{{ n is equalto 7 }} {{ n is eq(7) }} {{ n is not equalto 7 }} {{ n is odd }} {{ n is even }} {{ n is "
      "divisibleby 7 }} {{ n is integer }} {{ f is float }}",
      // string and dict methods
      "[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ 'xxaxx'.strip('x') }}] {{ s.split() }} {{ "
      "'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }}",
      "{{ s.strip().startswith('Hello') }} {{ s.endswith('  ') }} {{ 'abc'.startswith(('x', 'a')) }} {{ "
      "s.upper() }} {{ s.lower() }}",
      "{{ s.replace('o', '0') }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'abc'.find('c') "
      "}} {{ ', '.join(['a', 'b']) }}",
      "{{ d.get('a') }} {{ d.get('q') }} {{ d.get('q', 'dflt') }} {{ d.keys() | list }} {{ d.values() | list "
      "}} {{ d.items() | list }}",
      // errors both sides must raise
      "{{ nope.attr }}",
      "{{ raise_exception('boom') }}",
      "{{ 1 / 0 }}",
      "{{ 'a' + 1 }}",
      "{{ l < 'x' }}",
  };
  std::vector<std::pair<std::string, ojson>> cases;
  for (const char* t : features) cases.emplace_back(t, ctx);
  expect_same_as_jinja2(cases);
}

TEST(Jinja, ErrorsSayWhatAndWhere) {
  struct Case {
    const char* tpl;
    const char* want;
  };
  const Case cases[] = {
      {"a {% if x %}b", "unclosed block: expected '{% elif %}'"},  // std::set orders elif, else, endif
      {"{{ x ", "unclosed '{{'"},
      {"{% for x in y %}", "unclosed block"},
      {"{# no end", "unclosed comment"},
      {"{{ x | nosuchfilter }}", "unknown filter 'nosuchfilter'"},
      {"{{ x is nosuchtest }}", "unknown test 'nosuchtest'"},
      {"{% endif %}", "unknown statement 'endif' (no block is open"},
      {"{{ 'abc }}", "unterminated string literal"},
      {"{{ 99999999999999999999 }}", "too large"},
      {"{{ nosuchfunc() }}", "unknown function 'nosuchfunc'"},
      {"\n\n  {{ raise_exception('my message') }}", "the template raised an error: my message, at line 3:6"},
      {"{% set x = 1 %}{% set x.y = 2 %}", "is not a namespace()"},
  };
  for (const Case& c : cases) {
    const Outcome o = lowbit_render(c.tpl, {{"x", 1}});
    EXPECT_FALSE(o.ok) << c.tpl;
    EXPECT_NE(o.text.find(c.want), std::string::npos) << c.tpl << " -> " << o.text;
    EXPECT_EQ(o.text.rfind("[serve] chat template: ", 0), 0u) << o.text;
  }
}

TEST(Jinja, HostileTemplatesAreBounded) {
  JinjaLimits lim;
  lim.max_iterations = 10000;
  lim.max_output = 1 << 20;
  lim.max_allocated = 8 << 20;
  lim.max_steps = 2'000'000;
  const ojson ctx = ojson::object();
  const struct {
    std::string tpl;
    const char* want;
  } cases[] = {
      {"{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", "macro calls nest deeper than"},
      {"{% for i in range(100) %}{% for j in range(100) %}{% for k in range(100) %}{% endfor %}{% endfor "
       "%}{% endfor %}",
       "loop iterations"},
      {"{{ range(100000000) | length }}", "range of over"},
      {"{{ 'x' * 100000000000 }}", "bound"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
       "bound"},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
       "bytes"},
      {"{% for i in range(9000) %}{{ 'y' * 1000 }}{% endfor %}", "rendered text is over"},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ "
       "ns.l }}",
       "bound"},
      {"{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}", "nesting deeper than"},
      {"{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% endfor %}",
       "nest deeper than 256"},
      {"{{ range(-9223372036854775807, 9223372036854775807, 4611686018427387904) | list }}"
       "{{ range(0, -9223372036854775807 - 1, -9223372036854775807 - 1) | list }}{{ nope }}{{ nope.x }}",
       "'nope' is undefined"},
      {"{{ " + std::string(2000, '[') + std::string(2000, ']') + " }}", "nesting deeper than"},
      {"{{ " + std::string(5000, '-') + "1 }}", "nesting deeper than"},
      {"{{ x" + std::string(5000, '|') + " }}", "expected a filter name"},
      {[] {
         std::string s;
         for (int i = 0; i < 200; ++i) s += "{% if 1 %}";
         return s;
       }(),
       "nesting deeper than"},
  };
  for (const auto& c : cases) {
    Outcome o;
    try {
      o = {true, JinjaTemplate(c.tpl).render(ctx, lim)};
    } catch (const JinjaError& e) {
      o = {false, e.what()};
    }
    EXPECT_FALSE(o.ok) << c.tpl.substr(0, 120);
    EXPECT_NE(o.text.find(c.want), std::string::npos) << c.tpl.substr(0, 120) << " -> " << o.text;
  }
}

TEST(Jinja, StrftimeNowAndUndefined) {
  char year[8];
  const std::time_t now = std::time(nullptr);
  std::strftime(year, sizeof year, "%Y", std::localtime(&now));
  EXPECT_EQ(lowbit_render("{{ strftime_now('%Y') }}", ojson::object()).text, year);
  // A namespace that holds itself is freed when the render ends (the sanitizer build checks for leaks).
  EXPECT_EQ(
      lowbit_render("{% set ns = namespace() %}{% set ns.me = [ns] %}{% set ns.x = ns %}ok", ojson::object())
          .text,
      "ok");
  EXPECT_EQ(lowbit_render("[{{ missing }}]{% if missing %}x{% endif %}{% for m in missing %}y{% endfor %}",
                          ojson::object())
                .text,
            "[]");
}

// ---- the start-up choice ----

TEST(Jinja, ChoiceInterpretsTheModelsTemplate) {
  const auto c = lowbit::serve::choose_chat_template("{{ '<start_of_turn>' }}", "");
  ASSERT_TRUE(c.jinja);
  EXPECT_STREQ(c.name(), "jinja");
  EXPECT_FALSE(c.warn);
  EXPECT_NE(c.reason.find("the model's chat_template (Jinja)"), std::string::npos) << c.reason;
  // A template that does not parse: the family of its marker tokens, with a warning.
  const auto broken = lowbit::serve::choose_chat_template("<|im_start|>{% if %}", "");
  EXPECT_FALSE(broken.jinja);
  EXPECT_TRUE(broken.warn);
  EXPECT_EQ(broken.format, lowbit::serve::ChatFormat::ChatML);
  EXPECT_NE(broken.reason.find("does not parse"), std::string::npos) << broken.reason;
  const auto unknown = lowbit::serve::choose_chat_template("{% if %}", "");
  EXPECT_EQ(unknown.format, lowbit::serve::ChatFormat::Plain);
  EXPECT_TRUE(unknown.warn);
  // The flag still forces a built-in; jinja:FILE reads another template.
  const auto forced = lowbit::serve::choose_chat_template("{{ '<|im_start|>' }}", "llama3");
  EXPECT_FALSE(forced.jinja);
  EXPECT_EQ(forced.format, lowbit::serve::ChatFormat::Llama3);
  const std::string file = temp_path("tpl.jinja");
  std::ofstream(file) << "{% for m in messages %}{{ m.content }}{% endfor %}";
  const auto from_file = lowbit::serve::choose_chat_template("", "jinja:" + file);
  ASSERT_TRUE(from_file.jinja);
  EXPECT_EQ(lowbit::serve::render_chat_jinja(*from_file.jinja, {{"user", "a"}, {"user", "b"}}, "<s>", "</s>"),
            "ab");
  std::remove(file.c_str());
  EXPECT_THROW(lowbit::serve::choose_chat_template("", "jinja:/nonexistent/x.jinja"), lowbit::UsageError);
}

TEST(Jinja, BosIsAddedOnlyWhenTheTemplateDidNotWriteIt) {
  using lowbit::serve::jinja_prompt_needs_bos;
  EXPECT_FALSE(jinja_prompt_needs_bos("<s>[INST] hi", "<s>", true));
  EXPECT_TRUE(jinja_prompt_needs_bos("[INST] hi", "<s>", true));
  EXPECT_FALSE(jinja_prompt_needs_bos("[INST] hi", "<s>", false));
}

TEST(Jinja, TinyStoriesHasNoChatTemplate) {
  const std::string dir = std::string(LOWBIT_SHARED_DIR) + "/models/tinystories-656K";
  EXPECT_EQ(lowbit::serve::read_model_chat_template(dir), "");
  const auto c = lowbit::serve::choose_chat_template(lowbit::serve::read_model_chat_template(dir), "");
  EXPECT_FALSE(c.jinja);
  EXPECT_EQ(c.format, lowbit::serve::ChatFormat::Plain);
  EXPECT_FALSE(c.warn);
}

// ---- end to end: lowbit serve on tinystories-656K with a chat_template added ----

TEST(Jinja, ServerRendersTheModelsTemplate) {
  using lowbit::testing_serve::post;
  using lowbit::testing_serve::Reply;
  using lowbit::testing_serve::ServerProcess;
  const fs::path src = fs::path(LOWBIT_SHARED_DIR) / "models/tinystories-656K";
  const fs::path dir = temp_path("model");
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src)) fs::copy_file(e.path(), dir / e.path().filename());
  fs::permissions(dir / "tokenizer_config.json", fs::perms::owner_write, fs::perm_options::add);
  nlohmann::json cfg;
  {
    std::ifstream in(dir / "tokenizer_config.json");
    cfg = nlohmann::json::parse(in);
  }
  cfg["chat_template"] =
      "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
      "{{ raise_exception('the system message must come first') }}{% endif %}"
      "{{ m.role | upper }}: {{ m.content | trim }}\n{% endfor %}{% if add_generation_prompt %}STORY:{% "
      "endif %}";
  std::ofstream(dir / "tokenizer_config.json") << cfg.dump();

  ServerProcess s({"-m", dir.string()});
  EXPECT_NE(s.log().find("chat template: jinja (the model's chat_template (Jinja)"), std::string::npos)
      << s.log();
  const nlohmann::json req = {{"messages", {{{"role", "user"}, {"content", "  Once upon a time "}}}},
                              {"max_tokens", 1}};
  const Reply r = post(s, "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  // The prompt is the template's text, with the BOS it writes and no second one.
  const std::string want = "<|start_story|>USER: Once upon a time\nSTORY:";
  const Reply t = post(s, "/tokenize", nlohmann::json{{"content", want}, {"add_special", false}});
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(r.json()["usage"]["prompt_tokens"].get<size_t>(), t.json()["tokens"].size()) << t.body;
  EXPECT_EQ(t.json()["tokens"][0], 1) << "the template's <|start_story|> is the BOS token";

  const nlohmann::json bad = {
      {"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "system"}, {"content", "b"}}}},
      {"max_tokens", 1}};
  const Reply e = post(s, "/v1/chat/completions", bad);
  EXPECT_EQ(e.status, 400) << e.body;
  EXPECT_NE(e.json()["error"]["message"].get<std::string>().find("the system message must come first"),
            std::string::npos)
      << e.body;
  EXPECT_EQ(e.json()["error"]["type"], "invalid_request_error");
  fs::remove_all(dir);
}

}  // namespace
