"""Structured outputs through the official `openai` client against `chorus serve`, with the
`jsonschema` package as the oracle: for a corpus of schemas, sampling hot (temperature 1.5) on
the default model, every reply that ends (finish_reason "stop") is JSON that validates; a reply
cut by max_tokens ("length") is a prefix of one, and an object's keys come in the schema's order;
the SDK's chat.completions.parse with a pydantic model. Also response_format json_object, streaming,
and the 400s for schemas chorus cannot follow (naming the keyword) or that accept nothing.

  python tests/python/test_structured_output.py build/chorus MODEL.gguf
"""
import json
import sys

import jsonschema
import openai
import pydantic

from serve_support import check, finish, start_server, stop_server

CHORUS, MODEL = sys.argv[1], sys.argv[2]
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER  # date-time, time need rfc3339-validator (setup.sh)
assert "date-time" in FORMATS.checkers, "jsonschema cannot check date-time here: pip install rfc3339-validator"
SCHEMAS = {
    "tool call with 5 arguments": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 24},
            "days": {"type": "integer"},
            "units": {"enum": ["metric", "imperial"]},
            "detailed": {"type": "boolean"},
            "threshold": {"type": "number"},
        },
        "required": ["city", "days", "units", "detailed", "threshold"],
        "additionalProperties": False,
    },
    "optional and nullable properties": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 2, "maxLength": 12},
            "note": {"anyOf": [{"type": "string", "maxLength": 10}, {"type": "null"}]},
            "count": {"type": ["integer", "null"]},
        },
        "required": ["title"],
    },
    "array of objects": {
        "type": "array",
        "minItems": 1,
        "maxItems": 3,
        "items": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"}},
            "required": ["id", "ok"],
            "additionalProperties": False,
        },
    },
    "recursive tree": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 6},
                    "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["name"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    },
    "bounds and formats": {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": -5, "maximum": 120},
            "share": {"type": "number", "minimum": 0, "maximum": 1},
            "rank": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "time"},
            "id": {"type": "string", "format": "uuid"},
            "mail": {"type": "string", "format": "email"},
            "ip": {"type": "string", "format": "ipv4"},
        },
        "required": ["count", "share", "rank", "when", "day", "at", "id", "mail", "ip"],
        "additionalProperties": False,
    },
    "patterns": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"},
            "colour": {"type": "string", "pattern": "^(red|green|blue)$"},
            "mail": {"type": "string", "pattern": "^\\w{1,12}@\\w{1,12}\\.com$"},
            "slug": {"type": "string", "pattern": "^[a-z]{1,8}(-[a-z]{1,8}){0,3}$"},
        },
        "required": ["code", "colour", "mail", "slug"],
        "additionalProperties": False,
    },
    "constants and enums": {
        "type": "object",
        "properties": {
            "kind": {"const": "answer"},
            "level": {"enum": [1, 2, 3, None, "max"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
        },
        "required": ["kind", "level", "tags"],
        "additionalProperties": False,
    },
}


LONG = {"bounds and formats": 480, "patterns": 480}  # nine fields, and the model's whitespace: more room than 160 tokens


def schema_format(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name.replace(" ", "_"), "schema": schema, "strict": True}}


