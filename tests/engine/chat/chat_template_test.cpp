// The chat-template interpreter: constructs, whitespace control, Python-exact printing, error
// messages with positions, the limits, and golden renders. The byte-for-byte comparison with
// jinja2 over real templates is tests/engine/chat/chat_template_reference.py.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "bitsplit/chat_template.h"

namespace bitsplit {
namespace {

using Json = nlohmann::ordered_json;

// Renders `source` with `context`; a failure returns "error: <message>".
std::string render(const std::string& source, const Json& context = Json::object(), ChatTemplateLimits limits = {}) {
  auto tmpl = ChatTemplate::parse(source, limits);
  if (!tmpl.is_ok()) return "error: " + tmpl.status().message();
  auto text = tmpl->render(context);
  if (!text.is_ok()) return "error: " + text.status().message();
  return *text;
}

Json two_turns() {
  return Json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}])");
}

TEST(ChatTemplate, GoldenChatMl) {
  const std::string source =
      "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  auto tmpl = ChatTemplate::parse(source);
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().message();
  auto text = tmpl->render_chat(two_turns(), true, "<s>", "</s>");
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  EXPECT_EQ(*text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, GoldenLlamaStyleWithSystemExtraction) {
  const std::string source = R"({{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = '' %}
{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\n\n' + system_message + '<|eot_id|>' }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)";
  Json context = {{"messages", two_turns()}, {"add_generation_prompt", true}, {"bos_token", "<|begin_of_text|>"}};
  EXPECT_EQ(render(source, context),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// A context nested deeper than the template values may be (a request's message carrying a
// value 20,000 deep overflowed the stack converting it) is refused with an error; one at the
// limit renders.
TEST(ChatTemplate, AContextNestedTooDeeplyIsRefused) {
  auto nested = [](int depth) {
    Json v = "leaf";
    for (int i = 0; i < depth; ++i) v = Json::array({std::move(v)});
    return v;
  };
  EXPECT_EQ(render("{{ x | length }}", {{"x", nested(100)}}), "1");
  const std::string deep = render("{{ x | length }}", {{"x", nested(20000)}});
  EXPECT_NE(deep.find("nested more than 128 levels"), std::string::npos) << deep;
}

TEST(ChatTemplate, WhitespaceControlLikeHuggingFace) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before it.
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(render("a  {{- 'b' -}}  \n c"), "abc");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
  EXPECT_EQ(render("{# comment #}\nx"), "x");
  EXPECT_EQ(render("x\n"), "x");        // one trailing newline dropped
  EXPECT_EQ(render("x\n\n"), "x\n");
  EXPECT_EQ(render("a\r\nb"), "a\nb");  // newlines normalised
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");  // '}}' inside braces
}

TEST(ChatTemplate, LoopsAndScopes) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
                   "{{ loop.last }}{{ loop.length }};{% endfor %}"),
            "103TrueFalse3;212FalseFalse3;321FalseTrue3;");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in range(10) if x is even %}{{ x }}{% endfor %}"), "02468");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
  EXPECT_EQ(render("{% for x in range(9) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}"
                   "{% endif %}{{ x }}{% endfor %}"),
            "013");
  // A set inside a loop does not leave it; a namespace carries state out.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [5] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [5, 6] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}"),
            "12");
  EXPECT_EQ(render("{% set x %}  block {{ 1 + 1 }}  {% endset %}[{{ x }}]"), "[  block 2  ]");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
}

TEST(ChatTemplate, Macros) {
  EXPECT_EQ(render("{% macro m(a, b='d') %}<{{ a }}|{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}"),
            "<1|d><1|2><4|3>");
  EXPECT_EQ(render("{% macro f(n) %}{{ n }}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"), "3210");
  EXPECT_EQ(render("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}").rfind("error: chat template: macro 'm' takes "
                                                                             "not more than 1 argument(s) at 1:",
                                                                             0),
            0u);
}

