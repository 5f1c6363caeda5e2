"""The official `openai` SDK's Responses API against `chorus serve` (docs/serve.md, "Responses"):
a reply, instructions, a previous_response_id chain that runs as one program (the second turn
reuses the first's blocks), the store (retrieve, delete, store: false), function tools with a
function_call_output turn, structured output through responses.parse with a pydantic model,
streaming events, and refusals. The oracle for what a reply says is the same conversation
through /v1/chat/completions (greedy): a Responses request means that chat request.

  python tests/python/test_responses_client.py build/chorus MODEL.gguf   (the agents venv: openai 3.x)
"""
import json
import sys

import jsonschema
import openai
import pydantic

from serve_support import check, finish, start_server, stop_server

CHORUS, MODEL = sys.argv[1], sys.argv[2]
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                          "required": ["city"], "additionalProperties": False}}

server, base = start_server(CHORUS, MODEL, "--pages", "512")
try:
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    Q = "What is the capital of France?"

    def chat(messages, n=24):
        return client.chat.completions.create(model="default", max_tokens=n, temperature=0,
                                              messages=messages).choices[0].message.content

    r1 = client.responses.create(model="default", input=Q, max_output_tokens=24, temperature=0)
    check(r1.object == "response" and r1.status in ("completed", "incomplete") and
          r1.output_text == chat([{"role": "user", "content": Q}]),
          "a reply, the text the same chat request gives: %r" % r1.output_text)
    check(r1.usage.input_tokens > 0 and r1.usage.output_tokens > 0 and
          r1.usage.total_tokens == r1.usage.input_tokens + r1.usage.output_tokens, "usage adds up")

    r = client.responses.create(model="default", instructions="Answer in one word.", input=Q, max_output_tokens=24,
                                temperature=0)
    check(r.output_text == chat([{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": Q}]),
          "instructions are the system turn: %r" % r.output_text)

    # A chain: the second turn continues the first's conversation on its program.
    r2 = client.responses.create(model="default", previous_response_id=r1.id, input="And of Italy?",
                                 max_output_tokens=24, temperature=0)
    want = chat([{"role": "user", "content": Q}, {"role": "assistant", "content": r1.output_text},
                 {"role": "user", "content": "And of Italy?"}])
    check(r2.output_text == want and r2.previous_response_id == r1.id,
          "previous_response_id continues the conversation: %r" % r2.output_text)
    cached = r2.usage.input_tokens_details.cached_tokens
    check(cached >= r1.usage.input_tokens, "and reuses the first turn's blocks (%d cached of %d input tokens)"
          % (cached, r2.usage.input_tokens))

    # The store.
    got = client.responses.retrieve(r1.id)
    check(got.id == r1.id and got.output_text == r1.output_text, "GET /v1/responses/{id}: the stored response")
    gone = client.responses.delete(r2.id)
    try:
        client.responses.retrieve(r2.id)
        check(False, "a deleted response is gone")
    except openai.NotFoundError:
        check(True, "DELETE /v1/responses/{id}: then a 404")
    r = client.responses.create(model="default", input=Q, max_output_tokens=4, temperature=0, store=False)
    try:
        client.responses.create(model="default", previous_response_id=r.id, input="More.", max_output_tokens=4)
        check(False, "store: false is not kept")
    except openai.NotFoundError as e:
        check(e.code == "previous_response_not_found", "store: false: not kept, a chain to it is a 404")

    # The store keeps the newest --stored-responses (4096 by default): with 2, the first of three goes.
    small, small_base = start_server(CHORUS, MODEL, "--stored-responses", "2")
    try:
        few = openai.OpenAI(base_url=small_base + "/v1", api_key="none", max_retries=0)
        made = [few.responses.create(model="default", input=Q, max_output_tokens=2, temperature=0).id
                for _ in range(3)]
        kept = []
        for rid in made:
            try:
                kept.append(few.responses.retrieve(rid).id == rid)
            except openai.NotFoundError:
                kept.append(False)
        check(kept == [False, True, True], "--stored-responses 2: the oldest of three is gone %s" % kept)
    finally:
        stop_server(small)

    # Function tools: a required call, its output as the next turn of the chain.
    q = "What is the weather in Paris?"
    t1 = client.responses.create(model="default", input=q, tools=[WEATHER], tool_choice="required",
                                 parallel_tool_calls=False, temperature=0, max_output_tokens=64)
    calls = [o for o in t1.output if o.type == "function_call"]
    ok = len(calls) == 1 and calls[0].name == "get_weather"
    if ok:
        jsonschema.validate(json.loads(calls[0].arguments), WEATHER["parameters"])
    check(ok, "tool_choice required: one function_call whose arguments validate (%s)" %
          (calls[0].arguments if calls else t1.output))
    if ok:
        t2 = client.responses.create(model="default", previous_response_id=t1.id, tools=[WEATHER], temperature=0,
                                     max_output_tokens=32,
                                     input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                             "output": "21 C and sunny"}])
        check(t2.output_text and t2.usage.input_tokens_details.cached_tokens > 0,
              "its function_call_output answered in text on the chain's program (%d cached)" %
              t2.usage.input_tokens_details.cached_tokens)

    # Structured output: text.format json_schema, through the SDK's parse helper.
    class City(pydantic.BaseModel):
        name: str
        population_millions: int = pydantic.Field(ge=0, le=100)

    p = client.responses.parse(model="default", input="Name a large city.", text_format=City, temperature=0,
                               max_output_tokens=80)
    check(isinstance(p.output_parsed, City), "responses.parse with a pydantic model: %r" % p.output_text)

    # Streaming: the documented events in order, the text the whole reply's.
    events = list(client.responses.create(model="default", input=Q, max_output_tokens=24, temperature=0, stream=True))
    types = [e.type for e in events]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    seqs = [e.sequence_number for e in events]
    check(types[0] == "response.created" and types[-1] in ("response.completed", "response.incomplete") and
          "response.output_item.added" in types and seqs == list(range(len(events))) and deltas == r1.output_text and
          events[-1].response.output_text == r1.output_text,
          "streamed: %d events from response.created to %s, the deltas the whole text" % (len(events), types[-1]))
    events = list(client.responses.create(model="default", input=q, tools=[WEATHER], tool_choice="required",
                                          parallel_tool_calls=False, temperature=0, max_output_tokens=64, stream=True))
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    check(done and calls and done[0].arguments == calls[0].arguments,
          "streamed, a call's arguments come in function_call_arguments events")

    # Refusals name the field.
    for kw, param in [({"extra_body": {"reasoning": {"effort": "high"}}}, "reasoning"),
                      ({"extra_body": {"frobnicate": 1}}, "frobnicate"),
                      ({"truncation": "auto"}, "truncation"),
                      ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
                      ({"text": {"verbosity": "low"}}, "text.verbosity")]:
        try:
            client.responses.create(model="default", input=Q, max_output_tokens=4, **kw)
            check(False, "%s is refused" % param)
        except openai.BadRequestError as e:
            check(e.status_code == 400 and e.param == param, "refused, naming %s: %s" % (param, e.message))
finally:
    stop_server(server)
finish()
