"""Tool calling through the official `openai` client against `chorus serve` on the default model:
tool_choice required / named / auto / none, parallel_tool_calls, streamed tool-call deltas, a
multi-turn loop with `role: tool` results, and the 400s for tools that clash or cannot be
followed. Arguments are validated against the tools' parameters by the `jsonschema` package.

  python tests/python/test_tool_calls.py build/chorus MODEL.gguf
"""
import json
import sys

import jsonschema
import openai

from serve_support import check, finish, start_server, stop_server

CHORUS, MODEL = sys.argv[1], sys.argv[2]
WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "maxLength": 20},
                          "unit": {"enum": ["celsius", "fahrenheit"]},
                          "days": {"type": "integer"}},
           "required": ["city", "unit", "days"], "additionalProperties": False}
SEARCH = {"type": "object", "properties": {"query": {"type": "string", "maxLength": 30}}, "required": ["query"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "search", "description": "Search the web", "parameters": SEARCH}}]
PARAMS = {"get_weather": WEATHER, "search": SEARCH}
QUESTION = [{"role": "user", "content": "What will the weather be in Paris for the next 3 days?"}]


def valid_calls(calls, names=PARAMS):
    """Every call names an offered tool and its arguments validate against its parameters."""
    if not calls:
        return False
    for c in calls:
        if c.type != "function" or c.function.name not in names or not c.id.startswith("call_"):
            return False
        try:
            jsonschema.validate(json.loads(c.function.arguments), PARAMS[c.function.name])
        except (ValueError, jsonschema.ValidationError):
            return False
    return True