TEST(ChatTemplate, PythonPrinting) {
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5, (1,), {'k': \"it's\"}] }}"),
            "[1, 'a', None, True, 1.5, (1,), {'k': \"it's\"}]");
  EXPECT_EQ(render("{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 10/2 }} {{ 0.1 + 0.2 }}"),
            "1e+16 1000000000000000.0 0.0001 1e-05 0.3333333333333333 5.0 0.30000000000000004");
  EXPECT_EQ(render("{{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 % -2 }} {{ 2 ** 10 }} {{ 'ab' * 2 }} {{ 1 ~ none }}"),
            "-4 2 -0.5 1024 abab 1None");
  EXPECT_EQ(render("[{{ undefined }}][{{ none }}][{{ undefined is defined }}]"), "[][None][False]");
}

TEST(ChatTemplate, FiltersAndMethods) {
  EXPECT_EQ(render("{{ '  x  ' | trim }}|{{ 'aBc' | upper }}|{{ 'a b-c' | title }}|{{ 'hELLO' | capitalize }}"),
            "x|ABC|A B-C|Hello");
  EXPECT_EQ(render("{{ [3, 1, 2] | sort | join(',') }} {{ ['b', 'A'] | sort }} {{ [1, 1, 2] | unique | list }}"),
            "1,2,3 ['A', 'b'] [1, 2]");
  EXPECT_EQ(render("{{ [{'r': 'u'}, {'r': 'a'}] | selectattr('r', 'eq', 'u') | map(attribute='r') | list }}"), "['u']");
  EXPECT_EQ(render("{{ x | default('d') }} {{ '' | d('e', true) }} {{ [1, 2] | first }}{{ [1, 2] | last }} "
                   "{{ 'abc' | length }} {{ 'héllo'[1] }} {{ 'héllo'[::-1] }}"),
            "d e 12 3 é olléh");
  EXPECT_EQ(render("{{ ' a b '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'ab'.startswith('a') }}|{{ 'x</think>y'."
                   "split('</think>')[-1] }}|{{ 'aXa'.replace('a', 'b') }}"),
            "a b|['a', 'b']|True|y|bXb");
  EXPECT_EQ(render("{{ 'a\\nb' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}"), "a\n  b|  a\n  b");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | dictsort }} {{ {'a': 1}.get('z', 0) }} {{ 3.14159 | round(2) }}"),
            "[('a', 2), ('b', 1)] 0 3.14");
  EXPECT_EQ(render("{{ '<a>' | e }} {{ '<a>' | safe }}"), "&lt;a&gt; <a>");
}

TEST(ChatTemplate, ToJsonMatchesPythonJsonDumps) {
  Json context = Json::parse(R"({"v": {"z": [1, 2.5, "é\n\"", null, true], "a": {}, "b": []}})");
  EXPECT_EQ(render("{{ v | tojson }}", context), R"({"z": [1, 2.5, "é\n\"", null, true], "a": {}, "b": []})");
  EXPECT_EQ(render("{{ v | tojson(indent=2) }}", context),
            "{\n  \"z\": [\n    1,\n    2.5,\n    \"é\\n\\\"\",\n    null,\n    true\n  ],\n  \"a\": {},\n  \"b\": []\n}");
  EXPECT_EQ(render("{{ v.z | tojson(separators=(',', ':')) }}", context), R"([1,2.5,"é\n\"",null,true])");
  EXPECT_EQ(render("{{ v | tojson(sort_keys=true) }}", context), R"({"a": {}, "b": [], "z": [1, 2.5, "é\n\"", null, true]})");
  EXPECT_EQ(render("{{ 'é😀' | tojson(ensure_ascii=true) }}"), R"("\u00e9\ud83d\ude00")");
  EXPECT_EQ(render("{{ x | tojson }}").rfind("error: chat template: Object of type Undefined is not JSON serializable", 0), 0u);
}

TEST(ChatTemplate, KeyOrderFollowsTheContextType) {
  const std::string source = "{{ d | tojson }}";
  auto tmpl = ChatTemplate::parse(source);
  ASSERT_TRUE(tmpl.is_ok());
  EXPECT_EQ(*tmpl->render(Json::parse(R"({"d": {"b": 1, "a": 2}})")), R"({"b": 1, "a": 2})");
  EXPECT_EQ(*tmpl->render(nlohmann::json::parse(R"({"d": {"b": 1, "a": 2}})")), R"({"a": 2, "b": 1})");
}

