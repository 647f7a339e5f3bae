// Language features of the chat-template interpreter, each checked against the output of
// Python jinja2 3.1 configured as Hugging Face transformers configures it (the expected strings
// below were produced by that reference; a null expectation means jinja2 raises an error).
#include <catch2/catch.hpp>

#include "engine/chat_template/chat_template.h"
#include "tests/support/test_files.h"

using pagoda::ChatTemplate;
using pagoda::ChatTemplateError;

namespace {

struct Row {
  const char* source;
  const char* expected;  // nullptr: rendering (or parsing) must throw ChatTemplateError
};

ChatTemplate::Inputs sample_inputs() {
  ChatTemplate::Inputs in;
  in.messages_ordered = nlohmann::ordered_json::parse(
      R"([{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"bye"}])");
  in.now = pagoda::testing::chat_testdata_now();
  return in;
}

std::string render(const char* source) { return ChatTemplate(source).render(sample_inputs()); }

const Row kRenders[] = {
    {"{% if false %}{{ x | nosuchfilter }}{% endif %}", ""},
    {"{{ 'a' }}  {{ \"b\" }}", "a  b"},
    {"Hello {{ messages[0].content }}!", "Hello hi!"},
    {"{% if true %}\n  yes\n{% endif %}", "  yes\n"},
    {"  {% if true %}\n  x\n  {% endif %}\n  done", "  x\n  done"},
    {"{%- if true -%}   a   {%- endif -%}  b", "ab"},
    {"a  {{- ' b ' -}}  c", "a b c"},
    {"{%+ if true %}k{% endif %}", "k"},
    {"{# comment #}", ""},
    {"x {#- c -#} y\n  {# c #}\nz", "xy\nz"},
    {"{% raw %}{{ not }} {% evaluated %}{% endraw %}", "{{ not }} {% evaluated %}"},
    {"{% for x in [1,2,3] %}{{ x }}{% if not loop.last %}, {% endif %}{% endfor %}", "1, 2, 3"},
    {"{% for x in [] %}a{% else %}empty{% endfor %}", "empty"},
    {"{% for x in [1,2,3,4,5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", "13"},
    {"{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|"},
    {"{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", "-2;1-3;2-;"},
    {"{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}", "a=1 b=2 "},
    {"{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}={{ v }} {% endfor %}", "a=1 b=2 "},
    {"{% for k in {'z': 1, 'a': 2} %}{{ k }}{% endfor %}", "za"},
    {"{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }} {% endfor %}", "15 35 55 75 95 "},
    {"{% for a in [1,2] %}{% for b in [3,4] %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{% endfor %}", "131 142 231 242 "},
    {"{% set x = 1 %}{% for i in [1,2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", "231"},
    {"{% set ns = namespace(total=0, s='') %}{% for i in [1,2,3] %}{% set ns.total = ns.total + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.total }} {{ ns.s }}", "6 123"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = [3, 4] %}{{ c + d }}", "127"},
    {"{% set x %}captured {{ 1 + 1 }}{% endset %}[{{ x }}]", "[captured 2]"},
    {"{% set x | upper %}shout{% endset %}{{ x }}", "SHOUT"},
    {"{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Bob') }} {{ greet('Al', greeting='Hi') }} {{ greet('X', 'Yo') }}", "Hello, Bob! Hi, Al! Yo, X!"},
    {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}", "54321"},
    {"{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inner {{ 1 }}{% endcall %}", "<inner 1>"},
    {"{% macro m(a) %}{{ a }}|{{ b }}{% endmacro %}{{ m() }}", "|"},
    {"{% filter upper %}hello {{ 'world' }}{% endfilter %}", "HELLO WORLD"},
    {"{{ \"a\\tb\\\\n\\x41\\u00e9\" }}|{{ 'it\\'s' }}|{{ \"q\\\"q\" }}", "a\tb\\nAé|it's|q\"q"},
    {"{{ 1 }} {{ -1 }} {{ 1.5 }} {{ 1e3 }} {{ 2.0 }} {{ 10 / 4 }} {{ 10 // 4 }} {{ -10 // 4 }} {{ 10 % 3 }} {{ -10 % 3 }} {{ 2 ** 8 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", "1 -1 1.5 1000.0 2.0 2.5 2 -3 1 2 256 0.5 3.0 0.5"},
    {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ** 2 }} {{ -2 ** 2 }} {{ 1 - 2 - 3 }} {{ 100 / 10 / 5 }}", "7 9 18 4 -4 2.0"},
    {"{{ 'a' ~ 1 ~ none ~ true ~ [1] }}", "a1NoneTrue[1]"},
    {"{{ 'ab' * 3 }}{{ [0] * 3 }}{{ 3 * 'x' }}", "ababab[0, 0, 0]xxx"},
    {"{{ [1, 2] + [3] }}{{ (1, 2) + (3,) }}", "[1, 2, 3](1, 2, 3)"},
    {"{{ 1 < 2 }} {{ 2 < 1 }} {{ 1 <= 1 }} {{ 1 >= 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'abc' < 'abd' }} {{ [1, 2] < [1, 3] }}", "True False True False True True True False True True"},
    {"{{ 'b' in 'abc' }} {{ 'x' not in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}", "True True True True True"},
    {"{{ true and false }} {{ true or false }} {{ not true }} {{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or [] }} {{ '' and 1 }}", "False True False x y [] "},
    {"{{ 'yes' if true else 'no' }} {{ 'yes' if false else 'no' }} {{ 'a' if false }}|", "yes no |"},
    {"{{ none }} {{ None }} {{ true }} {{ True }} {{ false }} {{ False }}", "None None True True False False"},
    {"{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}, (1,), ()] }}", "[1, 'a', None, True, 1.5, [2], {'k': 'v'}, (1,), ()]"},
    {"{{ {'a': 1, 'b': [1, 2], 'c': {'d': none}} }}", "{'a': 1, 'b': [1, 2], 'c': {'d': None}}"},
    {"{{ {1: 'x', 2.5: 'y', none: 'z', true: 't'} }}", "{1: 't', 2.5: 'y', None: 'z'}"},
    {"{{ messages[0]['role'] }} {{ messages[0].role }} {{ messages.0.content }} {{ messages[-1].content }}", "user user hi bye"},
    {"{{ messages[0].missing }}|{{ messages[5] }}|{{ messages[0].missing is defined }}|{{ undefined_thing is defined }}|{{ undefined_thing is undefined }}", "||False|False|True"},
    {"{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ 'hello'[-3:] }} {{ 'hello'[:-1] }} {{ [1,2,3,4,5][::2] }} {{ [1,2,3,4,5][-2:] }} {{ [1,2,3,4,5][4:1:-1] }} {{ [1,2,3][10:] }} {{ 'héllo'[1] }} {{ 'héllo'[1:3] }}", "el olleh llo hell [1, 3, 5] [4, 5] [5, 4, 3] [] é él"},
    {"{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ '  x  '.strip() }}|{{ '  x  '.lstrip() }}|{{ '  x  '.rstrip() }}|{{ 'abcba'.strip('ab') }}", "x|a|x|x  |  x|c"},
    {"{{ 'Hello World'|upper }} {{ 'Hello World'|lower }} {{ 'hello wORLD'|title }} {{ 'hello wORLD'|capitalize }} {{ 'grüße'|upper }} {{ 'ÀÉÎ'|lower }}", "HELLO WORLD hello world Hello World Hello world GRÜSSE àéî"},
    {"{{ [1, 2, 3]|length }} {{ 'héllo'|length }} {{ {'a': 1}|length }} {{ [1,2]|count }}", "3 5 1 2"},
    {"{{ [1, 2, 3]|join }} {{ [1, 2, 3]|join(', ') }} {{ messages|join(',', attribute='role') }}", "123 1, 2, 3 user,assistant,user"},
    {"{{ undefined_thing|default('dflt') }} {{ ''|default('dflt') }} {{ ''|default('dflt', true) }} {{ none|d('x', boolean=true) }} {{ 0|default(5) }}", "dflt  dflt x 0"},
    {"{{ [3, 1, 2]|first }} {{ [3, 1, 2]|last }} {{ 'abc'|first }} {{ 'abc'|last }}", "3 2 a c"},
    {"{{ [1, 2, 3]|map('string')|join('-') }} {{ messages|map(attribute='role')|list }} {{ [[1], [2, 3]]|map('length')|list }} {{ ['a', 'B']|map('upper')|list }}", "1-2-3 ['user', 'assistant', 'user'] [1, 2] ['A', 'B']"},
    {"{{ [1, 2, 3, 4]|select('even')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ [1, 5, 10]|select('gt', 3)|list }} {{ [1, 2, 3]|select('in', [2, 3])|list }}", "[2, 4] [1, 3] [1, 'a'] [5, 10] [2, 3]"},
    {"{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'eq', 'user')|list }} {{ [{'a': 1}, {'a': 0}, {}]|selectattr('a')|list }}", "2 [{'role': 'assistant', 'content': 'hello'}] [{'a': 1}]"},
    {"{{ 'abc'|list }} {{ {'x': 1}|list }} {{ 42|string ~ '!' }} {{ '42'|int + 1 }} {{ '0x1A'|int(0, 16) }} {{ 'abc'|int }} {{ 'abc'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 'x'|float }} {{ 3|float }}", "['a', 'b', 'c'] ['x'] 42! 43 26 0 7 3 2.5 0.0 3.0"},
    {"{{ -5|abs }} {{ (-2.5)|abs }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(0, 'floor') }} {{ 7|round }}", "5 2.5 2.57 2.0 4.0 3.0 2.0 7"},
    {"{{ 'a-b-c'|replace('-', '+') }} {{ 'a-b-c'|replace('-', '+', 1) }} {{ 'a-b'.replace('-', '') }} {{ 'aaa'.replace('a', 'b', 2) }}", "a+b+c a+b-c ab bba"},
    {"{{ 'x'|safe }} {{ [1, 2, 1, 3, 2]|unique|list }} {{ ['a', 'A', 'b']|unique|list }} {{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ messages|sort(attribute='role')|map(attribute='role')|list }}", "x [1, 2, 3] ['a', 'b'] [1, 2, 3] [3, 2, 1] ['A', 'b', 'c'] ['A', 'b', 'c'] ['assistant', 'user', 'user']"},
    {"{{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }} {{ {'b': 1, 'a': 2}|dictsort(reverse=true) }}", "[3, 2, 1] cba [('a', 2), ('b', 1)] [('b', 1), ('a', 2)] [('b', 1), ('a', 2)]"},
    {"{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(1, blank=true) }}|{{ 'a\\nb'|indent('> ') }}", "a\n    b\n\n    c|  a\n  b|a\n \n b|a\n> b"},
    {"{{ 'hello big world'|wordcount }} {{ 'one, two;three'|wordcount }} {{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }}", "3 3 [[1, 2], [3, 4], [5]] [[1, 2], [3, 'x']]"},
    {"{{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} {{ [{'n': 1}, {'n': 2}]|sum(attribute='n') }} {{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A']|min }} {{ []|max }}|", "6 3.5 3 1 3 A |"},
    {"{{ {'a': 1}|tojson }} {{ [1, 'x', none, true, 1.5]|tojson }} {{ {'a': [1, {'b': 2}], 'c': {}}|tojson(indent=2) }} {{ 'é\"\\n\\\\'|tojson }} {{ {'x': []}|tojson(indent=4) }} {{ (1, 2)|tojson }}", "{\"a\": 1} [1, \"x\", null, true, 1.5] {\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ],\n  \"c\": {}\n} \"é\\\"\\n\\\\\" {\n    \"x\": []\n} [1, 2]"},
    {"{{ none is none }} {{ 1 is none }} {{ 'a' is string }} {{ 1 is string }} {{ 1 is number }} {{ 1.5 is number }} {{ 1 is integer }} {{ 1.5 is integer }} {{ 1.5 is float }} {{ true is boolean }} {{ 1 is boolean }}", "True False True False True True True False True True False"},
    {"{{ true is true }} {{ 1 is true }} {{ false is false }} {{ {} is mapping }} {{ [] is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ [] is sequence }} {{ 1 is sequence }}", "True False True True False True True False True False"},
    {"{{ range is callable }} {{ 1 is callable }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 1 is gt 2 }} {{ 2 is le 2 }} {{ 2 is ge 3 }} {{ 2 is in [1, 2] }} {{ 1 is not none }}", "True False True True True False True False True True False True False True True"},
    {"{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.split(',', maxsplit=1) }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith(('x', 'a')) }}", "['a', 'b', '', 'c'] ['a', 'b', 'c'] ['a', 'b c'] ['a', 'b,c'] True True True"},
    {"{{ 'hello'.upper() }} {{ 'HELLO'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ '{} + {} = {}'.format(1, 2, 3) }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='x') }} {{ '{{}}'.format() }}", "HELLO hello Hello World Hello 1 + 2 = 3 aba x! {}"},
    {"{{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ ', '.join(['a', 'b']) }} {{ 'héllo'.find('l') }}", "2 -1 2 a, b 2"},
    {"{{ {'a': 1}.keys()|list }} {{ {'a': 1}.values()|list }} {{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b') }} {{ {'a': 1}.get('b', 'dflt') }} {{ [1, 2, 3].index(2) }}", "['a'] [1] 1 None dflt 1"},
    {"{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }}", "[0, 1, 2] [1, 2, 3] [10, 7, 4, 1] []"},
    {"{{ strftime_now('%Y-%m-%d %H:%M:%S') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%A %B') }}", "2026-07-26 12:00:00 26 Jul 2026 Sunday July"},
    {"{{ bos_token }}{{ eos_token }}{{ add_generation_prompt }}", "<s></s>True"},
    {"{{ 'Hello %s, you are %d' % ('Bob', 30) }} {{ '%s' % 'x' }}", "Hello Bob, you are 30 x"},
    {"{{ 'abc' ~ 'def' 'ghi' }}", "abcdefghi"},
    {"{% if messages %}has{% elif false %}no{% else %}else{% endif %} {% if [] %}a{% elif 0 %}b{% else %}c{% endif %}", "has c"},
    {"{%- for m in messages -%}\n    {{ m.role }}\n{%- endfor %}", "userassistantuser"},
    {"{% for m in messages %}\n  {{ m.role }}\n{% endfor %}", "  user\n  assistant\n  user\n"},
    {"   {%- set x = 1 -%}\n   [{{ x }}]", "[1]"},
    {"{% if true %}\n    {{ 'indented' }}\n{% endif %}", "    indented\n"},
    {"line1\n    {% set y = 2 %}\nline2 {{ y }}\n  {{ 'var' }}  {% if true %}x{% endif %}", "line1\nline2 2\n  var  x"},
    {"{{ (1, 2)[0] }} {{ [[1, 2], [3]][0][1] }} {{ {'a': {'b': 'deep'}}.a.b }} {{ {'a': {'b': 'deep'}}['a']['b'] }}", "1 2 deep deep"},
    {"{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1 / 3 }} {{ 2 / 2 }} {{ -0.0 }} {{ 123456789.125 }}", "1.0 0.30000000000000004 1e+20 1e+16 1000000000000000.0 0.0001 1e-05 0.3333333333333333 1.0 -0.0 123456789.125"},
    {"{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'back\\\\slash', 'nl\\n'] }}", "[\"it's\", 'say \"hi\"', 'both \\' \"', 'back\\\\slash', 'nl\\n']"},
    {"{{ messages }}", "[{'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': 'hello'}, {'role': 'user', 'content': 'bye'}]"},
    {"{% set l = [1, 2] %}{% set l2 = l + [3] %}{{ l }}{{ l2 }}", "[1, 2][1, 2, 3]"},
    {"{{ loop is defined }}{% for x in [1] %}{{ loop is defined }}{% endfor %}", "FalseTrue"},
    {"{% for x in [[1, 'a'], [2, 'b']] %}{% for n, c in [x] %}{{ n }}{{ c }}{% endfor %}{% endfor %}", "1a2b"},
    {"{{ {'role': 'user'}.role }} {{ {'items': 5}['items'] }}", "user 5"},
    {"{% set d = {'k': 'v'} %}{{ d.k }}{{ d['k'] }}{{ d.get('k') }}", "vvv"},
    {"{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{% endfor %}", "aba"},
    {"{% for m in messages %}\n{%- if m.role == 'user' %}\n  U: {{ m.content }}\n{% else %}\n  A: {{ m.content }}\n{% endif %}\n{%- endfor %}", "  U: hi\n  A: hello\n  U: bye\n"},
    {"{% macro render(x) -%}\n  [{{ x }}]\n{%- endmacro %}\n{{ render(1) }}\n{{- render(2) }}", "[1][2]"},
    {"{%raw%}  {{x}}\n{%endraw%}\nafter", "  {{x}}\nafter"},
    {"text   \n   {%- if true %} a {% endif %}\n  {%+ if true %}b{% endif %}\n\t{% if true %}tab{% endif %}", "text a   btab"},
    {"{{ [1, 2]|join(',', attribute='x') }}", ","},
    {"{{ {'b': 1, 'a': [1, 'é']}|tojson(sort_keys=true) }}|{{ {'b': 1, 'a': [1, 'é']}|tojson(separators=(',', ':')) }}|{{ {'b': 1, 'a': [1, 'é😀']}|tojson(ensure_ascii=true, indent=1) }}|{{ {2: 1, 1: 2}|tojson(sort_keys=true) }}|{{ 'é'|tojson(2) }}", "{\"a\": [1, \"é\"], \"b\": 1}|{\"b\":1,\"a\":[1,\"é\"]}|{\n \"b\": 1,\n \"a\": [\n  1,\n  \"\\u00e9\\ud83d\\ude00\"\n ]\n}|{\"1\": 2, \"2\": 1}|\"\\u00e9\""},
    {"{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}|{% with %}{% set q = 1 %}{{ q }}{% endwith %}{{ q }}", "3|1"},
    {"{{ 'a,b,c'|title }} {{ 'hello-world (foo) [bar]'|title }} {{ 7.5 // 2 }} {{ 1e3 // 0.1 }} {{ -7.5 // 2 }} {{ 3.0 is odd }} {{ 4.0 is divisibleby 2 }} {{ true|safe ~ 1 }} {{ (undefined_thing is callable) }}", "A,b,c Hello-World (Foo) [Bar] 3.0 9999.0 -4.0 True True True1 True"},
    {"{{ [1, 2] < [1, 2, 3] }} {{ 'abc' % [] }} {{ '%s' % [1] }} {{ 0.5|round }} {{ 1.5|round }} {{ -2.5|round }} {{ 2.675|round(2) }}", "True abc [1] 0.0 2.0 -2.0 2.67"},
    {"{{ 'a</think>b</think>c'.rsplit('</think>', 1) }} {{ 'a b  c '.rsplit(None, 1) }} {{ '  a b c'.rsplit(maxsplit=1) }} {{ 'a,b,c'.rsplit(',') }} {{ 'abc'.rsplit('x', 1) }} {{ ',a,'.rsplit(',', 5) }} {{ 'aaa'.rsplit('aa', 1) }}", "['a</think>b', 'c'] ['a b', 'c'] ['  a b', 'c'] ['a', 'b', 'c'] ['abc'] ['', 'a', ''] ['a', '']"},
    {"{% for x in [] %}{% else %}{% set q = 1 %}{{ q }}{% endfor %}[{{ q }}] {% for x in [1,2,3] %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% else %}E{% endfor %} {% for x in [1,2,3] %}{{ x }}{% if x == 3 %}{% continue %}{% endif %}{% else %}E{% endfor %} {% for m in [1,2] %}a{% break %}{% else %}E{% endfor %}", "1[] 23 123 aE"},
    {"{{ [undefined_var, 1] }} {{ {'a': undefined_var} }} {{ undefined_var }}", "[Undefined, 1] {'a': Undefined} "},
    {"{% macro m(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1) }}{{ m(1, 2, 3, x=4) }}|{% macro o() %}{% macro n() %}{{ varargs }}{% endmacro %}{% endmacro %}{{ o(1) }}", "(){}(2, 3){'x': 4}|"},
    {"{% set y %}{% set x = 1 %}{% endset %}[{{ x }}] {% filter upper %}{% set x = 1 %}{% endfilter %}[{{ x }}] {% set ns = namespace(a=0) %}{% set y %}{% set ns.a = 1 %}{% endset %}[{{ ns.a }}] {% set x = 0 %}{% set y %}{% set x = x + 1 %}{{ x }}{% endset %}[{{ x }}{{ y }}]", "[] [] [1] [01]"},
    {"{% for m in [1,2] %}a{% filter upper %}b{% continue %}{% endfilter %}c{% endfor %} {% for m in [1,2] %}a{% set y %}b{% break %}{% endset %}c{{ y }}{% endfor %}[{{ y }}]", "aa a[]"},
    // Recursive loops, loop.changed and printf-style formatting (hand-written, checked against jinja2).
    {"{% for x in [{'n':1,'c':[{'n':2,'c':[]},{'n':3,'c':[{'n':4,'c':[]}]}]}] recursive %}[{{ x.n }}@{{ loop.depth }}/{{ loop.depth0 }}{{ loop(x.c) }}]{% endfor %}",
     "[1@1/0[2@2/1][3@2/1[4@3/2]]]"},
    {"{% for x in [{'n':1,'c':[]}] recursive %}[{{ x.n }}{{ loop(x.c) }}]{% else %}E{% endfor %}",
     "[1E]"},
    {"{% for x in [{'n':1,'c':[{'n':2}]}] recursive %}{{ x.n }}{{ loop.index }}{{ loop.length }}{{ loop.first }}({{ loop(x.c) }}){% endfor %}",
     "111True(211True())"},
    {"{% set ns = namespace(total=0) %}{% for x in [{'v':1,'c':[{'v':2,'c':[{'v':3}]}]}] recursive %}{% set ns.total = ns.total + x.v %}{{ loop(x.c) if x.c }}{% endfor %}{{ ns.total }}",
     "6"},
    {"{% for x in [{'n':1,'c':[{'n':2,'c':[]}, {'n':3,'c':[]}]}] recursive %}{% if x.n == 2 %}{% break %}{% endif %}{{ x.n }}[{{ loop(x.c) }}]{% endfor %}",
     "1[]"},
    {"{% set y = 'outer' %}{% for x in [{'n':1,'c':[{'n':2}]}] recursive %}{{ y }}{% set y = x.n %}{{ y }}{{ loop(x.c) if x.c }}{% endfor %}",
     "outer1outer2"},
    {"{% for k, v in {'a': {'b': {}}}.items() recursive %}<{{ k }}{{ loop(v.items()) }}>{% endfor %}",
     "<a<b>>"},
    {"{% for x in [1, 2, 3] if x % 2 == 1 recursive %}{{ x }}{% if x < 10 %}({{ loop([x + 10, x + 11]) }}){% endif %}{% endfor %}",
     "1(11)3(13)"},
    {"{% for x in [{'c':[1,2]}] recursive %}{% for y in x.c %}{{ loop.depth }}{% endfor %}{% endfor %}",
     "11"},
    {"{% for x in [1,1,2,3,3] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}|{% for x in [1,1,2] %}{{ loop.changed(x, 1) }}{{ loop.changed(x, 1) }}{% endfor %}",
     "123|TrueFalseFalseFalseTrueFalse"},
    {"{{ '%s and %d' % ('a', 3) }}|{{ '%.2f' % 3.14159 }}|{{ '%05d|%-4s|%x' % (42, 'ab', 255) }}",
     "a and 3|3.14|00042|ab  |ff"},
    {"{{ '%x|%X|%#x|%#o|%o|%+d|% d|%5.3d|%-6d|%06d' % (-255, 255, 255, 8, -8, 5, 5, 7, -3, -42) }}",
     "-ff|FF|0xff|0o10|-10|+5| 5|  007|-3    |-00042"},
    {"{{ '%e|%E|%g|%G|%10.3f|%-10.2e|%+.1f|%010.2f|%#g|%.0f|%.3g' % (12345.678, 0.00012, 1e-5, 1e20, 3.14159, 2.5, 2.25, -3.5, 1.0, 2.5, 1234567) }}",
     "1.234568e+04|1.200000E-04|1e-05|1E+20|     3.142|2.50e+00  |+2.2|-000003.50|1.00000|2|1.23e+06"},
    {"{{ '%5s|%-5s|%.2s|%5.1s|%r|%a|%c|%c|%%|%3c' % ('é', 'ab', 'héllo', 'xyz', 'q', 'é', 65, 'z', 'w') }}",
     "    é|ab   |hé|    x|'q'|'\\xe9'|A|z|%|  w"},
    {"{{ '%(a)s-%(b)05.1f' % {'a': 'x', 'b': 2.25} }}|{{ '%s' % [1, 2] }}|{{ '%d' % true }}|{{ '%i' % 3.9 }}|{{ '%*d|%-*d|%.*f' % (5, 1, 4, 2, 2, 3.14159) }}",
     "x-002.2|[1, 2]|1|3|    1|2   |3.14"},
    {"{{ '%s|%s'|format(1, 'b') }}|{{ '%(x)s'|format(x=3) }}|{{ '%5.1f%%'|format(99.456) }}|{{ '%5.1f|%05.1f' % (1e400, -1e400) }}",
     "1|b|3| 99.5%|  inf|-0inf"},
    // cycler, joiner, groupby, center, slice, truncate, 0x/0o/0b literals (checked against jinja2).
    {"{% set c = cycler('a', 'b') %}{{ c.current }}{{ c.next() }}{{ c.next() }}{{ c.current }}{{ c.next() }}{{ c.reset() }}{{ c.next() }}|{% set j = joiner('/') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %}|{% set j2 = joiner() %}{{ j2() }}{{ j2() }}{{ j2() }}",
     "aabaaNonea|1/2/3|, , "},
    {"{% for g in messages|groupby('role') %}{{ g.grouper }}:{{ g.list|length }} {% endfor %}|{% for role, items in messages|groupby('role') %}{{ role }}={{ items|map(attribute='content')|join(',') }};{% endfor %}",
     "assistant:1 user:2 |assistant=hello;user=hi,bye;"},
    {"{{ [{'k': 'A'}, {'k': 'a'}, {'k': 'b'}]|groupby('k')|list }}|{{ [{'k': 'A'}, {'k': 'a'}, {'k': 'b'}]|groupby('k', case_sensitive=true)|list }}|{{ [{'k': 1}, {}, {'k': 1}]|groupby('k', default=0)|map(attribute='grouper')|list }}|{{ [[1, 'x'], [0, 'y'], [1, 'z']]|groupby(0)|list }}",
     "[('A', [{'k': 'A'}, {'k': 'a'}]), ('b', [{'k': 'b'}])]|[('A', [{'k': 'A'}]), ('a', [{'k': 'a'}]), ('b', [{'k': 'b'}])]|[0, 1]|[(0, [[0, 'y']]), (1, [[1, 'x'], [1, 'z']])]"},
    {"{{ 'Hello'|center(11) }}.|{{ 'Hi'|center(7) }}.|{{ 'Hi'|center(6) }}.|{{ 'Hello'|center(3) }}|{{ 'é'|center(4) }}.",
     "   Hello   .|   Hi  .|  Hi  .|Hello| é  ."},
    {"{{ [1, 2, 3, 4, 5]|slice(2)|list }}|{{ [1, 2, 3, 4, 5]|slice(3, 0)|list }}|{{ [1, 2]|slice(4)|list }}|{{ []|slice(2)|list }}",
     "[[1, 2, 3], [4, 5]]|[[1, 2], [3, 4], [5, 0]]|[[1], [2], [], []]|[[], []]"},
    {"{{ 'abc'|truncate(3) }}|{{ 'a long sentence here indeed'|truncate(9) }}|{{ 'a long sentence here indeed'|truncate(9, true) }}|{{ 'a long sentence here indeed'|truncate(12, end='~') }}|{{ 'abcdefghijkl'|truncate(5, leeway=0) }}|{{ 'abcdefgh'|truncate(5) }}",
     "abc|a...|a long...|a long~|ab...|abcdefgh"},
    {"{{ 0x10 }}|{{ 0o17 }}|{{ 0b101 }}|{{ 0xFF_FF }}|{{ 1_000 + 0X1 }}|{{ 0 }}",
     "16|15|5|65535|1001|0"},
    // str.format with the format-spec mini-language (checked against jinja2).
    {"{{ '{:.2f}|{:>5}|{:<4}|{:^5}|{:05d}|{:,}|{!r}'.format(3.14159, 'ab', 'c', 'd', 42, 1234567, 'q') }}",
     "3.14|   ab|c   |  d  |00042|1,234,567|'q'"},
    {"{{ '{:.3}|{:.3}|{:.3}|{:.3}|{:.6}|{}|{:.2}|{:.2}|{:.1}|{:.0}|{:.2}'.format(123.0, 12.0, 1.0, 0.0001, 1234.5678, 1e16, 1e-5, 100.0, 0.5, 1.0, -0.0) }}",
     "1.23e+02|12.0|1.0|0.0001|1234.57|1e+16|1e-05|1e+02|0.5|1e+00|-0.0"},
    {"{{ '{:,.1f}|{:_}|{:#_x}|{:010,}|{:=+6}|{:*^7}|{:>5}|{}|{:%}|{:.1%}|{:10}|{:^6}|{:c}'.format(12345.0, 1234567, 255, 1234, -5, 3, true, true, 2.5, 0.125, 1.5, 'ab', 65) }}",
     "12,345.0|1_234_567|0xff|00,001,234|-    5|***3***|    1|True|250.000000%|12.5%|       1.5|  ab  |A"},
    {"{{ '{:+G}|{:.2f}|{:e}|{:n}|{:n}|{:b}|{:#o}|{:X}|{:#X}|{: d}|{:+.1e}'.format(1.5, 3, 42, 5, 1.5, 10, 8, 255, 255, 7, -12345.678) }}",
     "+1.5|3.00|4.200000e+01|5|1.5|1010|0o10|FF|0XFF| 7|-1.2e+04"},
    {"{{ '{0}{1}{0}|{name}!|{0[role]}|{0.role}|{1[0]}|{m[1]}|{0.nope}'.format(messages[0], [9], name='x', m='ab') }}",
     "{'role': 'user', 'content': 'hi'}[9]{'role': 'user', 'content': 'hi'}|x!|user|user|9|b|"},
    {"{{ '{:{w}}|{:>{w}.{p}f}|{{x}}|{!s:>4}|{!a}'.format('a', 3.14159, 7, 'é', w=4, p=2) }}",
     "a   |3.14|{x}|   7|'\\xe9'"},
    {"{{ '{}'.format(none) }}|{{ '{:+}'.format(2.0) }}|{{ '{:-^9,}'.format(-1234) }}|{{ '{:08.3f}'.format(-3.14159) }}|{{ '{:#.3g}'.format(2.0) }}|{{ '{:#}'.format(2.0) }}",
     "None|+2.0|--1,234--|-003.142|2.00|2.0"},
};

