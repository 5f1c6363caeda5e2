"""The rest of the surface agents use, through the official `openai` client against `chorus serve`
on the default model: logprobs and top_logprobs (checked against llama.cpp's logits in
tests/goldens/generate_smollm.json, recorded with an f32 KV cache and no flash attention, their
log-softmax taken here in float64), n > 1 as forks of one prompt block, logit_bias,
presence/frequency penalties (each greedy pick checked against the reported logprobs), and
POST /v1/completions (text or token-id prompts, echo, streaming, the 400s).

  python tests/python/test_sampling_api.py build/chorus MODEL.gguf GOLDENS.json
"""
import base64
import json
import math
import os
import struct
import sys

import openai

from serve_support import check, finish, post, start_server, stop_server

CHORUS, MODEL, GOLDENS = sys.argv[1], sys.argv[2], sys.argv[3]
# The server runs in llama.cpp's order (CHORUS_LLAMA_ORDER=1), where its logits are llama.cpp's to
# the bit (tests/engine/test_generation.cpp): what is left is its float log-softmax against the
# float64 one here. (By default the Q4_1 products' other order moves logits by up to about one
# unit, as llama.cpp's own are from the exact arithmetic: test_generation.cpp holds that.)
LOGPROB_TOLERANCE = 1e-3
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def log_softmax(b64):
    raw = base64.b64decode(b64)
    logits = struct.unpack("<%df" % (len(raw) // 4), raw)
    mx = max(logits)
    lse = mx + math.log(math.fsum(math.exp(v - mx) for v in logits))
    return [v - lse for v in logits]




def top_matches(got, want_lp, what):
    """The returned top alternatives: each one's logprob is llama.cpp's for that token (found by
    its logprob among llama.cpp's, since the client sees texts, not ids), and none is less likely
    than llama.cpp's k-th most likely beyond the tolerance."""
    ranked = sorted(want_lp, reverse=True)
    kth = ranked[len(got) - 1]
    ok = all(lp >= kth - LOGPROB_TOLERANCE for lp in got)
    ok = ok and all(abs(g - w) <= LOGPROB_TOLERANCE for g, w in zip(sorted(got, reverse=True), ranked))
    check(ok, f"{what}: the top {len(got)} logprobs are llama.cpp's to {LOGPROB_TOLERANCE} "
              f"(got {[round(x, 3) for x in got]}, want {[round(x, 3) for x in ranked[:len(got)]]})")


def check_logprobs(client, base, goldens):
    fox = next(p for p in goldens["prompts"] if p["name"] == "plain_fox")
    want = log_softmax(fox["first_logits_b64"])
    best = max(range(len(want)), key=lambda i: want[i])
    r = client.completions.create(model="default", prompt=fox["prompt_ids"], max_tokens=1, temperature=0,
                                  logprobs=5)
    lp = r.choices[0].logprobs
    check(abs(lp.token_logprobs[0] - want[best]) <= LOGPROB_TOLERANCE,
          f"completions: the greedy token's logprob {lp.token_logprobs[0]:.4f} is llama.cpp's {want[best]:.4f}")
    top_matches(list(lp.top_logprobs[0].values()), want, "completions logprobs=5")
    check(lp.text_offset == [0] and lp.tokens[0] == r.choices[0].text, "completions: tokens and text_offset")

    capital = next(p for p in goldens["prompts"] if p["name"] == "chat_capital")
    want = log_softmax(capital["first_logits_b64"])
    q = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is the capital of France?"}]
    r = client.chat.completions.create(model="default", messages=q, max_tokens=1, temperature=0, logprobs=True,
                                       top_logprobs=4)
    check(r.usage.prompt_tokens == len(capital["prompt_ids"]),
          f"chat: the model's template gives llama.cpp's prompt ({r.usage.prompt_tokens} tokens)")
    c = r.choices[0].logprobs.content
    check(len(c) == 1 and abs(c[0].logprob - max(want)) <= LOGPROB_TOLERANCE,
          f"chat: the greedy token's logprob {c[0].logprob:.4f} is llama.cpp's {max(want):.4f}")
    top_matches([t.logprob for t in c[0].top_logprobs], want, "chat top_logprobs=4")
    check(bytes(c[0].bytes).decode() == c[0].token == r.choices[0].message.content, "chat: token, bytes and content")

    # A longer greedy reply: every token's logprob is the most likely of its alternatives, and
    # the tokens spell the content; streamed, the same entries arrive over the chunks.
    r = client.chat.completions.create(model="default", messages=q, max_tokens=24, temperature=0, logprobs=True,
                                       top_logprobs=2)
    c = r.choices[0].logprobs.content
    spelled = b"".join(bytes(t.bytes) for t in c).decode(errors="replace")
    greedy = all(abs(t.logprob - t.top_logprobs[0].logprob) < 1e-6 and t.logprob <= 0 for t in c)
    check(greedy and spelled == r.choices[0].message.content and len(c) <= r.usage.completion_tokens,
          f"chat: {len(c)} tokens spell the reply, each the most likely")
    streamed = []
    for chunk in client.chat.completions.create(model="default", messages=q, max_tokens=24, temperature=0,
                                                logprobs=True, top_logprobs=2, stream=True):
        if chunk.choices and chunk.choices[0].logprobs:
            streamed += chunk.choices[0].logprobs.content or []
    check([(t.token, round(t.logprob, 5)) for t in streamed] == [(t.token, round(t.logprob, 5)) for t in c],
          f"chat streamed: the same {len(streamed)} logprobs entries")
    st, e = post(base, "/v1/chat/completions", {"model": "default", "messages": q, "top_logprobs": 3})
    check(st == 400 and e["error"]["param"] == "top_logprobs", "top_logprobs without logprobs: 400")
    st, e = post(base, "/v1/chat/completions", {"model": "default", "messages": q, "logprobs": True,
                                                "top_logprobs": 21})
    check(st == 400 and e["error"]["param"] == "top_logprobs", "top_logprobs 21: 400")
    return want, q


def check_bias_and_penalties(client, base, want, q):
    # logit_bias -100 on the greedy first token: the reply starts with llama.cpp's second choice.
    first = client.chat.completions.create(model="default", messages=q, max_tokens=1, temperature=0,
                                           logprobs=True, top_logprobs=2)
    t0 = first.choices[0].logprobs.content[0]
    best = max(range(len(want)), key=want.__getitem__)  # llama.cpp's greedy token id
    r = client.chat.completions.create(model="default", messages=q, max_tokens=1, temperature=0, logprobs=True,
                                       logit_bias={str(best): -100})
    t1 = r.choices[0].logprobs.content[0]
    second = sorted(want, reverse=True)[1]
    check(t1.token != t0.token and abs(t1.logprob - second) <= LOGPROB_TOLERANCE,
          f"logit_bias -100 on the greedy token: the second ({t1.token!r}, {t1.logprob:.3f} vs llama.cpp {second:.3f})")
    st, e = post(base, "/v1/chat/completions", {"model": "default", "messages": q, "logit_bias": {"49152": 1}})
    check(st == 400 and e["error"]["param"] == "logit_bias", "logit_bias on a token outside the vocabulary: 400")
    st, e = post(base, "/v1/chat/completions", {"model": "default", "messages": q, "logit_bias": {"5": 101}})
    check(st == 400 and e["error"]["param"] == "logit_bias", "logit_bias of 101: 400")

    # Penalties at temperature 0: each pick maximises logprob - presence*[seen] - frequency*count
    # over the alternatives the server reports (raw logprobs: the model's, before penalties).
    for presence, frequency in ((1.5, 0.0), (0.0, 0.7), (0.4, 0.4)):
        r = client.completions.create(model="default", prompt="Die Sonne ging langsam hinter den Bergen unter, und die Kinder",
                                      max_tokens=40, temperature=0, logprobs=20, presence_penalty=presence,
                                      frequency_penalty=frequency)
        lp = r.choices[0].logprobs
        counts, ok, steps = {}, True, 0
        for tok, chosen, alts in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            score = lambda t, v: v - (presence if counts.get(t) else 0.0) - frequency * counts.get(t, 0)
            best = max(score(t, v) for t, v in alts.items())
            ok = ok and score(tok, chosen) >= best - 1e-4
            counts[tok] = counts.get(tok, 0) + 1
            steps += 1
        check(ok and steps == 40, f"presence {presence} frequency {frequency}: each of {steps} picks is the penalised best")
    plain = client.completions.create(model="default", prompt="Die Sonne ging langsam hinter den Bergen unter, und die Kinder",
                                      max_tokens=40, temperature=0)
    pen = client.completions.create(model="default", prompt="Die Sonne ging langsam hinter den Bergen unter, und die Kinder",
                                    max_tokens=40, temperature=0, frequency_penalty=2.0)
    check(pen.choices[0].text != plain.choices[0].text, "frequency_penalty 2 changes a repetitive greedy reply")


def check_n(client, base, q):
    r = client.chat.completions.create(model="default", messages=q, max_tokens=20, temperature=0)
    greedy = r.choices[0].message.content
    r4 = client.chat.completions.create(model="default", messages=q, max_tokens=20, temperature=0, n=4)
    texts = [c.message.content for c in r4.choices]
    check([c.index for c in r4.choices] == [0, 1, 2, 3] and texts == [greedy] * 4,
          "n=4 at temperature 0: four forks, each the unforked greedy reply")
    check(r4.usage.prompt_tokens == r.usage.prompt_tokens and r4.usage.completion_tokens == 4 * r.usage.completion_tokens,
          f"n=4 usage: the prompt once ({r4.usage.prompt_tokens}), every choice's completion ({r4.usage.completion_tokens})")
    hot = client.chat.completions.create(model="default", messages=q, max_tokens=20, temperature=1.0, seed=3, n=4)
    again = client.chat.completions.create(model="default", messages=q, max_tokens=20, temperature=1.0, seed=3, n=4)
    htexts = [c.message.content for c in hot.choices]
    check(len(set(htexts)) > 1 and htexts == [c.message.content for c in again.choices],
          f"n=4 at temperature 1, seed 3: {len(set(htexts))} different replies, the same again")
    got = {}
    finish_reasons = {}
    for chunk in client.chat.completions.create(model="default", messages=q, max_tokens=20, temperature=1.0, seed=3,
                                                n=4, stream=True):
        for c in chunk.choices:
            got[c.index] = got.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                finish_reasons[c.index] = c.finish_reason
    check([got.get(i) for i in range(4)] == htexts and len(finish_reasons) == 4,
          "n=4 streamed: each index's deltas are its reply, each finished")
    r = client.completions.create(model="default", prompt="The quick brown fox", max_tokens=8, temperature=0, n=3)
    check(len({c.text for c in r.choices}) == 1 and len(r.choices) == 3, "completions n=3 at temperature 0")
    st, e = post(base, "/v1/chat/completions", {"model": "default", "messages": q, "n": 17})
    check(st == 400 and e["error"]["param"] == "n", "n = 17: 400")
    # A program with n > 1 continues with choice 0.
    r = client.chat.completions.create(model="default", messages=q, max_tokens=12, temperature=0, n=2,
                                       extra_body={"program_id": "nfork"})
    follow = q + [{"role": "assistant", "content": r.choices[0].message.content}, {"role": "user", "content": "Why?"}]
    r2 = client.chat.completions.create(model="default", messages=follow, max_tokens=4, temperature=0,
                                        extra_body={"program_id": "nfork"})
    check(r2.usage.prompt_tokens_details.cached_tokens >= r.usage.prompt_tokens,
          f"a program asked n=2 goes on from choice 0 ({r2.usage.prompt_tokens_details.cached_tokens} tokens reused)")
    post(base, "/programs/release", {"program_id": "nfork"})


def check_completions(client, base, goldens):
    fox = next(p for p in goldens["prompts"] if p["name"] == "plain_fox")
    by_text = client.completions.create(model="default", prompt="The quick brown fox", max_tokens=12, temperature=0)
    by_ids = client.completions.create(model="default", prompt=fox["prompt_ids"], max_tokens=12, temperature=0)
    check(by_text.choices[0].text == by_ids.choices[0].text and by_text.usage.prompt_tokens == 4,
          f"completions: the text prompt and llama.cpp's token ids give the same reply {by_text.choices[0].text!r}")
    check(by_text.object == "text_completion" and by_text.choices[0].finish_reason == "length"
          and by_text.usage.completion_tokens == 12, "completions: object, finish_reason length, usage")
    echo = client.completions.create(model="default", prompt="The quick brown fox", max_tokens=12, temperature=0,
                                     echo=True)
    check(echo.choices[0].text == "The quick brown fox" + by_text.choices[0].text, "completions: echo")
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="default", prompt="The quick brown fox", max_tokens=12, temperature=0, stream=True) if c.choices)
    check(streamed == by_text.choices[0].text, "completions streamed: the same text")
    stop = client.completions.create(model="default", prompt="1, 2, 3, 4,", max_tokens=30, temperature=0, stop=["8"])
    check(stop.choices[0].finish_reason == "stop" and "8" not in stop.choices[0].text and "7" in stop.choices[0].text,
          f"completions: a stop string ends the text before it ({stop.choices[0].text!r})")
    for body, param in (({"prompt": "a", "suffix": "b"}, "suffix"), ({"prompt": ["a", "b"]}, "prompt"),
                        ({"prompt": [1, 99999999]}, "prompt"), ({"prompt": "a", "best_of": 2}, "best_of"),
                        ({"prompt": "a", "echo": True, "logprobs": 1}, "echo"), ({}, "prompt"),
                        ({"prompt": ""}, "prompt"), ({"prompt": "a", "logprobs": 21}, "logprobs"),
                        ({"prompt": "a", "messages": []}, "messages")):
        st, e = post(base, "/v1/completions", {"model": "default", **body})
        check(st == 400 and e["error"]["param"] == param, f"completions {json.dumps(body)}: 400 naming {param}")


def main():
    goldens = json.load(open(GOLDENS))
    os.environ["CHORUS_LLAMA_ORDER"] = "1"  # the server's logits are llama.cpp's to the bit
    server, base = start_server(CHORUS, MODEL)
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
        want, q = check_logprobs(client, base, goldens)
        check_bias_and_penalties(client, base, want, q)
        check_n(client, base, q)
        check_completions(client, base, goldens)
    finally:
        stop_server(server)
    finish()


if __name__ == "__main__":
    main()
