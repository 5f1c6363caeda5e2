"""A real agent framework as the client, unchanged: the OpenAI Agents SDK (PyPI `openai-agents`)
runs an agent with a function tool to completion against `chorus serve` on the default model,
through its Chat Completions model and through its default, the Responses model (/v1/responses) —
each once with Runner.run, once streamed. The first turn is
asked to call the tool (`tool_choice: required`: constrained, so the call is always valid); the
SDK then runs the tool, sends its result back as a `role: tool` message, and the agent ends with
a final answer. Checked: the tool ran with arguments of its schema, the run produced a final
output, no request was refused, and the turns after the first reused the program's block (the
agent's ModelSettings.extra_body carries a program_id).

  python tests/python/test_agents_sdk.py build/chorus MODEL.gguf
"""
import asyncio
import re
import sys
import urllib.request

from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner,
                    function_tool, set_tracing_disabled)
from openai import AsyncOpenAI

from serve_support import check, finish, start_server, stop_server

CHORUS, MODEL = sys.argv[1], sys.argv[2]


def metric(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        m = re.search(r"^%s (\S+)$" % name, r.read().decode(), re.M)
    return float(m.group(1)) if m else -1.0


async def run_agent(base, streamed, api):
    calls = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city today."""
        calls.append(city)
        return f"It is sunny in {city}, 21 degrees."

    client = AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    agent = Agent(name="weather", instructions="Answer with the get_weather tool, then in one sentence.",
                  tools=[get_weather], model=(OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel)(
                      model="default", openai_client=client),
                  # (Through the Responses model one call per turn: the small model would start a
                  # second call and be cut by max_tokens, which that model takes as an error.)
                  model_settings=ModelSettings(tool_choice="required", max_tokens=64, temperature=0,
                                               parallel_tool_calls=False if api == "responses" else None,
                                               extra_body={"program_id": "agent-%s-%d" % (api, streamed)}))
    question = "What is the weather in Paris today?"
    if streamed:
        result = Runner.run_streamed(agent, question, max_turns=4)
        events = 0
        async for _ in result.stream_events():
            events += 1
        return calls, result, events
    result = await Runner.run(agent, question, max_turns=4)
    return calls, result, 0


def main():
    set_tracing_disabled(True)  # nothing leaves the machine
    server, base = start_server(CHORUS, MODEL)
    try:
        for api, streamed in (("chat", False), ("chat", True), ("responses", False), ("responses", True)):
            how = ("Runner.run_streamed" if streamed else "Runner.run") + ", " + api + " model"
            reused = metric(base, "chorus_reused_tokens_total")
            calls, result, events = asyncio.run(run_agent(base, streamed, api))
            check(len(calls) >= 1 and all(isinstance(c, str) and c for c in calls),
                  f"{how}: the tool ran ({len(calls)} calls, cities {calls})")
            check(isinstance(result.final_output, str) and result.final_output.strip() != "",
                  f"{how}: a final output {result.final_output!r:.80}")
            turns = len(result.raw_responses)
            check(turns >= 2, f"{how}: {turns} model turns (a call, then the answer)")
            if streamed:
                check(events > 0, f"{how}: {events} stream events")
            # The SDK sends the whole history each turn; with a program_id (ModelSettings.extra_body)
            # each turn after the first finds the conversation so far in the program's block.
            more = metric(base, "chorus_reused_tokens_total") - reused
            check(more > 0, f"{how}: later turns reused {more:.0f} tokens of the program's block")
    finally:
        stop_server(server)
    finish()


if __name__ == "__main__":
    main()