TEST(ChatTemplate, RaiseException) {
  const std::string source =
      "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% endfor %}ok";
  Json bad = {{"messages", Json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])")}};
  EXPECT_EQ(render(source, bad),
            "error: chat template: raise_exception: Conversation roles must alternate user/assistant/user/assistant/...");
  Json good = {{"messages", Json::parse(R"([{"role": "user", "content": "a"}])")}};
  EXPECT_EQ(render(source, good), "ok");
}

TEST(ChatTemplate, ErrorsNameTheConstructAndPosition) {
  EXPECT_EQ(render("ab\n  {{ x | foo }}"), "error: chat template: unsupported filter 'foo' at 2:10");
  EXPECT_EQ(render("{{ x is prime }}"), "error: chat template: unsupported test 'prime' at 1:9");
  EXPECT_EQ(render("{% include 'other.jinja' %}"), "error: chat template: unsupported statement 'include' at 1:4");
  EXPECT_EQ(render("x {{ y "), "error: chat template: unterminated '{{' (no matching '}}') at 1:3");
  EXPECT_EQ(render("{% if x "), "error: chat template: unterminated '{%' (no matching '%}') at 1:1");
  EXPECT_EQ(render("{# never closed"), "error: chat template: unterminated comment at 1:1");
  EXPECT_EQ(render("{{ 'abc }}"), "error: chat template: unterminated string literal at 1:4");
  EXPECT_EQ(render("{% for x in y %}body"),
            "error: chat template: unexpected end of template, expected 'else' or 'endfor' to close the block at 1:1");
  EXPECT_EQ(render("{% endif %}"), "error: chat template: unexpected 'endif' at 1:4");
  EXPECT_EQ(render("{% break %}"), "error: chat template: 'break' outside a loop at 1:4");
  EXPECT_EQ(render("{{ 1 + }}"), "error: chat template: unexpected '}}' at 1:8");
  EXPECT_EQ(render("{{ a.b.c }}"), "error: chat template: 'a' is undefined at 1:5");
  EXPECT_EQ(render("{{ 1 + 'a' }}"), "error: chat template: unsupported operand type(s) for +: 'int' and 'str' at 1:6");
  EXPECT_EQ(render("{% set l = [1] %}{{ l.append(2) }}").rfind("error: chat template: access to attribute 'append'", 0), 0u);
  // Unknown filters inside an if only fail when they run (jinja2 does the same).
  EXPECT_EQ(render("{% if false %}{{ x | foo }}{% endif %}ok"), "ok");
  EXPECT_EQ(render("{% if true %}{{ x | foo }}{% endif %}"), "error: chat template: unsupported filter 'foo' at 1:21");
}

TEST(ChatTemplate, LimitsStopRunawayTemplates) {
  EXPECT_EQ(render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").rfind(
                "error: chat template: macro calls nested deeper than 64", 0),
            0u);
  ChatTemplateLimits small;
  small.max_output_bytes = 1000;
  EXPECT_EQ(render("{% for i in range(1000) %}xx{% endfor %}", Json::object(), small),
            "error: chat template: rendered output exceeds the limit of 1000 bytes");
  EXPECT_EQ(render("{{ 'x' * 5000 }}", Json::object(), small).rfind("error: chat template: string repetition exceeds", 0), 0u);
  small.max_loop_iterations = 500;
  EXPECT_EQ(render("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", Json::object(), small),
            "error: chat template: more than 500 loop iterations at 1:26");
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
                   Json::object(), small)
                .rfind("error: chat template: more than 500 loop iterations and macro calls (calling 'f') at 1:", 0),
            0u);
  EXPECT_EQ(render("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}")
                .rfind("error: chat template: list exceeds the limit of 1048576 items", 0),
            0u);
  EXPECT_EQ(render("{{ range(1000000) | length }}").rfind("error: chat template: range too big", 0), 0u);
  // A string that grows geometrically without being printed (each repr of the namespace escapes
  // the last one's quotes) stops where a filter or method makes it too long, not at print time
  // (a fuzzing finding: 62 s of rendering before).
  small.max_loop_iterations = 1'000'000;
  const std::string doubling = "{% set ns = namespace(s=\"'\") %}{% for i in range(60) %}{% set ns.s = ns | ";
  EXPECT_EQ(render(doubling + "string %}{% endfor %}", Json::object(), small)
                .rfind("error: chat template: filter 'string' made a string of ", 0),
            0u);
  const std::string by_method = render(
      "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = '{}{}'.format(ns.s, ns.s) %}{% endfor %}",
      Json::object(), small);
  EXPECT_EQ(by_method.rfind("error: chat template: 'format' made a string of ", 0), 0u) << by_method;
  small.max_template_bytes = 10;
  EXPECT_EQ(render("{{ 'this is too long' }}", Json::object(), small).rfind("error: chat template is 24 bytes, over the limit of 10", 0), 0u);
  EXPECT_EQ(render("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").rfind(
                "error: chat template: expression nested too deeply", 0),
            0u);
  EXPECT_EQ(render(std::string(3000, '[') + std::string(3000, ']')), std::string(3000, '[') + std::string(3000, ']'));
  std::string deep;
  for (int i = 0; i < 500; ++i) deep += "{% if true %}";
  EXPECT_NE(render(deep).find("nested too deeply"), std::string::npos);
}