const Row kErrors[] = {
    {"{% if true %}", nullptr},  // TemplateSyntaxError: Unexpected end of template. Jinja was looking for the following tags: 'elif' or 'else' or 'endif'. The innermost block that needs to be closed is 'if'.
    {"{% endif %}", nullptr},  // TemplateSyntaxError: Encountered unknown tag 'endif'.
    {"{% for x in y %}", nullptr},  // TemplateSyntaxError: Unexpected end of template. Jinja was looking for the following tags: 'endfor' or 'else'. The innermost block that needs to be closed is 'for'.
    {"{{ 1 + }}", nullptr},  // TemplateSyntaxError: unexpected 'end of print statement'
    {"{{ 'unterminated }}", nullptr},  // TemplateSyntaxError: unexpected char "'" at 3
    {"{{ x | nosuchfilter }}", nullptr},  // TemplateAssertionError: No filter named 'nosuchfilter'.
    {"{{ x is nosuchtest }}", nullptr},  // TemplateAssertionError: No test named 'nosuchtest'.
    {"{% nosuchtag %}", nullptr},  // TemplateSyntaxError: Encountered unknown tag 'nosuchtag'.
    {"{{ raise_exception('boom') }}", nullptr},  // TemplateError: boom
    {"{{ undefined_thing + 1 }}", nullptr},  // UndefinedError: 'undefined_thing' is undefined
    {"{{ undefined_thing.attr }}", nullptr},  // UndefinedError: 'undefined_thing' is undefined
    {"{{ undefined_thing() }}", nullptr},  // UndefinedError: 'undefined_thing' is undefined
    {"{{ 'a' + 1 }}", nullptr},  // TypeError: can only concatenate str (not "int") to str
    {"{{ 1 + 'a' }}", nullptr},  // TypeError: unsupported operand type(s) for +: 'int' and 'str'
    {"{{ [1] + 'a' }}", nullptr},  // TypeError: can only concatenate list (not "str") to list
    {"{{ 1 / 0 }}", nullptr},  // ZeroDivisionError: division by zero
    {"{{ 1 // 0 }}", nullptr},  // ZeroDivisionError: integer division or modulo by zero
    {"{{ 1 % 0 }}", nullptr},  // ZeroDivisionError: integer modulo by zero
    {"{{ none.x.y }}", nullptr},  // UndefinedError: 'None' has no attribute 'x'
    {"{% for x in none %}{% endfor %}", nullptr},  // TypeError: 'NoneType' object is not iterable
    {"{% for x in 5 %}{% endfor %}", nullptr},  // TypeError: 'int' object is not iterable
    {"{{ 1 < 'a' }}", nullptr},  // TypeError: '<' not supported between instances of 'int' and 'str'
    {"{{ none|length }}", nullptr},  // TypeError: object of type 'NoneType' has no len()
    {"{% set l = [] %}{{ l.append(1) }}", nullptr},  // SecurityError: access to attribute 'append' of 'list' object is unsafe.
    {"{% set d = {} %}{{ d.update({'a': 1}) }}", nullptr},  // SecurityError: access to attribute 'update' of 'dict' object is unsafe.
    {"{{ range(1000000)|length }}", nullptr},  // OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).
    {"{{ {'a': 1}|tojson(indent=2) ~ undefined_thing|tojson }}", nullptr},  // TypeError: Object of type Undefined is not JSON serializable
    {"{{ 'x'.nosuchmethod() }}", nullptr},  // UndefinedError: 'str object' has no attribute 'nosuchmethod'
    {"{% set a, b = [1, 2, 3] %}", nullptr},  // ValueError: too many values to unpack (expected 2)
    {"{% set x.y = 1 %}", nullptr},  // TemplateRuntimeError: cannot assign attribute on non-namespace object
    {"{{ 1 is divisibleby(0) }}", nullptr},  // ZeroDivisionError: integer modulo by zero
    {"{{ 'a' in 1 }}", nullptr},  // TypeError: argument of type 'int' is not iterable
    {"{{ 1 in 'abc' }}", nullptr},  // TypeError: 'in <string>' requires string as left operand, not int
    {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", nullptr},  // TypeError: macro 'm' takes not more than 1 argument(s)
    {"{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", nullptr},  // TypeError: macro 'm' takes no keyword argument 'b'
    {"{% break %}", nullptr},  // SyntaxError: 'break' outside loop (<template>, line 11)
    {"{{ [1,2][::0] }}", nullptr},  // ValueError: slice step cannot be zero
    {"{{ (1 }}", nullptr},  // TemplateSyntaxError: unexpected '}', expected ')'
    {"{{ 1) }}", nullptr},  // TemplateSyntaxError: unexpected ')'
    {"{{ {'a' 1} }}", nullptr},  // TemplateSyntaxError: expected token ':', got 'integer'
    {"{{ undefined_thing|int }}", nullptr},  // UndefinedError: 'undefined_thing' is undefined
    {"{{ undefined_thing|float }}", nullptr},  // UndefinedError: 'undefined_thing' is undefined
    {"{{ [1]|indent }}", nullptr},  // AttributeError: 'list' object has no attribute 'splitlines'
    {"{{ (1, 2) < [1, 2] }}", nullptr},  // TypeError: '<' not supported between instances of 'tuple' and 'list'
    {"{{ [1] in {'a': 1} }}", nullptr},  // TypeError: unhashable type: 'list'
    {"{{ 0.0 ** -1 }}", nullptr},  // ZeroDivisionError: 0.0 cannot be raised to a negative power
    {"{% with a %}{% endwith %}", nullptr},  // TemplateSyntaxError: expected token '=', got 'end of statement block'
    {"{% generation %}", nullptr},  // TemplateSyntaxError: Encountered unknown tag 'generation'.
    {"{% macro m() %}{{ kwargs }}{% endmacro %}{{ m(1) }}", nullptr},  // TypeError: macro 'm' takes not more than 0 argument(s)
    {"{% macro m() %}{{ varargs }}{% endmacro %}{{ m(k=1) }}", nullptr},  // TypeError: macro 'm' takes no keyword argument 'k'
    {"{% macro w() %}{{ caller() }}{% endmacro %}{% for m in [1] %}{% call w() %}{% continue %}{% endcall %}{% endfor %}", nullptr},  // SyntaxError: 'continue' not properly in loop (<template>, line 27)
    {"{{ '%s %s' % (1,) }}", nullptr},
    {"{{ '%s' % (1, 2) }}", nullptr},
    {"{{ '%d' % 'x' }}", nullptr},
    {"{{ '%q' % 1 }}", nullptr},
    {"{{ '%(a)s' % (1,) }}", nullptr},
    {"{% for x in [1] %}{{ loop([2]) }}{% endfor %}", nullptr},
    {"{% for x in [1] recursive %}{{ loop(1, 2) }}{% endfor %}", nullptr},
    {"{{ 'ab'|truncate(2) }}", nullptr},
    {"{{ [1]|groupby }}", nullptr},
    {"{{ '{}{0}'.format(1) }}", nullptr},
    {"{{ '{:d}'.format('x') }}", nullptr},
    {"{{ '{:s}'.format(1) }}", nullptr},
    {"{{ '{:.2d}'.format(1) }}", nullptr},
    {"{{ '{:d}'.format(1.5) }}", nullptr},
    {"{{ '{:x}'.format(none) }}", nullptr},
    {"{{ '{'.format() }}", nullptr},
};

}  // namespace

