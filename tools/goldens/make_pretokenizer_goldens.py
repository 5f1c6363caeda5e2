#!/usr/bin/env python3
"""Record pre-tokenizer split goldens with the Python `regex` package.

An oracle for chorus's pre-tokenizer (engine/tokenizer/pretokenizer.cpp) that is independent
of PCRE2: the same regexes llama.cpp uses for each `tokenizer.ggml.pre` kind are run
by the `regex` package (whose pattern semantics HuggingFace tokenizers follow), and
the resulting word lists are recorded.

Splitting works like llama.cpp's unicode_regex_split: the regexes of a kind are
applied in sequence; each one re-splits every piece produced by the previous one
(matching never crosses a piece boundary, and a lookahead at the end of a piece sees
the end of the text); text between matches is kept as a piece of its own.

The patterns below are llama.cpp's strings as written in llama-vocab.cpp. Two
adjustments make the oracle test splitting semantics rather than Unicode-table
trivia or dispatch details:
  * `\\s` / `\\S` are rewritten to explicit classes holding llama.cpp's whitespace
    set (U+0009-000D, 0020, 0085, 00A0, 1680, 2000-200A, 2028, 2029, 202F, 205F,
    3000; not U+180E nor U+FEFF).
  * The GPT-2 pattern gets a trailing `|\\s+`: llama.cpp runs that pattern with a
    hand-written splitter that gives a lone trailing whitespace (one before a
    non-space) a piece of its own, which is what `|\\s+` does.

Inputs: every entry of tools/goldens/tokenizer_corpus.json that is valid UTF-8
without surrogates (llama.cpp's lossy decoding of the others is not a regex
question), plus EXTRA below (adversarial strings aimed at the differences between
the patterns) and RANDOM_COUNT seeded random strings over RANDOM_ALPHABET.

Usage:
  make_pretokenizer_goldens.py [--out tests/goldens/pretokenizer_splits.json]
                               [--corpus tools/goldens/tokenizer_corpus.json]
"""
import argparse
import json
import os
import random
import sys
import time
import unicodedata

import regex

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# llama.cpp's whitespace set (unicode.cpp's is_whitespace table), for use inside [...].
WS = "\\t-\\r\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"

# llama.cpp's patterns (llama-vocab.cpp), unmodified apart from GPT2_FULL's `|\s+`.
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
GPT2_FULL = GPT2 + r"|\s+"
LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
          r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
         r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

KINDS = {
    "gpt-2": [GPT2_FULL],
    "llama3": [LLAMA3],
    "qwen2": [QWEN2],
    "smollm": [r"\p{N}", GPT2_FULL],
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2_FULL, r"\p{N}+", r"[0-9][0-9][0-9]"],
}

# Adversarial inputs, aimed at where the kinds' regexes differ.
EXTRA = [
    # digit grouping: \p{N}+ vs \p{N}{1,3} vs \p{N}, and default's [0-9]{3} pass
    "1234567", "a1b22c333", " 1234", "  12345678901", "x 12 345 6789",
    "\u0663\u0664\u0665\u0666",           # Arabic-Indic digits
    "\u0661\u0662\u0663\u0664abc\u06f1\u06f2",
    "\U0001d7cf\U0001d7d0\U0001d7d1\U0001d7d2",  # mathematical bold digits
    "\u00bd\u00be\u00b2\u00b3 x\u00b2", "\u216b\u2167 roman", "\uff11\uff12\uff13\uff14\uff21",
    "$$$100", "12,345.67 3.14159e-10", "v1.2.3-rc4",
    # contractions, case sensitivity
    "'S 'LL 'Re", "don't I'M we'Ve they'D", "'''s", "'", "x' s", "'sss'tt", " 's",
    # whitespace runs and newlines
    "\r\n\r\n  x", "   \n\n\t  y", "x   ", "  ", "\t\t", "a \n", " \n ", "\n", "a\n \n\tb",
    "...\n\n", "foo?\r\n", ".\r\r\n", "!\n \n", "hi!!!\n\n\nworld",
    # non-ASCII whitespace and near-misses
    "a\u00a0b", "x\u3000y", "\u2028", "a\u2028\u2029b", "\u0085x", " \u00a0 x",
    "a\u2003\u2003b", "a\u180eb", "a\ufeffb", "x\u200by", "\u1680\u1680z",
    # punctuation runs and a letter after punctuation
    " ?!..", "(hello", "\u00bfQu\u00e9", "\u00abquote\u00bb \u2014dash\u2014 \u2026",
    "\u300c\u62ec\u5f27\u300d", "<=>^~|", "`code` _a_b_ @user #tag", "[[x]] {y} \\path",
    "<|im_start|>user", "~~~|||^^^", "a-b+c=d",
    # letters: combining marks, titlecase, modifiers, fullwidth, scripts with marks
    "e\u0301\u0301", " e\u0301x", "\u01c5ungla", "\u02b0\u02b2x", "\uff21\uff22\uff23",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    # emoji runs (symbols, ZWJ, modifiers, variation selectors)
    "\U0001f600\U0001f600\U0001f600 \U0001f44d\U0001f3fd",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467 x\u2764\ufe0f",
    # controls
    "nul\x00x\x01\x7f",
]

