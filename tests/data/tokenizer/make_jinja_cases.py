#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes jinja_cases.json: small templates and what Jinja2 renders for them in the environment
transformers renders chat templates in (sandboxed, trim_blocks, lstrip_blocks, loop controls, its
tojson). jinja_test.cpp checks kvscope's Jinja subset against them, feature by feature; the
tokenizer parity suite checks the real chat templates end to end.
Run with the pinned transformers (.venv): python tests/data/tokenizer/make_jinja_cases.py
"""
import json
from pathlib import Path

import jinja2
from transformers.utils.chat_template_utils import _compile_jinja_template

VARIABLES = {"messages": [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi\nthere"},
                          {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello"}],
             "bos_token": "<s>", "add_generation_prompt": True, "tools": None, "n": 7, "x": 2.5,
             "d": {"b": 1, "a": [1, "two", None, True]}}

TEMPLATES = {
    "trim-and-lstrip-blocks": "{% if true %}\n    yes\n{% endif %}\n  {% for m in messages %}\n{{ m.role }}\n  {% endfor %}",
    "minus-strips-both-sides": "a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e",
    "plus-keeps": "x\n  {%+ if true %}y{% endif +%}\nz",
    "comment-whitespace": "a\n  {# note #}\nb {#- tight -#} c",
    "output-not-lstripped": "  {{ 'v' }}\n{{ 'w' }}",
    "loop-variables": "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }} {% endfor %}",
    "loop-else-break-continue": "{% for i in [] %}x{% else %}empty{% endfor %} {% for i in [1,2,3,4] %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "set-is-loop-local": "{% set v = 1 %}{% for m in messages %}{% set v = v + 1 %}{% endfor %}{{ v }}",
    "namespace-carries-out": "{% set ns = namespace(v=1, last=none) %}{% for m in messages %}{% set ns.v = ns.v + 1 %}{% set ns.last = m.role %}{% endfor %}{{ ns.v }} {{ ns.last }}",
    "slices": "{{ messages[1:]|length }} {{ messages[::-1][0].role }} {{ 'abcdef'[1:4] }} {{ 'abcdef'[::-2] }} {{ [1,2,3][-1] }} {{ 'héllo'[1] }}",
    "string-methods": "{{ messages[2].content.split('</think>')[-1].lstrip('\\n') }}|{{ messages[0].content.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ '  x y  '.split() }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'xxhixx'.strip('x') }}|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}|{{ 'a-b'.replace('-', '+') }}",
    "filters": "{{ messages|length }} {{ ' t '|trim }} {{ 'abc'|length }} {{ n|string }} {{ undefined_name|default('dflt') }} {{ [1,2]|join('-') }} {{ [3,4]|first }}{{ [3,4]|last }} {{ 'ab'|upper }} {{ [1,2,3]|reverse|list }}",
    "tojson": "{{ d|tojson }} {{ d|tojson(indent=2) }} {{ 'quote \"é\" \\n'|tojson }} {{ none|tojson }} {{ x|tojson }}",
    "tests": "{{ tools is none }} {{ tools is defined }} {{ nothing is defined }} {{ n is number }} {{ 'a' is string }} {{ d is mapping }} {{ d.a is iterable }} {{ false is false }} {{ n is not none }} {{ n is odd }}",
    "operators": "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2.5 }} {{ 'a' ~ 1 ~ none }} {{ 'b' in 'abc' }} {{ 4 not in [1,2] }} {{ 'x' if n > 5 else 'y' }} {{ none or 'z' }} {{ 0 and 1 }} {{ not [] }}",
    "precedence": "{{ messages|length - 1 }} {{ 'a' + messages[0].content|trim + 'b' }} {{ not none is none }} {{ (1 + 2) * 3 }}",
    "printing": "{{ none }} {{ true }} {{ 3 }} {{ 2.5 }} {{ 1.0 }} {{ [1, 'a', none] }} {{ {'k': 'v'} }} {{ nothing }}|",
    "dict-access": "{{ d['a'][1] }} {{ d.b }} {{ d.get('b') }} {{ d.get('zz', 'no') }} {% for k, v in d.items() %}{{ k }}={{ v|length if v is iterable else v }};{% endfor %} {{ 'a' in d }}",
    "escapes": "{{ 'tab\\there' }}|{{ \"it's\" }}|{{ 'snow\\u2603' }}|{{ 'adjacent' ' literals' }}",
    "elif-chain": "{% for m in messages %}{% if m.role == 'user' %}U{% elif m.role == 'system' %}S{% else %}A{% endif %}{% endfor %}",
    "generation-block": "{% for m in messages %}{% generation %}[{{ m.role }}]{% endgeneration %}{% endfor %}",
}

ERRORS = {  # templates Jinja2 or kvscope refuse; kvscope's error must name what and where
    "raise": ("{{ raise_exception('stop here') }}", "stop here"),
    "unclosed-if": ("{% if true %}x", "endif"),
    "macro": ("line one\n{% macro m() %}x{% endmacro %}", "line 2"),
    "unknown-filter": ("{{ 'a'|wordcount }}", "wordcount"),
    "unclosed-tag": ("{{ 'a' ", "never closed"),
    # Found by fuzzing (tests/fuzz/regressions/chat_template): kvscope refuses where Python would
    # need a big integer, a self-containing namespace or a malformed escape.
    "integer-overflow": ("{{ 2 ** 64 }}", "overflow"),
    "self-containing": ("{% set ns = namespace() %}{% set ns.a = [ns] %}{{ ns }}", "cannot hold itself"),
    "bad-escape": ("{{ '\\uZZ' }}", "hex digits"),
    "deep-nesting": ("{{ " + "(" * 100 + "1" + ")" * 100 + " }}", "nest deeper"),
}


def main():
    env_template = _compile_jinja_template  # transformers' own environment
    cases = []
    for name, source in TEMPLATES.items():
        cases.append({"name": name, "template": source, "output": env_template(source).render(**VARIABLES)})
    errors = []
    for name, (source, fragment) in ERRORS.items():
        try:
            env_template(source).render(**VARIABLES)
            refused = False
        except (jinja2.TemplateError, Exception):
            refused = True
        errors.append({"name": name, "template": source, "fragment": fragment, "jinja2_refuses": refused})
    path = Path(__file__).with_name("jinja_cases.json")
    path.write_text(json.dumps({"jinja2": jinja2.__version__, "variables": VARIABLES, "cases": cases, "errors": errors},
                               ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path} ({len(cases)} cases, {len(errors)} refusals, Jinja2 {jinja2.__version__})")


if __name__ == "__main__":
    main()