TEST_CASE("language features render as jinja2 does") {
  int passed = 0;
  for (const Row& r : kRenders) {
    INFO("template: " << r.source);
    std::string got;
    REQUIRE_NOTHROW(got = render(r.source));
    CHECK(got == r.expected);
    passed += got == r.expected;
  }
  WARN("feature renders matching jinja2: " << passed << " / " << std::size(kRenders));
}

TEST_CASE("transformers' generation block renders its body in its own scope") {
  CHECK(render("a{% generation %}{% set z = 1 %}b{{ z }}{% endgeneration %}c{{ z }}") == "ab1c");
}

TEST_CASE("errors name the line") {
  try {
    render("line 1\n{% if true %}\n{{ messages[0].content + 1 }}\n{% endif %}");
    FAIL("expected an error");
  } catch (const ChatTemplateError& e) {
    CHECK(std::string(e.what()) == "template error at line 3: can only concatenate str (not \"int\") to str");
  }
  try {
    render("a\nb\n{{ 1 + }}");
    FAIL("expected an error");
  } catch (const ChatTemplateError& e) {
    CHECK(std::string(e.what()).find("template syntax error at line 3") == 0);
  }
  try {
    render("{{ raise_exception('Only user and assistant roles are supported') }}");
    FAIL("expected an error");
  } catch (const ChatTemplateError& e) {
    CHECK(std::string(e.what()).find("Only user and assistant roles are supported") != std::string::npos);
  }
}

TEST_CASE("templates jinja2 rejects throw ChatTemplateError") {
  for (const Row& r : kErrors) {
    INFO("template: " << r.source);
    CHECK_THROWS_AS(render(r.source), ChatTemplateError);
  }
}
