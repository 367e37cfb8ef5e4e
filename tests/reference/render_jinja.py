#!/usr/bin/env python3
"""The oracle for lowbit's Jinja interpreter (tests/serve/test_jinja.cpp): renders chat templates with the real
jinja2 the way Hugging Face transformers' _compile_jinja_template sets it up -- ImmutableSandboxedEnvironment
(trim_blocks=True, lstrip_blocks=True) with the loopcontrols extension, a tojson filter that does not escape
HTML, and the raise_exception / strftime_now globals.

stdin:  [{"template": "...", "context": {...}}, ...]
stdout: [{"ok": true, "text": "..."} | {"ok": false, "error": "ExceptionType: message"}, ...]
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    out = []
    for case in json.load(sys.stdin):
        try:
            text = env.from_string(case["template"]).render(**case["context"])
            out.append({"ok": True, "text": text})
        except Exception as e:  # the test compares only whether both fail
            out.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