def main():
    server, base = start_server(CHORUS, MODEL)
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
        ask = lambda **kw: client.chat.completions.create(model="default", **{"max_tokens": 96, **kw})

        # required: hot sampling, never anything but valid calls. Parallel calls allowed (OpenAI's
        # default), a reply may start one more call than max_tokens lets it finish: the complete
        # calls come back, finish_reason says length, cut_tool_call holds what was cut.
        good, cut = 0, 0
        for seed in range(5):
            r = ask(messages=QUESTION, tools=TOOLS, tool_choice="required", temperature=1.5, seed=seed)
            c = r.choices[0]
            cut_call = (c.model_extra or {}).get("cut_tool_call")
            ended = c.finish_reason == "tool_calls" and cut_call is None
            was_cut = c.finish_reason == "length" and isinstance(cut_call, str) and cut_call.startswith("<tool_call>")
            good += (ended or was_cut) and c.message.content is None and valid_calls(c.message.tool_calls)
            cut += was_cut
            if was_cut and cut == 1:
                cut_seed, cut_text = seed, cut_call
        check(good == 5, f"tool_choice required at temperature 1.5: {good} of 5 replies are valid calls "
                         f"({cut} cut after their complete calls: finish_reason length, the cut call said)")
        # The same reply streamed: the last chunk's delta says what was cut.
        check(cut > 0, "a hot reply here is cut after its complete calls (the streamed check needs one)")
        if cut:
            last = None
            for chunk in ask(messages=QUESTION, tools=TOOLS, tool_choice="required", temperature=1.5, seed=cut_seed,
                             stream=True):
                if chunk.choices and chunk.choices[0].finish_reason:
                    last = chunk.choices[0]
            said = (last.delta.model_extra or {}).get("cut_tool_call") if last else None
            check(last is not None and last.finish_reason == "length" and said == cut_text,
                  "streamed, the same reply ends with finish_reason length and cut_tool_call in its last delta")

        r = ask(messages=QUESTION, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, temperature=0)
        calls = r.choices[0].message.tool_calls
        check(valid_calls(calls) and len(calls) == 1, "parallel_tool_calls false: exactly one call")

        named = {"type": "function", "function": {"name": "search"}}
        r = ask(messages=QUESTION, tools=TOOLS, tool_choice=named, temperature=1.0, seed=3)
        calls = r.choices[0].message.tool_calls
        check(valid_calls(calls, {"search"}) and all(c.function.name == "search" for c in calls),
              "a named function: only calls of it")

        r = ask(messages=QUESTION, tools=TOOLS, tool_choice="none", temperature=0)
        check(r.choices[0].message.tool_calls is None and r.choices[0].finish_reason in ("stop", "length"),
              "tool_choice none: text, no calls")
        r = ask(messages=QUESTION, tools=TOOLS, temperature=0)
        c = r.choices[0]
        check(c.finish_reason in ("stop", "length", "tool_calls") and
              (c.message.tool_calls is None or valid_calls(c.message.tool_calls)),
              f"tool_choice auto: a reply ({c.finish_reason}), and any calls in it are valid")

        # Streaming: deltas as OpenAI sends them, reassembled by index.
        stream = ask(messages=QUESTION, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                     temperature=0, stream=True)
        parts, finish_reason, content = {}, None, ""
        for chunk in stream:
            ch = chunk.choices[0]
            content += ch.delta.content or ""
            for d in ch.delta.tool_calls or []:
                p = parts.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                p["id"] = d.id or p["id"]
                if d.function:
                    p["name"] += d.function.name or ""
                    p["arguments"] += d.function.arguments or ""
            finish_reason = ch.finish_reason or finish_reason
        call = parts.get(0, {})
        ok = False
        try:
            jsonschema.validate(json.loads(call.get("arguments", "")), PARAMS.get(call.get("name"), {}))
            ok = call["id"].startswith("call_")
        except (ValueError, jsonschema.ValidationError, KeyError):
            pass
        check(ok and finish_reason == "tool_calls" and content == "" and len(parts) == 1,
              f"streamed: one call in deltas (id, name, then arguments), finish_reason {finish_reason}")

        # A multi-turn tool loop on one program: call, result, answer.
        history = list(QUESTION)
        r = ask(messages=history, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, temperature=0,
                extra_body={"program_id": "tool-loop"})
        msg = r.choices[0].message
        history.append(msg.model_dump(exclude_none=True))
        history.append({"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "21 C and sunny all week"})
        r = ask(messages=history, tools=TOOLS, tool_choice="none", temperature=0, extra_body={"program_id": "tool-loop"})
        check(r.choices[0].message.content and r.choices[0].finish_reason in ("stop", "length"),
              "after a role: tool result, the model answers in text")
        history += [r.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Thanks!"}]
        r = ask(messages=history, tools=TOOLS, temperature=0, max_tokens=8, extra_body={"program_id": "tool-loop"})
        check(r.usage.prompt_tokens_details.cached_tokens > 0,
              f"the third turn reuses the program's block ({r.usage.prompt_tokens_details.cached_tokens} tokens)")

        # Bad input: a clear 400 naming the field.
        def refused(param, **kw):
            try:
                ask(messages=QUESTION, **kw)
            except openai.BadRequestError as e:
                body = e.response.json()["error"]
                return body.get("param") == param, body["message"]
            return False, "accepted"

        clash = TOOLS + [{"type": "function", "function": {"name": "search"}}]
        ok, why = refused("tools[2].function.name", tools=clash)
        check(ok and "two tools are named" in why, "tools that clash: 400 (" + why + ")")
        bad = [{"type": "function", "function": {"name": "f", "parameters": {"type": "string", "pattern": "(?=a)b"}}}]
        ok, why = refused("tools[0].function.parameters", tools=bad, tool_choice="required")
        check(ok and "pattern" in why, "parameters chorus cannot follow: 400 naming the keyword (" + why + ")")
        ok, why = refused("tool_choice", tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
        check(ok, "tool_choice naming no offered tool: 400 (" + why + ")")
        ok, why = refused("tool_choice", tool_choice="required")
        check(ok, "tool_choice required with no tools: 400 (" + why + ")")
        try:
            ask(messages=QUESTION + [{"role": "tool", "content": "x"}])
            ok, why = False, "accepted"
        except openai.BadRequestError as e:
            ok, why = e.response.json()["error"].get("param") == "messages[1].tool_call_id", e.message
        check(ok, "a tool turn without tool_call_id: 400")

        # Cut by max_tokens before a call closes: length, the partial text as content.
        r = ask(messages=QUESTION, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=6)
        c = r.choices[0]
        check(c.finish_reason == "length" and c.message.tool_calls is None and c.message.content.startswith("<tool_call>"),
              "a call cut by max_tokens: finish_reason length, the partial call as content")
    finally:
        stop_server(server)
    finish()


main()
