"""mini-swe-agent (PyPI `mini-swe-agent`, the ThunderAgent paper's workload) as the client,
unchanged: its DefaultAgent with its own `mini.yaml` prompts, its LitellmModel (through litellm,
the OpenAI protocol, with its bash tool), and its bubblewrap environment, runs a few steps of its
loop against `chorus serve` on the default model. A 135M model does not solve the task; what is
checked is the protocol: every step's reply is a valid call of the bash tool (tool_choice
required, one call per reply: constrained), the commands ran, the loop ended by its step limit (or by the model
submitting) and not by an error, and each turn after the first found the conversation so far in
the program's block (a program_id in the request's extra_body).

  python tests/python/test_mini_swe_agent.py build/chorus MODEL.gguf
"""
import json
import os
import re
import sys
import tempfile
import urllib.request
from pathlib import Path

# Nothing leaves the machine: litellm's price list from its package, mini-swe-agent's settings
# in a directory of the test's own.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MSWEA_GLOBAL_CONFIG_DIR", tempfile.mkdtemp(prefix="mswea-"))

import litellm  # noqa: E402
import minisweagent  # noqa: E402
import yaml  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.environments.extra.bubblewrap import BubblewrapEnvironment, BubblewrapEnvironmentConfig  # noqa: E402
from minisweagent.models.litellm_model import LitellmModel  # noqa: E402

from serve_support import check, finish, start_server, stop_server  # noqa: E402

CHORUS, MODEL = sys.argv[1], sys.argv[2]
STEPS = 4


def get(base, path):
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return r.read().decode()


def main():
    litellm.suppress_debug_info = True  # no "Provider List" banners for a model it does not price
    server, base = start_server(CHORUS, MODEL)
    try:
        config = yaml.safe_load((Path(minisweagent.__file__).parent / "config" / "mini.yaml").read_text())
        agent_cfg = {k: v for k, v in config["agent"].items() if k != "mode"} | {"step_limit": STEPS}
        model = LitellmModel(model_name="openai/default", cost_tracking="ignore_errors",
                             model_kwargs={"api_base": base + "/v1", "api_key": "none", "temperature": 0.0,
                                           "max_tokens": 64, "tool_choice": "required", "parallel_tool_calls": False,
                                           "extra_body": {"program_id": "swe"}})
        # Its own sandbox, with the network cut too (the commands are a small model's).
        wrapper = BubblewrapEnvironmentConfig().wrapper_args + ["--unshare-net", "--die-with-parent"]
        env = BubblewrapEnvironment(env=config["environment"]["env"], wrapper_args=wrapper, timeout=10)
        agent = DefaultAgent(model, env, **agent_cfg)
        try:
            result = agent.run("Create a file named hello.txt that contains the word hello.")
        except Exception as e:  # the loop raises what it does not handle: a protocol failure
            check(False, f"the agent loop raised {type(e).__name__}: {e}")
            return
        status = result.get("exit_status")
        check(status in ("LimitsExceeded", "Submitted"), f"the loop ended by {status} (its step limit, or a submission)")
        replies = [m for m in agent.messages if m.get("role") == "assistant"]
        calls = [c for m in replies for c in (m.get("tool_calls") or [])]
        valid = all(c["function"]["name"] == "bash" and isinstance(json.loads(c["function"]["arguments"]).get("command"), str)
                    for c in calls)
        check(len(replies) == agent.n_calls and len(calls) >= len(replies) and valid,
              f"{agent.n_calls} model calls, each a valid bash tool call ({len(calls)} calls)")
        observations = [m for m in agent.messages if m.get("role") == "tool"]
        check(len(observations) == len(calls) and all("returncode" in m.get("content", "") for m in observations),
              f"{len(observations)} commands ran in the sandbox and came back as tool results")
        metrics = get(base, "/metrics")
        reused = float(re.search(r"^chorus_reused_tokens_total (\S+)$", metrics, re.M).group(1))
        recomputed = float(re.search(r"^chorus_recomputed_tokens_total (\S+)$", metrics, re.M).group(1))
        programs = json.loads(get(base, "/programs"))["data"]
        swe = next((p for p in programs if p["program_id"] == "swe"), None)
        check(swe is not None and swe["requests"] == agent.n_calls, "one program held the whole run")
        check(reused > 0 and recomputed == 0,
              f"turns after the first reused {reused:.0f} tokens of the program's block, {recomputed:.0f} recomputed")
    finally:
        stop_server(server)
    finish()


if __name__ == "__main__":
    main()
