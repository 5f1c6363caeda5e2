#!/usr/bin/env python3
"""Generate tools/goldens/tokenizer_corpus.json.

The corpus is a JSON list; each entry is either a JSON string (tokenized as its
UTF-8 encoding) or an object {"hex": "..."} holding raw bytes that are not
valid UTF-8.  Entries are grouped by category below; the output is flat and
deduplicated, order preserved.

Usage: python3 tools/goldens/build_corpus.py [--out PATH]
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def hx(b: bytes) -> dict:
    return {"hex": b.hex()}


ENGLISH = [
    "Hello world",
    "Hello, world!",
    "hello world",
    " Hello world",
    "Hello  world",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "It was the best of times, it was the worst of times.",
    "Once upon a time, in a land far, far away, there lived a small tokenizer.",
    "What's the weather like today? I'd like to go outside.",
    "Dr. Smith arrived at 3:45 p.m. on Jan. 5th, 2024 (approx.).",
    "e.g., i.e., etc., vs. -- all abbreviations.",
    "She said, \"Don't worry,\" and left.",
    "A\nB\nC",
    "line one\nline two\n",
    "antidisestablishmentarianism",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "I",
    "a",
    "A",
    ".",
    "hello",
    " hello",
    "  hello",
    "hello ",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade co\u00f6perate",
    "Stra\u00dfe \u00fcber \u00e4rger \u00d6l",
    "\u00bfD\u00f3nde est\u00e1 la biblioteca? \u00a1Aqu\u00ed!",
    "\u0141\u00f3d\u017a, \u017c\u00f3\u0142\u0107, \u0161\u010d\u0159\u017e\u00fd\u00e1\u00ed\u00e9",
    "\u00c5ngstr\u00f6m \u00e6\u00f8\u00e5 \u00c6\u00d8\u00c5",
    "fi\ufb01 ligature \ufb02ow",
]

SCRIPTS = [
    # Chinese
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
    "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8\u3002\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
    "\u673a\u5668\u5b66\u4e60\u662f\u4eba\u5de5\u667a\u80fd\u7684\u4e00\u4e2a\u5206\u652f",
    "\u7e41\u9ad4\u4e2d\u6587\u6e2c\u8a66",
    # Japanese
    "\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\uff01",
    "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3068\u6f22\u5b57\u3092\u6df7\u305c\u305f\u6587\u7ae0\u3067\u3059\u3002",
    "\uff8a\uff9d\uff76\uff78\uff76\uff80\uff76\uff85",
    # Korean
    "\uc548\ub155\ud558\uc138\uc694, \uc138\uacc4!",
    "\ud55c\uad6d\uc5b4 \ud615\ud0dc\uc18c \ubd84\uc11d\uae30\ub97c \ud14c\uc2a4\ud2b8\ud569\ub2c8\ub2e4.",
    "\u1100\u1161\u11a8",  # conjoining jamo
    # Arabic
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u062c\u0645\u064a\u0644\u0629 \u062c\u062f\u064b\u0627.",
    "\u0628\u0650\u0633\u0652\u0645\u0650 \u0627\u0644\u0644\u0651\u064e\u0647\u0650",
    # Hebrew
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u05e2\u05b4\u05d1\u05b0\u05e8\u05b4\u05d9\u05ea \u05e2\u05dd \u05e0\u05b4\u05e7\u05bc\u05d5\u05bc\u05d3",
    # Hindi / Devanagari
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e \u092c\u0939\u0941\u0924 \u0938\u0941\u0902\u0926\u0930 \u0939\u0948\u0964",
    "\u0915\u094d\u0937 \u0924\u094d\u0930 \u091c\u094d\u091e \u0936\u094d\u0930",
    # Thai
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u0e44\u0e21\u0e48\u0e21\u0e35\u0e0a\u0e48\u0e2d\u0e07\u0e27\u0e48\u0e32\u0e07\u0e23\u0e30\u0e2b\u0e27\u0e48\u0e32\u0e07\u0e04\u0e33",
    # Cyrillic
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u0421\u044a\u0435\u0448\u044c \u0436\u0435 \u0435\u0449\u0451 \u044d\u0442\u0438\u0445 \u043c\u044f\u0433\u043a\u0438\u0445 \u0444\u0440\u0430\u043d\u0446\u0443\u0437\u0441\u043a\u0438\u0445 \u0431\u0443\u043b\u043e\u043a.",
    "\u0423\u041a\u0420\u0410\u0407\u041d\u0421\u042c\u041a\u0410 \u043c\u043e\u0432\u0430: \u0457\u0436\u0430\u043a, \u0491\u0430\u043d\u043e\u043a",
    # Greek
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "\u039e\u03b5\u03c3\u03ba\u03b5\u03c0\u03ac\u03b6\u03c9 \u03c4\u03b7\u03bd \u03c8\u03c5\u03c7\u03bf\u03c6\u03b8\u03cc\u03c1\u03b1 \u03b2\u03b4\u03b5\u03bb\u03c5\u03b3\u03bc\u03af\u03b1.",
    "\u03b1\u03b2\u03b3 \u0391\u0392\u0393 \u03c2\u03c3",
    # Vietnamese: precomposed and with combining marks (NFD)
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
    "Ti\u00ea\u0301ng Vi\u00ea\u0323t co\u0301 d\u00e2\u0301u",
    "Xin ch\u00e0o th\u1ebf gi\u1edbi",
    "a\u0300 a\u0301 a\u0303 a\u0309 a\u0323 e\u0302\u0301",
    # Tamil
    "\u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd \u0b89\u0bb2\u0b95\u0bae\u0bcd",
    "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd \u0bae\u0bca\u0bb4\u0bbf",
    # misc
    "\u0540\u0561\u0575\u0565\u0580\u0565\u0576 \u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8 \u12a0\u121b\u122d\u129b",
    "English \u4e2d\u6587 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05d1\u05e8\u05d9\u05ea \u0939\u093f\u0928\u094d\u0926\u0940 mixed",
    "\U0001d400\U0001d401\U0001d402 \U00020000\U0002a6d6",
    "\u2160\u2161\u2162 \u2460\u2461\u2462 \u00bd\u00be",
]

EMOJI = [
    "\U0001f600",
    "\U0001f600\U0001f601\U0001f602\U0001f923",
    "I love \U0001f355 and \U0001f37a!",
    "\U0001f44d",
    "\U0001f44d\U0001f3fb\U0001f44d\U0001f3fc\U0001f44d\U0001f3fd\U0001f44d\U0001f3fe\U0001f44d\U0001f3ff",
    "\U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5\U0001f1e9\U0001f1ea",
    "\U0001f1fa",  # lone regional indicator
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "\U0001f469\U0001f3fd\u200d\U0001f4bb",
    "\U0001f3f3\ufe0f\u200d\U0001f308",
    "\u2764\ufe0f \u2764 \u2665",
    "\u0031\ufe0f\u20e3 #\ufe0f\u20e3",
    "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
    "hello\U0001f30dworld",
    "\u2603\u2614\u26a1\u2728\u2b50",
]

CODE = [
    "def add(a, b):\n    return a + b\n",
    "def f(x):\n\tif x:\n\t\treturn 1\n\treturn 0\n",
    "class Foo:\n    def __init__(self):\n        self.x = [1, 2, 3]  # list\n",
    "import numpy as np\nprint(np.arange(10).reshape(2, 5))\n",
    "#include <iostream>\n\nint main() {\n    std::cout << \"Hello\" << std::endl;\n    return 0;\n}\n",
    "template <typename T>\nstd::vector<T> v{1, 2, 3};\nauto p = std::make_unique<Foo>(a->b, c::d);\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "x+=1;y-=2;z*=3;w/=4;a<<=1;b>>=2;c&&d||e!=f==g",
    "{\"name\": \"chorus\", \"version\": 1, \"tags\": [\"a\", \"b\"], \"ok\": true, \"n\": null}",
    "{\n  \"key\": \"value\",\n  \"nested\": {\"x\": 1.5e-3}\n}\n",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done\n",
    "ls -la | grep foo && cd /tmp || exit 1",
    "cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2",
    "SELECT id, name FROM users WHERE age > 21 ORDER BY name;",
    "<html><body><p class=\"x\">Hi</p></body></html>",
    "fn main() { let v: Vec<u8> = vec![0; 16]; println!(\"{:?}\", v); }",
    "a\tb\tc",
    "\t\tindented with tabs",
    "mixed\r\nline\r\nendings\nhere\r\n",
    "windows\r\n",
    "\r\n\r\n",
    "\r",
    "trailing spaces   ",
    "trailing newlines\n\n\n",
    "trailing both  \n  \n",
    "\n\n\nleading newlines",
    "    four leading spaces",
    "x = 1 \t \t y = 2",
]

# runs of spaces 2..20
SPACE_RUNS = ["a" + " " * n + "b" for n in range(2, 21)]
SPACE_RUNS += [" " * n for n in (2, 3, 7, 16)]
SPACE_RUNS += ["x" + " " * 5, " " * 5 + "x", "word" + " " * 8 + "\n" + " " * 8 + "word"]

NUMBERS = [
    "0",
    "7",
    "42",
    "123",
    "1234",
    "12345",
    "123456",
    "1234567",
    "12345678",
    "123456789",
    "1234567890",
    "12345678901",
    "123456789012345",
    "12345678901234567890",
    "123456789012345678901234567890",
    "000123",
    "3.14159",
    "3.141592653589793238462643383279",
    "-42",
    "-0.001",
    "+7",
    "1e10 2.5E-3 -6.02e+23",
    "1,000,000",
    "1.000.000,50",
    "1_000_000",
    "1 000 000",
    "0x1F 0xDEADBEEF 0b1010 0o777",
    "Version 1.2.3-rc4",
    "2024-01-05T12:34:56Z",
    "+1 (555) 123-4567",
    "$19.99 \u20ac5,00 \u00a3100 \u00a51000",
    "50% of 200 is 100.",
    "\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669\u0660",  # Arabic-Indic
    "\u06f1\u06f2\u06f3",  # extended Arabic-Indic
    "\uff11\uff12\uff13\uff14\uff15",  # fullwidth
    "\u0967\u0968\u0969",  # Devanagari
    "\u0e51\u0e52\u0e53",  # Thai
    "a1b22c333d4444",
    "abc123def",
    "1st 2nd 3rd 4th",
]

CONTRACTIONS = [
    "don't",
    "DON'T",
    "Don't",
    "dOn'T",
    "I'm",
    "I'M",
    "i'm",
    "we'll",
    "we'Ll",
    "WE'LL",
    "you're YOU'RE you'Re",
    "they've THEY'VE",
    "he'd HE'D",
    "it's IT'S It'S",
    "'s",
    "'s a test",
    "'S",
    "'ll 're 've 'm 'd 't",
    "'twas the night",
    "rock 'n' roll",
    "James' book and James's book",
    "don\u2019t curly apostrophe",
    "''quoted''",
    "'",
    "o'clock O'CLOCK",
]

CHAT = [
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "hello<|endoftext|>world",
    "hel<|endoftext|>lo",
    "<|endoftext|><|endoftext|>",
    " <|endoftext|> ",
    "<|im_start",
    "im_start|>",
    "<| im_end |>",
    "<|IM_END|>",
    "<|im_end|",
    "<<|im_end|>>",
    "<|im_start|><|im_end|>",
    "<|im_start|>\n<|im_end|>\n\n",
    "<|unknown_token|>",
    "<|>",
    "<s></s>",
]

WHITESPACE = [
    "",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\t",
    "  \n ",
    " \t\n\r\x0b\x0c",
    "\u00a0",
    "a\u00a0b",
    "\u3000",
    "\u3000\u3000\u6f22\u5b57",
    "\u2002\u2003\u2009\u200a",
    "\u200b",
    "a\u200bb",
    "\ufeffBOM at start",
    "\u2028\u2029",
    "\u0085",
    "hello\u0000world",  # NUL in the middle (valid UTF-8, so a string)
    "\u0000",
    "\u0001\u0002\u0003\u001b[0m\u007f",
]

INVALID_BYTES = [
    hx(bytes.fromhex("eda080")),          # CESU lone high surrogate U+D800
    hx(bytes.fromhex("edbfbf")),          # lone low surrogate U+DFFF
    hx(b"ab" + bytes.fromhex("eda080") + b"cd"),
    hx(bytes.fromhex("eda0bdedb880")),    # CESU-8 surrogate pair for U+1F600
    hx(bytes.fromhex("e282")),            # truncated euro sign
    hx(b"price " + bytes.fromhex("e282")),
    hx(bytes.fromhex("e282") + b" price"),
    hx(bytes.fromhex("f09f98")),          # truncated 4-byte
    hx(bytes.fromhex("80")),              # stray continuation
    hx(bytes.fromhex("bf41")),
    hx(bytes.fromhex("808080")),
    hx(b"a" + bytes.fromhex("80") + b"b"),
    hx(bytes.fromhex("c0af")),            # overlong '/'
    hx(bytes.fromhex("e080af")),          # overlong '/'
    hx(bytes.fromhex("c180")),
    hx(bytes.fromhex("ff")),
    hx(bytes.fromhex("fe")),
    hx(bytes.fromhex("fffe")),
    hx(b"x" + bytes.fromhex("ff") + b"y" + bytes.fromhex("fe") + b"z"),
    hx(bytes.fromhex("f4908080")),        # > U+10FFFF
    hx(bytes.fromhex("f8888080 80".replace(" ", ""))),  # 5-byte form
    hx(b"nul\x00then" + bytes.fromhex("ff")),  # NUL next to invalid byte
    hx(bytes(range(0x80, 0x90))),
    hx("\u00e9".encode("latin-1") + b"t\xe9"),   # latin-1 text
    hx("caf\u00e9".encode("utf-8")[:-1]),        # cut inside last char
]

LONG = [
    "".join("abcdefghijklmnopqrstuvwxyz"[(i * 7) % 26] for i in range(500)),
    "https://example.com/" + "/".join("seg%03d-%s" % (i, "xyz"[i % 3] * (i % 5 + 1)) for i in range(200))[:1980],
    "a" * 1000,
    "ab" * 300,
    " " * 100 + "x",
    "\u4e2d" * 200,
    "\U0001f600" * 50,
    "1" * 100,
    "!" * 64,
    ("word " * 200).strip(),
]

PUNCT = [
    "!!!???...",
    "---===",
    "$$$",
    "...",
    "\u2026",
    "?!?!",
    "***bold***",
    "~~~",
    "@@@ ### %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}}",
    "a--b__c..d",
    "\u201cquoted\u201d \u2018single\u2019 \u00abguillemets\u00bb \u300c\u62ec\u5f27\u300d",
    "\u2014 em dash \u2013 en dash",
    "!@#$%^&*()_+-=[]{}|;':\",./<>?`~\\",
    "###",
    "=====",
]

MARKUP = [
    "# Title\n\n## Subtitle\n\n- item one\n- item two\n  - nested\n\n1. first\n2. second\n",
    "**bold** _italic_ `code` [link](https://example.com) ![img](a.png)",
    "```python\nprint('hi')\n```\n",
    "| a | b |\n|---|---|\n| 1 | 2 |\n",
    "> quote\n>> nested quote",
    "https://www.example.com/path/to/page?query=1&other=two#frag",
    "http://localhost:8080/api/v1/items/42",
    "ftp://user:pass@host.example.org:21/file.tar.gz",
    "www.google.com",
    "john.doe+tag@example.co.uk",
    "Contact: support@chorus.dev, admin@localhost",
    "$E = mc^2$",
    "\\frac{a}{b} + \\sqrt{x^2 + y^2} = \\sum_{i=0}^{n} \\alpha_i",
    "\\begin{equation}\n\\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2}\n\\end{equation}",
    "C:\\Users\\name\\Documents\\file.txt",
    "/usr/local/bin/python3 --version",
    "@user #hashtag $TICKER",
    "<!-- comment --> &amp; &lt; &gt; &#39;",
    "key=value; path=/; HttpOnly",
    "\u2200x\u2208\u211d: x\u00b2 \u2265 0 \u2227 \u221e \u2260 \u2205",
]

CATEGORIES = [
    ("english", ENGLISH),
    ("scripts", SCRIPTS),
    ("emoji", EMOJI),
    ("code", CODE),
    ("space_runs", SPACE_RUNS),
    ("numbers", NUMBERS),
    ("contractions", CONTRACTIONS),
    ("chat", CHAT),
    ("whitespace", WHITESPACE),
    ("invalid_bytes", INVALID_BYTES),
    ("long", LONG),
    ("punct", PUNCT),
    ("markup", MARKUP),
]


def entry_bytes(e) -> bytes:
    if isinstance(e, str):
        return e.encode("utf-8")
    return bytes.fromhex(e["hex"])


def build():
    out, seen = [], set()
    counts = {}
    for name, items in CATEGORIES:
        n = 0
        for e in items:
            if isinstance(e, dict):
                b = entry_bytes(e)
                try:
                    b.decode("utf-8")
                    raise SystemExit("hex entry %r is valid UTF-8; use a string" % e)
                except UnicodeDecodeError:
                    pass
            b = entry_bytes(e)
            if b in seen:
                continue
            seen.add(b)
            out.append(e)
            n += 1
        counts[name] = n
    return out, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "tokenizer_corpus.json"))
    args = ap.parse_args()
    corpus, counts = build()
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.write("[\n")
        for i, e in enumerate(corpus):
            f.write("  " + json.dumps(e, ensure_ascii=True))
            f.write(",\n" if i + 1 < len(corpus) else "\n")
        f.write("]\n")
    print("wrote %s: %d entries" % (args.out, len(corpus)))
    for k, v in counts.items():
        print("  %-14s %d" % (k, v))


if __name__ == "__main__":
    sys.exit(main())
