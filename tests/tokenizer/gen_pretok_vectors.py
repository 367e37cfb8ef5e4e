#!/usr/bin/env python3
"""Writes pretok_vectors.json: the splits of the GPT-2, Llama-3 and Qwen2 pre-tokenizer regexes computed by the
third-party `regex` module (the engine Hugging Face's reference Python code uses), as [begin, end) byte offsets.
test_tokenizer.cpp checks lowbit's hand-written matchers against them.

Usage (needs `pip install regex`): python3 tests/tokenizer/gen_pretok_vectors.py > tests/tokenizer/pretok_vectors.json
"""
import json
import os
import sys

import regex

PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}

EXTRA = [
    "I'VE been 'Told' he'S there, we'RE sure? 'M 'LL 'D don't",
    "line one\r\nline two\n\n\n  indented\n\t\ttabbed \n \n",
    "price: $1234567.89 or 12,345; 1/2 1½ ²³ ٣٤٥ Ⅻ",
    "  two spaces then word, three   spaces, trailing   ",
    "\tword after tab, \u00a0nbsp word, \u3000ideographic",
    "(parens) [brackets] {braces} --dashes-- ...dots... !!!",
    "naïve café Ελληνικά русский 日本語 한국어 עברית العربية हिन्दी",
    "emoji 🚀🦙 👩‍👩‍👧 🇺🇸 ✅ and\u200bzero-width",
    "a\r\rb\n\rc \r\n d",
    "x",
    " ",
    "",
]


def offsets(pattern, text):
    out = []
    for m in regex.finditer(pattern, text):
        b = len(text[: m.start()].encode("utf-8"))
        e = len(text[: m.end()].encode("utf-8"))
        out.append([b, e])
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    shared = os.path.join(here, "..", "..", "..", "shared", "data", "tokenizer-tests", "ggml-vocab-gpt-2.gguf.inp")
    texts = list(EXTRA)
    with open(shared, encoding="utf-8") as f:
        texts += f.read().split("\n__ggml_vocab_test__\n")[:-1]
    vectors = [{"text": t, **{k: offsets(p, t) for k, p in PATTERNS.items()}} for t in texts]
    sys.stdout.write('{"regex_version": "%s", "vectors": [\n' % regex.__version__)
    sys.stdout.write(",\n".join(json.dumps(v, ensure_ascii=False) for v in vectors))
    sys.stdout.write("\n]}\n")


if __name__ == "__main__":
    main()
