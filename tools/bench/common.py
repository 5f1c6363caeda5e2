"""What the benchmark scripts share: where chorus keeps its files, the default model, the CPU's name,
and one `chorus bench` run read back from its JSON."""
import json
import os
import platform
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHORUS_HOME = os.environ.get("CHORUS_HOME", os.path.expanduser("~/.cache/chorus"))
DEFAULT_MODEL = os.path.join(CHORUS_HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_CHORUS = os.path.join(ROOT, "build", "chorus")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def chorus_bench(chorus, model, threads, reps, extra, out):
    """Runs `chorus bench` with `extra` arguments and returns its --json report (written to `out`)."""
    cmd = [chorus, "bench", "--model", model, "--threads", str(threads), "--reps", str(reps), "--json", out] + extra
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)