# Plus RANDOM_COUNT seeded random strings (1-14 symbols) over characters the patterns
# treat differently: contraction letters in both cases, apostrophes, digits of several
# kinds, combining marks, punctuation vs symbols, every kind of whitespace, \r and \n.
RANDOM_COUNT = 200
RANDOM_SEED = 1
RANDOM_ALPHABET = list("aZsStTeElLrRvVdDm'' \t\n\r19.!?($+<^~|`_-") + [
    "  ", "\u00a0", "\u3000", "\u2028", "\u0085", "\u180e", "\ufeff", "\u200b", "\x0b", "\x0c",
    "\u0663", "\u00b2", "\u216b", "\uff11", "\U0001d7cf", "\u00e9", "\u0301", "\u0928\u094d",
    "\u01c5", "\u02b0", "\u4e2d", "\U0001f600", "\u200d", "\u00ab", "\u2014", "\x00",
]


def ws_rewrite(pattern):
    """Spells \\s and \\S out as llama.cpp's whitespace set."""
    out = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            n = pattern[i + 1]
            if n == "s":
                out.append(WS if in_class else "[" + WS + "]")
            elif n == "S":
                if in_class:
                    raise ValueError("\\S inside a class is not supported: " + pattern)
                out.append("[^" + WS + "]")
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
            out.append(c)
            if pattern[i + 1] == "^":  # a leading ] would be literal; none of ours has one
                out.append("^")
                i += 1
        elif c == "]" and in_class:
            in_class = False
            out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


def split(text, compiled):
    pieces = [text] if text else []
    for rx in compiled:
        nxt = []
        for p in pieces:
            at = 0
            for m in rx.finditer(p):
                b, e = m.span()
                if b == e:
                    raise AssertionError("empty match of %r in %r" % (rx.pattern, p))
                if b > at:
                    nxt.append(p[at:b])
                nxt.append(p[b:e])
                at = e
            if at < len(p):
                nxt.append(p[at:])
        pieces = nxt
    assert "".join(pieces) == text
    return pieces


def has_surrogate(s):
    return any(0xD800 <= ord(c) <= 0xDFFF for c in s)


def load_inputs(corpus_path):
    with open(corpus_path, "r", encoding="utf-8") as f:
        raw = json.load(f)
    texts, skipped = [], 0
    for e in raw:
        if isinstance(e, str):
            s = e
        elif isinstance(e, dict) and "hex" in e:
            try:
                s = bytes.fromhex(e["hex"]).decode("utf-8")  # strict: rejects overlongs too
            except UnicodeDecodeError:
                skipped += 1
                continue
        else:
            raise ValueError("bad corpus entry: %r" % (e,))
        if has_surrogate(s):
            skipped += 1
            continue
        texts.append(s)
    rnd = random.Random(RANDOM_SEED)
    randoms = ["".join(rnd.choice(RANDOM_ALPHABET) for _ in range(rnd.randint(1, 14)))
               for _ in range(RANDOM_COUNT)]
    seen = set(texts)
    for s in EXTRA + randoms:
        assert not has_surrogate(s)
        if s not in seen:
            texts.append(s)
            seen.add(s)
    # PCRE2 (chorus), llama.cpp and `regex` each carry their own Unicode tables; a code point
    # assigned only in a recent version would test table versions, not splitting.
    for t in texts:
        newer = [c for c in t if unicodedata.category(c) == "Cn" and not regex.match(r"\p{Cn}", c)]
        if newer:
            print("warning: %r has code points unassigned in Unicode %s: %s"
                  % (t, unicodedata.unidata_version, " ".join("U+%04X" % ord(c) for c in newer)))
    return texts, skipped


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "goldens", "pretokenizer_splits.json"))
    ap.add_argument("--corpus", default=os.path.join(HERE, "tokenizer_corpus.json"))
    args = ap.parse_args()

    t0 = time.time()
    texts, skipped = load_inputs(args.corpus)
    kinds = {}
    for kind, patterns in KINDS.items():
        compiled = [regex.compile(ws_rewrite(p)) for p in patterns]
        kinds[kind] = [{"text": t, "pieces": split(t, compiled)} for t in texts]

    # One case per line keeps diffs readable; ensure_ascii keeps the file plain ASCII.
    with open(args.out, "w", encoding="ascii") as f:
        f.write('{"generator": %s,\n "whitespace": %s,\n "patterns": %s,\n "kinds": {\n'
                % (json.dumps("python regex %s" % regex.__version__), json.dumps(WS),
                   json.dumps({k: [ws_rewrite(p) for p in v] for k, v in KINDS.items()})))
        for ki, (kind, cases) in enumerate(kinds.items()):
            f.write("  %s: [\n" % json.dumps(kind))
            f.write(",\n".join("   " + json.dumps(c) for c in cases))
            f.write("\n  ]%s\n" % ("," if ki + 1 < len(kinds) else ""))
        f.write(" }\n}\n")
    size = os.path.getsize(args.out)
    print("%s: %d inputs (%d corpus entries skipped: invalid UTF-8 or surrogates) x %d kinds, "
          "%d bytes, %.2fs" % (args.out, len(texts), skipped, len(kinds), size, time.time() - t0))
    if size > 1_500_000:
        sys.exit("output too large")


if __name__ == "__main__":
    main()
