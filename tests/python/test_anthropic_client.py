"""The official `anthropic` Python SDK against `chorus serve`'s Messages API (docs/serve.md,
"Anthropic Messages"): a reply and its usage, a system prompt, stop sequences, streaming, tools
(any, a named one) with a tool_result turn on one program that reuses its block, count_tokens,
x-api-key, and errors in Anthropic's shape. The oracle for what a reply says is the same
conversation through /v1/chat/completions (greedy): the Messages request means that chat request.

  python tests/python/test_anthropic_client.py build/chorus MODEL.gguf
"""
import sys

import anthropic
import jsonschema
import openai

from serve_support import check, finish, post, start_server, stop_server

CHORUS, MODEL = sys.argv[1], sys.argv[2]
KEY = "sk-messages-test"
WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                            "required": ["city"], "additionalProperties": False}}

server, base = start_server(CHORUS, MODEL, "--pages", "512", "--api-key", KEY)
try:
    client = anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0)  # sends x-api-key
    chat = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0)
    ask = [{"role": "user", "content": "What is the capital of France?"}]

    m = client.messages.create(model="default", max_tokens=24, temperature=0, messages=ask)
    same = chat.chat.completions.create(model="default", max_tokens=24, temperature=0, messages=ask)
    check(m.type == "message" and m.role == "assistant" and m.content[0].type == "text" and
          m.content[0].text == same.choices[0].message.content,
          "a reply, the text the same chat request gives: %r" % m.content[0].text)
    check(m.stop_reason in ("end_turn", "max_tokens") and m.usage.input_tokens == same.usage.prompt_tokens and
          m.usage.output_tokens == same.usage.completion_tokens, "stop_reason %s, usage as the chat's" % m.stop_reason)

    m = client.messages.create(model="default", max_tokens=24, temperature=0, system="Answer in one word.",
                               messages=ask)
    same = chat.chat.completions.create(model="default", max_tokens=24, temperature=0,
                                        messages=[{"role": "system", "content": "Answer in one word."}] + ask)
    check(m.content[0].text == same.choices[0].message.content, "a system prompt: %r" % m.content[0].text)

    m = client.messages.create(model="default", max_tokens=24, temperature=0, system="Answer in one word.",
                               messages=ask, stop_sequences=["Paris"])  # (which says "... is Paris.")
    check(m.stop_reason == "stop_sequence" and m.stop_sequence == "Paris" and "Paris" not in m.content[0].text,
          "a stop sequence ends it, named: %r" % m.content[0].text)

    with client.messages.stream(model="default", max_tokens=24, temperature=0, messages=ask) as s:
        pieces = list(s.text_stream)
        final = s.get_final_message()
    whole = client.messages.create(model="default", max_tokens=24, temperature=0, messages=ask)
    check(len(pieces) > 1 and "".join(pieces) == whole.content[0].text and final.stop_reason == whole.stop_reason,
          "streamed in %d text deltas, the whole reply's text and stop_reason" % len(pieces))

    # Tools: `any` makes a call whose input validates; its result goes back as a tool_result turn of the
    # same program, which reuses its block.
    q = [{"role": "user", "content": "What is the weather in Paris?"}]
    m = client.messages.create(model="default", max_tokens=64, temperature=0, messages=q, tools=[WEATHER],
                               tool_choice={"type": "any", "disable_parallel_tool_use": True},
                               extra_body={"program_id": "weather"})
    uses = [b for b in m.content if b.type == "tool_use"]
    ok = m.stop_reason == "tool_use" and len(uses) == 1 and uses[0].name == "get_weather"
    if ok:
        jsonschema.validate(uses[0].input, WEATHER["input_schema"])
    check(ok, "tool_choice any: one tool_use block whose input validates: %s" % (uses[0].input if uses else m.content))
    if ok:
        turn2 = q + [{"role": "assistant", "content": [b.model_dump() for b in m.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                                   "content": "21 C and sunny"}]}]
        r = client.messages.create(model="default", max_tokens=32, temperature=0, messages=turn2, tools=[WEATHER],
                                   extra_body={"program_id": "weather"})
        check(r.content and r.content[0].type == "text" and r.usage.cache_read_input_tokens > 0,
              "the tool_result turn answers in text, reusing the program's block (%d cached input tokens)"
              % r.usage.cache_read_input_tokens)
    m = client.messages.create(model="default", max_tokens=64, temperature=0, messages=q, tools=[WEATHER],
                               tool_choice={"type": "tool", "name": "get_weather"})
    check(all(b.type == "tool_use" and b.name == "get_weather" for b in m.content) and m.content,
          "tool_choice tool: calls of that tool only")
    with client.messages.stream(model="default", max_tokens=64, temperature=0, messages=q, tools=[WEATHER],
                                tool_choice={"type": "any", "disable_parallel_tool_use": True}) as s:
        final = s.get_final_message()
    check(final.stop_reason == "tool_use" and final.content[-1].type == "tool_use" and
          final.content[-1].input == uses[0].input, "streamed, the call comes as a tool_use block with the same input")

    # count_tokens: the input tokens the same request is billed.
    code, body = post(base, "/v1/messages/count_tokens", {"model": "default", "messages": ask},
                      headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    first = client.messages.create(model="default", max_tokens=4, temperature=0, messages=ask)
    check(code == 200 and body["input_tokens"] == first.usage.input_tokens,
          "count_tokens: %s, the request's input_tokens %d" % (body, first.usage.input_tokens))

    # Errors in Anthropic's shape.
    def refused(**kw):
        try:
            client.messages.create(**{"model": "default", "max_tokens": 8, "messages": ask, **kw})
        except anthropic.BadRequestError as e:
            return e.status_code == 400 and e.body["type"] == "error" and \
                e.body["error"]["type"] == "invalid_request_error", e.body["error"]["message"]
        return False, "accepted"

    for kw, want in [({"frobnicate": 1}, "`frobnicate` is not supported"),
                     ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "image"),
                     ({"messages": [{"role": "robot", "content": "x"}]}, "role"),
                     ({"top_k": -1}, "top_k")]:
        body = {k: v for k, v in kw.items() if k != "frobnicate"}
        ok, why = refused(**body, **({"extra_body": {"frobnicate": 1}} if "frobnicate" in kw else {}))
        check(ok and want in why, "refused: %s (%s)" % (want, why))
    try:
        client.messages.create(model="no-such-model", max_tokens=4, messages=ask)
        check(False, "an unknown model is refused")
    except anthropic.NotFoundError as e:
        check(e.status_code == 404 and e.body["error"]["type"] == "not_found_error",
              "an unknown model: 404 not_found_error")
    try:
        anthropic.Anthropic(base_url=base, api_key="wrong", max_retries=0).messages.create(
            model="default", max_tokens=4, messages=ask)
        check(False, "a wrong x-api-key is refused")
    except anthropic.AuthenticationError as e:
        check(e.status_code == 401 and e.body["error"]["type"] == "authentication_error",
              "a wrong x-api-key: 401 authentication_error")
finally:
    stop_server(server)
finish()