TEST(ChatTemplate, ContextMustBeAnObject) {
  auto tmpl = ChatTemplate::parse("x");
  ASSERT_TRUE(tmpl.is_ok());
  EXPECT_FALSE(tmpl->render(Json::array()).is_ok());
}

// Mutated templates and contexts never crash or hang: each render returns text or an error.
TEST(ChatTemplate, MutatedTemplatesFailCleanly) {
  const std::string seeds[] = {
      "{% for m in messages %}{{ loop.index }}{{ m.role | upper }}{% if m.content is string %}{{ m.content[1:] }}"
      "{% endif %}{% endfor %}{{ messages | tojson(indent=2) }}",
      "{% set ns = namespace(a=[]) %}{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{% for i in range(3) %}"
      "{% set ns.a = ns.a + [f(i)] %}{% endfor %}{{ ns.a | join(', ') }}{{ raise_exception('x') if false }}",
      "{%- if a -%} {{ b.split(',')[0] | trim }} {%- elif c %}{{ d | default('e') }}{% else %}{# c #}{% endif %}"};
  const std::string alphabet = "{}%#-+|.,:()[]'\"\\ \nabxyz0129=<>!~*/";
  std::mt19937 rng(1234);
  Json context = {{"messages", two_turns()}, {"a", true}, {"b", "x,y"}};
  int rendered = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string source = seeds[i % 3];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % (source.size() + 1);
      switch (rng() % 3) {
        case 0: source.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
        case 1: if (pos < source.size()) source.erase(pos, 1); break;
        default: if (pos < source.size()) source[pos] = alphabet[rng() % alphabet.size()];
      }
    }
    ChatTemplateLimits limits;
    limits.max_output_bytes = 1 << 16;
    limits.max_loop_iterations = 10000;
    auto tmpl = ChatTemplate::parse(source, limits);
    if (!tmpl.is_ok()) {
      EXPECT_FALSE(tmpl.status().message().empty());
      continue;
    }
    auto text = tmpl->render(context);
    if (text.is_ok()) ++rendered;
  }
  EXPECT_GT(rendered, 100);
}

// Finding (fuzz_chat_template, tests/data/fuzz/chat_template/namespace-holding-itself-printed):
// a namespace assigned into itself was printed by endless recursion (a stack overflow). Now as
// Python's repr prints a container that holds itself; the same object compares equal to itself.
TEST(ChatTemplateCycles, AContainerHoldingItselfPrintsLikePython) {
  EXPECT_EQ(render("{% set ns = namespace(n=0, s='') %}{% set ns.n = ns %}{{ ns.n }}|{{ ns }}"),
            "<Namespace {'n': <Namespace {...}>, 's': ''}>|<Namespace {'n': <Namespace {...}>, 's': ''}>");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% set ns.n = ns %}{{ ns == ns.n }}"), "True");
}

}  // namespace
}  // namespace bitsplit
