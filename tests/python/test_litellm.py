"""litellm as a client, the way its docs show for an OpenAI-compatible server (`openai/` model
prefix, `api_base`): a completion, a stream, a forced tool call, and structured output by
json_schema, against `chorus serve` on the default model. Run from the agents venv (litellm and
the openai client it wants).

  python tests/python/test_litellm.py build/chorus MODEL.gguf
"""
import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # nothing fetched from the network
import jsonschema  # noqa: E402
import litellm  # noqa: E402

from serve_support import check, finish, start_server, stop_server  # noqa: E402

CHORUS, MODEL = sys.argv[1], sys.argv[2]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                   "required": ["city"], "additionalProperties": False}}}
CITY = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                         "population_millions": {"type": "integer", "minimum": 0, "maximum": 100}},
        "required": ["name", "population_millions"], "additionalProperties": False}

server, base = start_server(CHORUS, MODEL, "--pages", "512")
try:
    kw = dict(model="openai/default", api_base=base + "/v1", api_key="none", temperature=0, num_retries=0)
    ask = [{"role": "user", "content": "What is the capital of France?"}]
    r = litellm.completion(messages=ask, max_tokens=24, **kw)
    text = r.choices[0].message.content
    check(isinstance(text, str) and text and r.usage.completion_tokens > 0, "litellm completion: %r" % text)
    pieces = [c.choices[0].delta.content or "" for c in litellm.completion(messages=ask, max_tokens=24, stream=True, **kw)]
    check(len(pieces) > 1 and "".join(pieces) == text, "litellm stream: %d chunks, the same text" % len(pieces))
    r = litellm.completion(messages=[{"role": "user", "content": "What is the weather in Paris?"}], max_tokens=64,
                           tools=[WEATHER], tool_choice="required", parallel_tool_calls=False, **kw)
    calls = r.choices[0].message.tool_calls or []
    ok = len(calls) == 1 and calls[0].function.name == "get_weather"
    if ok:
        jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER["function"]["parameters"])
    check(ok, "litellm tools: one get_weather call whose arguments validate")
    r = litellm.completion(messages=[{"role": "user", "content": "Name a large city."}], max_tokens=96,
                           response_format={"type": "json_schema",
                                            "json_schema": {"name": "city", "schema": CITY, "strict": True}}, **kw)
    out = r.choices[0].message.content
    ok = r.choices[0].finish_reason == "stop"
    if ok:
        jsonschema.validate(json.loads(out), CITY)
    check(ok, "litellm structured output: %r validates" % out)
finally:
    stop_server(server)
finish()
