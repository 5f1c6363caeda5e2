"""GBNF grammars (the `grammar` field, as llama-server takes it; the openai client sends it through
extra_body) through the official `openai` client against `chorus serve`, sampling hot
(temperature 1.5) on the default model: every reply that ends (finish_reason "stop") is a
sentence of its grammar. The oracles are Python's: `re.fullmatch` with a regular expression of
the same language for the regular grammars, and Python's own parser (`ast`) for a recursive
grammar of arithmetic. Also /v1/completions with a grammar, and the 400s.

  python tests/python/test_grammar_output.py build/chorus MODEL.gguf
"""
import ast
import re
import sys

import openai

from serve_support import check, finish, post, start_server, stop_server

CHORUS, MODEL = sys.argv[1], sys.argv[2]
SAMPLES = 5


def arithmetic(text):
    """Python parses it as sums and differences of integers and parentheses, nothing else."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return False
    allowed = (ast.Expression, ast.BinOp, ast.Add, ast.Sub, ast.Constant)
    return all(isinstance(n, allowed) for n in ast.walk(tree)) and all(
        isinstance(n.value, int) for n in ast.walk(tree) if isinstance(n, ast.Constant))


GRAMMARS = [
    ("an ISO date", "Write today's date.",
     'root ::= [0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01])',
     lambda s: re.fullmatch(r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])", s)),
    ("yes or no, with a reason", "Is the sky blue?",
     'root ::= ("yes" | "no") ", because " [a-z ]{1,40} "."',
     lambda s: re.fullmatch(r"(yes|no), because [a-z ]{1,40}\.", s)),
    ("a list of words", "List some fruits.",
     'root ::= "[" word ("," " " word){0,4} "]"\nword ::= [A-Za-z]+',
     lambda s: re.fullmatch(r"\[[A-Za-z]+(, [A-Za-z]+){0,4}\]", s)),
    ("key=value lines", "Write a small configuration.",
     'root ::= (line "\\n"){1,3}\nline ::= [a-z_]{1,12} "=" [0-9]{1,5}',
     lambda s: re.fullmatch(r"([a-z_]{1,12}=[0-9]{1,5}\n){1,3}", s)),
    ("a quotation in guillemets", "Quote a proverb.",
     'root ::= "«" [^»\\n]{1,20} "»"',
     lambda s: re.fullmatch(r"«[^»\n]{1,20}»", s)),
    ("arithmetic (recursive)", "Write a sum.",
     'root ::= expr\nexpr ::= term (("+" | "-") term){0,3}\nterm ::= "0" | [1-9] [0-9]{0,3} | "(" expr ")"',
     arithmetic),
]




def main():
    server, base = start_server(CHORUS, MODEL)
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
        for name, ask, grammar, valid in GRAMMARS:
            stopped = good = 0
            for seed in range(SAMPLES):
                r = client.chat.completions.create(model="default", messages=[{"role": "user", "content": ask}],
                                                   max_tokens=64, temperature=1.5, seed=seed,
                                                   extra_body={"grammar": grammar})
                c = r.choices[0]
                if c.finish_reason == "stop":
                    stopped += 1
                    good += bool(valid(c.message.content))
            check(stopped > 0 and good == stopped,
                  f"{name}: {good} of {stopped} finished replies are sentences of the grammar ({SAMPLES} sampled)")
        r = client.completions.create(model="default", prompt="The date today is ", max_tokens=16, temperature=1.5,
                                      seed=1, extra_body={"grammar": GRAMMARS[0][2]})
        check(r.choices[0].finish_reason == "stop" and GRAMMARS[0][3](r.choices[0].text),
              f"completions with a grammar: {r.choices[0].text!r}")
        msgs = [{"role": "user", "content": "a"}]
        st, e = post(base, "/v1/chat/completions", {"model": "default", "messages": msgs, "grammar": "root ::= (\"a\""})
        check(st == 400 and e["error"]["param"] == "grammar" and "line 1 column 10" in e["error"]["message"],
              f"a grammar that does not parse: 400 naming where ({e['error']['message']})")
        st, e = post(base, "/v1/chat/completions", {"model": "default", "messages": msgs, "grammar": "root ::= x"})
        check(st == 400 and "`x` is used but never defined" in e["error"]["message"], "an undefined rule: 400 naming it")
        st, e = post(base, "/v1/chat/completions", {"model": "default", "messages": msgs, "grammar": "root ::= \"a\"",
                                                    "response_format": {"type": "json_object"}})
        check(st == 400 and e["error"]["param"] == "grammar", "a grammar with response_format: 400")
    finally:
        stop_server(server)
    finish()


if __name__ == "__main__":
    main()
