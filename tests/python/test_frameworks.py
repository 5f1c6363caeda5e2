"""Popular frameworks as clients, each used the way its own docs show, against `chorus serve` on
the default model: instructor (a pydantic response_model through forced tool calls, and a
partial stream of it) and LangChain's ChatOpenAI (invoke, stream, bind_tools with a forced tool,
with_structured_output by json_schema and by function calling). Run from the frameworks venv
(scripts/setup.sh: openai 1.x, instructor, langchain-openai); litellm, which wants the agents
venv's openai, is tests/python/test_litellm.py.

  python tests/python/test_frameworks.py build/chorus MODEL.gguf
"""
import sys

import instructor
import openai
import pydantic
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from serve_support import check, finish, start_server, stop_server

CHORUS, MODEL = sys.argv[1], sys.argv[2]


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=24)
    population_millions: int = pydantic.Field(ge=0, le=100)


@tool
def get_weather(city: str) -> str:
    """The weather in a city today."""
    return f"It is sunny in {city}."


server, base = start_server(CHORUS, MODEL, "--pages", "512")
try:
    ask = [{"role": "user", "content": "Name a large city and its population in millions."}]

    # instructor: its default mode forces a tool call whose arguments are the model.
    client = instructor.from_openai(openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0))
    city = client.chat.completions.create(model="default", response_model=City, messages=ask, max_tokens=96,
                                          temperature=0, max_retries=0)
    check(isinstance(city, City), "instructor: a City from a forced tool call: %r" % city)
    partials = list(client.chat.completions.create_partial(model="default", response_model=City, messages=ask,
                                                           max_tokens=96, temperature=0, max_retries=0))
    # (Its forced tool is named PartialCity, so the reply is its own; a call's arguments come whole.)
    last = City.model_validate(partials[-1].model_dump()) if partials else None
    check(last is not None, "instructor: create_partial streams to a whole City: %r" % last)

    # LangChain's ChatOpenAI.
    llm = ChatOpenAI(base_url=base + "/v1", api_key="none", model="default", temperature=0, max_tokens=32,
                     max_retries=0)
    said = llm.invoke("What is the capital of France?")
    check(isinstance(said.content, str) and said.content, "langchain invoke: %r" % said.content)
    pieces = [c.content for c in llm.stream("What is the capital of France?")]
    check(len(pieces) > 1 and "".join(pieces) == said.content, "langchain stream: %d chunks, the same text" % len(pieces))
    with_tool = ChatOpenAI(base_url=base + "/v1", api_key="none", model="default", temperature=0, max_tokens=96,
                           max_retries=0).bind_tools([get_weather], tool_choice="get_weather")
    m = with_tool.invoke("What is the weather in Paris?")
    check(m.tool_calls and m.tool_calls[0]["name"] == "get_weather" and isinstance(m.tool_calls[0]["args"].get("city"), str),
          "langchain bind_tools: a get_weather call %s" % m.tool_calls)
    for method in ("json_schema", "function_calling"):
        structured = ChatOpenAI(base_url=base + "/v1", api_key="none", model="default", temperature=0, max_tokens=96,
                                max_retries=0).with_structured_output(City, method=method)
        out = structured.invoke("Name a large city and its population in millions.")
        check(isinstance(out, City), "langchain with_structured_output(method=%s): %r" % (method, out))
finally:
    stop_server(server)
finish()
