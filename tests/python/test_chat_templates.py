"""chorus's Jinja interpreter against Python's jinja2 (the oracle), configured as transformers
renders chat templates: ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop
controls, `tojson` as json.dumps(ensure_ascii=False, ...), raise_exception and strftime_now.

Two corpora, each rendered by both:
  1. real chat templates (tests/data/chat_templates/) on conversations with and without system
     messages, tools, tool calls and results, several turns, add_generation_prompt on and off;
  2. snippets, one per language feature chat templates use (filters, tests, loops, macros,
     namespace, slicing, string methods, whitespace control, Python's printing of values).
Where jinja2 renders, chorus must render the same text, byte for byte; where jinja2 raises,
chorus must fail too, and with the same message when it is the template's raise_exception.

  python tests/python/test_chat_templates.py build/chorus tests/data/chat_templates
"""
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

CHORUS, TEMPLATES = sys.argv[1], sys.argv[2]
failures = []
refused_by_both = 0


class Generation(Extension):
    """transformers' {% generation %} marker: renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


class Raised(Exception):
    pass


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


ENV = environment()


def oracle(source, variables):
    """("text", str) | ("raised", message) | ("error", what)"""
    try:
        return ("text", ENV.from_string(source).render(**variables))
    except Raised as e:
        return ("raised", str(e))
    except Exception as e:  # noqa: BLE001 - any jinja2 failure: chorus must fail too
        return ("error", f"{type(e).__name__}: {e}")


def chorus(source, cases):
    """Renders each case with chorus; a list of ("text", str) | ("error", code, message)."""
    with tempfile.TemporaryDirectory() as d:
        tpath, ipath = os.path.join(d, "t.jinja"), os.path.join(d, "in.json")
        with open(tpath, "w", encoding="utf-8") as f:
            f.write(source)
        with open(ipath, "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=False)
        p = subprocess.run([CHORUS, "template", "--template", tpath, "--input", ipath, "--batch"],
                           capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        return [("error", "load", p.stderr.strip())] * len(cases)
    out = []
    for r in json.loads(p.stdout):
        out.append(("text", r["text"]) if "text" in r else ("error", r["error"]["code"], r["error"]["message"]))
    return out


def compare(label, source, cases):
    got = chorus(source, cases)
    ok = 0
    for k, (case, mine) in enumerate(zip(cases, got)):
        want = oracle(source, case)
        where = f"{label} case {k}"
        if want[0] == "text":
            if mine != want:
                detail = mine[2] if mine[0] == "error" else f"got {mine[1]!r}"
                failures.append(f"{where}: jinja2 rendered {want[1]!r}\n    chorus: {detail}")
                continue
        elif mine[0] != "error":
            failures.append(f"{where}: jinja2 failed ({want[1]}) but chorus rendered {mine[1]!r}")
            continue
        elif want[0] == "raised" and (mine[1] != "invalid_argument" or not mine[2].endswith(want[1])):
            failures.append(f"{where}: the template raised {want[1]!r}; chorus: {mine[1]} {mine[2]!r}")
            continue
        else:
            global refused_by_both
            refused_by_both += 1
        ok += 1
    print(f"  {label}: {ok} of {len(cases)} identical to jinja2")
    return ok


# --- 1. real chat templates -------------------------------------------------------------------

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city, today.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
]
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
CALL_STR = {"id": "call_2", "type": "function",
            "function": {"name": "search", "arguments": "{\"query\": \"café «ouvert»\"}"}}

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Why is the sky blue?"}],
    [{"role": "user", "content": "  Hello\nthere  "}, {"role": "assistant", "content": "Hi! How can I help?"},
     {"role": "user", "content": "Say \"quotes\" and 'apostrophes' and {{ braces }} and ünïcödé ✓"}],
    [{"role": "system", "content": "Be helpful."}, {"role": "user", "content": "1"},
     {"role": "assistant", "content": "2"}, {"role": "user", "content": "3"},
     {"role": "assistant", "content": "4"}],
    [{"role": "user", "content": "Think first."},
     {"role": "assistant", "content": "<think>\nI should answer.\n</think>\n\nThe answer."},
     {"role": "user", "content": "Again?"}],
    [{"role": "user", "content": "What is the weather in Paris?"},
     {"role": "assistant", "content": "", "tool_calls": [CALL]},
     {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21}"},
     {"role": "user", "content": "And look it up."},
     {"role": "assistant", "content": None, "tool_calls": [CALL_STR]},
     {"role": "tool", "tool_call_id": "call_2", "name": "search", "content": "Open daily."}],
    [{"role": "user", "content": [{"type": "text", "text": "Parts "}, {"type": "text", "text": "of text"}]}],
    [{"role": "assistant", "content": "I speak first."}, {"role": "user", "content": "ok"}],
]


def template_cases():
    cases = []
    for conv in CONVERSATIONS:
        for tools in (None, TOOLS):
            for gen in (True, False):
                cases.append({"messages": conv, "tools": tools, "add_generation_prompt": gen,
                              "bos_token": "<s>", "eos_token": "</s>", "date_string": "26 Jul 2024"})
    cases.append({"messages": CONVERSATIONS[4], "tools": None, "add_generation_prompt": True,
                  "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": False})
    return cases


# --- 2. snippets --------------------------------------------------------------------------------

V = {"s": "  Hello, World  ", "n": 7, "f": 2.5, "l": [3, 1, 2], "d": {"b": 1, "a": [1, "x", None, True, 1.5]},
     "msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": [1]},
              {"role": "user", "content": "c"}],
     "u": "naïve café ✓", "none": None, "t": True, "e": "", "big": 12345678901234567890.0}
SNIPPETS = [
    # printing values as Python does
    "{{ n }} {{ f }} {{ t }} {{ none }} {{ l }} {{ d }} {{ missing }}|{{ 1/2 }} {{ 3.0 }} {{ 1e20 }} {{ 1e-5 }}",
    "{{ 0.1 + 0.2 }} {{ 100000.0 }} {{ 1e16 }} {{ 123456.789 }} {{ -0.0 }} {{ big }} {{ 2**10 }} {{ 2**0.5 }}",
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 'ab' * 3 }} {{ [1] * 2 }}",
    "{{ 'a' ~ 1 ~ none ~ t }} {{ 'x' + 'y' }} {{ [1] + [2] }} {{ -n }} {{ +f }} {{ not e }}",
    "{{ \"it's\" }} {{ ['it\\'s', \"q\\\"\"] }} {{ {'k': 'v\\n'} }} {{ 'tab\\there' }} {{ '\\u00e9\\x41' }}",
    # comparisons and logic
    "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1,2] == [1,2] }} {{ none == none }}",
    "{{ 'ell' in s }} {{ 2 in l }} {{ 'b' in d }} {{ 'z' not in d }} {{ n and 'yes' }} {{ e or 'dflt' }} {{ e and 1 }}",
    "{{ 'yes' if n > 3 else 'no' }} {{ 'yes' if n > 30 }}|{{ (1, 2) }} {{ () }}",
    # tests
    "{{ n is odd }} {{ n is even }} {{ n is divisibleby 7 }} {{ s is string }} {{ l is iterable }} {{ d is mapping }}",
    "{{ missing is defined }} {{ missing is undefined }} {{ none is none }} {{ n is number }} {{ f is integer }}",
    "{{ t is boolean }} {{ t is true }} {{ n is integer }} {{ f is float }} {{ l is sequence }} {{ s is not string }}",
    "{{ n is eq 7 }} {{ n is equalto 7 }} {{ n is gt 3 }} {{ n is ne 7 }} {{ 2 is in l }} {{ 'A' is upper }} {{ s is lower }}",
    # filters
    "[{{ s | trim }}] [{{ s | upper }}] [{{ s | lower }}] [{{ s | title }}] [{{ 'hELLO' | capitalize }}]",
    "{{ l | length }} {{ s | length }} {{ u | length }} {{ d | count }} {{ l | first }} {{ l | last }} {{ l | sum }}",
    "{{ l | sort }} {{ l | sort(reverse=true) }} {{ ['b','A','c'] | sort }} {{ l | reverse | list }} {{ l | max }} {{ l | min }}",
    "{{ l | join(', ') }} {{ ['a','b'] | join }} {{ msgs | map(attribute='role') | join('/') }} {{ l | map('string') | list }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }} {{ msgs | rejectattr('tool_calls') | list | length }}",
    "{{ msgs | selectattr('tool_calls', 'defined') | map(attribute='content') | list }} {{ [0,1,2,none] | select | list }}",
    "{{ [1,2,3,4] | select('odd') | list }} {{ [1,2,3,4] | reject('odd') | list }} {{ [1,1,2] | unique | list }}",
    "{{ missing | default('dflt') }} {{ e | default('dflt') }} {{ e | default('dflt', true) }} {{ n | d(0) }}",
    "{{ d | tojson }} {{ d | tojson(indent=2) }} {{ u | tojson }} {{ d | tojson(sort_keys=true) }} {{ 'é' | tojson(ensure_ascii=true) }}",
    "{{ {'a': 1, 'b': [1, 2]} | tojson(separators=(',', ':')) }} {{ none | tojson }} {{ f | tojson }} {{ 'a\"b\\n' | tojson }}",
    "{{ d | items | list }} {{ d | dictsort }} {{ 'x-y-z' | replace('-', '+') }} {{ 'aaa' | replace('a', 'b', 2) }}",
    "{{ '12' | int + 1 }} {{ 'x' | int }} {{ 3.9 | int }} {{ '2.5' | float }} {{ n | string ~ '!' }} {{ -3 | abs }}",
    "{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 'a b  c' | wordcount }}",
    "{{ 'line1\\nline2\\n\\nline4' | indent(2) }}|{{ 'x\\ny' | indent(4, true) }}|{{ '<&>' | e }} {{ s | safe }}",
    # string methods
    "[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ 'xxhixx'.strip('x') }}] [{{ s.upper() }}]",
    "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}",
    "{{ s.startswith('  H') }} {{ s.endswith(('x', '  ')) }} {{ 'abc'.find('c') }} {{ u.find('é') }} {{ 'abca'.count('a') }}",
    "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} {{ 'x'.join(['1','2']) }}",
    "{{ 'hello world'.title() }} {{ 'Hello'.lower() }} {{ 'a-b'.replace('-', '') }} {{ 'pre_x'.removeprefix('pre_') }}",
    # subscripts and slices
    "{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ s[2:7] }} {{ u[::-1] }} {{ u[2] }}",
    "{{ d['a'][1] }} {{ d.a[-2] }} {{ d.b }} {{ d.get('b') }} {{ d.get('zz', 'no') }} {{ d.get('zz') }} {{ l[10] }}",
    "{{ msgs[0].role }} {{ msgs[0]['content'] }} {{ msgs[5] is defined }} {{ d.keys() | list }} {{ d.values() | list | length }}",
    # statements
    "{% for x in l %}{{ loop.index }}/{{ loop.length }}:{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
    "{% for x in l %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.cycle('a','b') }} {% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for c in 'ab' %}[{{ c }}]{% endfor %}",
    "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for m in msgs %}{{ loop.previtem.role if loop.previtem is defined }}>{{ loop.nextitem.role if loop.nextitem is defined }} {% endfor %}",
    "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}",
    "{% set ns = namespace(total=0, found=false) %}{% for i in range(5) %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.found }}",
    "{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}{% set blk %}in {{ n }} block{% endset %}[{{ blk }}]",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c', punct='.') }}",
    "{% macro rec(k) %}{% if k > 0 %}{{ k }}{{ rec(k - 1) }}{% endif %}{% endmacro %}{{ rec(3) }}",
    "{% if n > 10 %}big{% elif n > 5 %}mid{% else %}small{% endif %} {% if missing %}x{% elif e %}y{% else %}z{% endif %}",
    "{% filter upper %}shout {{ n }}{% endfilter %} {{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ dict(a=1) }}",
    "{# a comment #}{% raw %}{{ not rendered }}{% endraw %}",
    # whitespace control: trim_blocks, lstrip_blocks, - and +
    "{% if t %}\n  yes\n{% endif %}\n  {% if t %}\nindented tag\n  {% endif %}\nend",
    "a  {{- ' b ' -}}  c\n  {%- if t %} d {% endif -%}\n  e {#- c -#}  f",
    "line\n    {%+ if t %}kept spaces{% endif %}\n{% if t +%}\nkept newline{% endif %}",
    "{% for m in msgs %}\n    {{ m.role }}\n{% endfor %}\n",
    "  {# comment at line start #}\nafter\n{{ n }}\n{{ n }}\n",
    # what jinja2 refuses, chorus must refuse too
    "{{ missing.attr }}",
    "{{ none.x }}{{ n.x }}",
    "{% for x in none %}{% endfor %}",
    "{{ l.append(4) }}",
    "{{ 1 / 0 }}",
    "{{ raise_exception('You must alternate roles') }}",
    "{{ 'a' < 1 }}",
    "{{ n() }}",
]


def main():
    print("real chat templates:")
    cases = template_cases()
    names = sorted(f for f in os.listdir(TEMPLATES) if f.endswith(".jinja"))
    total = identical = 0
    for name in names:
        with open(os.path.join(TEMPLATES, name), encoding="utf-8") as f:
            source = f.read()
        identical += compare(name, source, cases)
        total += len(cases)
    if len(names) < 14:
        failures.append(f"only {len(names)} templates in {TEMPLATES}")
    print("snippets:")
    snip_ok = 0
    for k, source in enumerate(SNIPPETS):
        snip_ok += compare(f"snippet {k}", source, [V])
    print(f"{identical} of {total} template renderings and {snip_ok} of {len(SNIPPETS)} snippets identical to jinja2"
          f" ({refused_by_both} of them refused by both)")
    if failures:
        print(f"\n{len(failures)} FAILED:")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print("PASS")


main()