server, base = start_server(CHORUS, MODEL, "--pages", "512")
try:
    client = openai.OpenAI(base_url=base + "/v1", api_key="none")
    model = client.models.list().data[0].id
    ask = [{"role": "user", "content": "Reply with JSON."}]

    whole = 0
    for name, schema in SCHEMAS.items():
        ended = 0
        for seed in range(3):
            r = client.chat.completions.create(model=model, messages=ask, max_tokens=LONG.get(name, 160),
                                               temperature=1.5, seed=seed, response_format=schema_format(name, schema))
            text, why = r.choices[0].message.content, r.choices[0].finish_reason
            if why == "stop":
                ended += 1
                try:
                    value = json.loads(text)
                    jsonschema.validate(value, schema, format_checker=FORMATS)
                    ok = True
                except (ValueError, jsonschema.ValidationError) as e:
                    ok = False
                    print("   ", e)
                check(ok, "%s, seed %d: %r validates" % (name, seed, text))
                if ok and isinstance(value, dict) and "properties" in schema:  # keys in its order (json.loads keeps them)
                    order = [k for k in schema["properties"] if k in value]
                    check(list(value) == order, "%s, seed %d: keys in the schema's order %s" % (name, seed, order))
            else:
                check(why == "length", "%s, seed %d: cut by max_tokens (%s): %r" % (name, seed, why, text))
        whole += ended
        print("     %s: %d of 3 replies ended within %d tokens" % (name, ended, LONG.get(name, 160)))
        if name in LONG:
            check(ended > 0, "%s: a hot reply ends (and validates) within %d tokens" % (name, LONG[name]))
    check(whole > 0, "%d of %d hot replies ended; each of those validated" % (whole, 3 * len(SCHEMAS)))

    # Streaming: the pieces join into the same kind of JSON.
    schema = SCHEMAS["tool call with 5 arguments"]
    pieces, why = [], None
    for chunk in client.chat.completions.create(model=model, messages=ask, max_tokens=160, temperature=0,
                                                response_format=schema_format("tool", schema), stream=True):
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            why = chunk.choices[0].finish_reason or why
    text = "".join(pieces)
    check(why == "stop", "streamed structured reply ends (%s)" % why)
    if why == "stop":
        try:
            jsonschema.validate(json.loads(text), schema)
            check(True, "streamed reply validates: %r" % text)
        except (ValueError, jsonschema.ValidationError) as e:
            check(False, "streamed reply validates: %r (%s)" % (text, e))

    # The SDK's structured-output helper with a pydantic model: the reply parses into it, its
    # fields in the model's order (reasoning before answer), not sorted.
    class Verdict(pydantic.BaseModel):
        reasoning: str
        answer: int = pydantic.Field(ge=0, le=100)
        confident: bool

    r = client.beta.chat.completions.parse(model=model, messages=[{"role": "user", "content": "What is 2 plus 2?"}],
                                           max_tokens=120, temperature=0, response_format=Verdict)
    text = r.choices[0].message.content
    check(r.choices[0].finish_reason == "stop" and isinstance(r.choices[0].message.parsed, Verdict) and
          0 <= r.choices[0].message.parsed.answer <= 100 and
          list(json.loads(text)) == ["reasoning", "answer", "confident"],
          "chat.completions.parse with a pydantic model: parsed, fields in its order: %r" % text)

    # json_object: any JSON object.
    r = client.chat.completions.create(model=model, messages=ask, max_tokens=120, temperature=0,
                                       response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        check(isinstance(json.loads(r.choices[0].message.content), dict),
              "json_object reply is a JSON object: %r" % r.choices[0].message.content)
    else:
        check(r.choices[0].finish_reason == "length", "json_object reply cut by max_tokens")

    # Schemas chorus cannot follow, or that accept nothing: a 400 that says why, never a hang.
    bad = [
        ({"type": "string", "pattern": "^(?=a)b$"}, "lookaround"),
        ({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}, "multipleOf"),
        ({"type": "number", "minimum": -0.5}, "whole numbers"),
        ({"enum": []}, "no value is allowed"),
        ({"$ref": "#"}, "derives no finite text"),
        ({"type": "object", "properties": {}, "required": ["x"]}, "'x' is not in 'properties'"),
    ]
    for schema, want in bad:
        try:
            client.chat.completions.create(model=model, messages=ask, max_tokens=8,
                                           response_format=schema_format("bad", schema))
            check(False, "%s is refused" % json.dumps(schema))
        except openai.BadRequestError as e:
            body = e.response.json()["error"]
            check(e.status_code == 400 and want in body["message"] and
                  body["param"] == "response_format.json_schema.schema",
                  "%s -> 400 %r" % (json.dumps(schema), body["message"]))
    for fmt, want in [({"type": "xml"}, "response_format.type"),
                      ({"type": "json_schema"}, "response_format.json_schema")]:
        try:
            client.chat.completions.create(model=model, messages=ask, max_tokens=8, response_format=fmt)
            check(False, "%s is refused" % json.dumps(fmt))
        except openai.BadRequestError as e:
            check(e.response.json()["error"]["param"] == want, "%s -> 400 naming %s" % (json.dumps(fmt), want))
finally:
    stop_server(server)
finish()
