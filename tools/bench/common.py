"""What the benchmark scripts share: where chorus keeps its files, the default model, the CPU's name,
one `chorus bench` run read back from its JSON, a free port and stopping the servers they start."""
import json
import os
import platform
import socket
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


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def stop(procs, timeout=30):
    """Ends the processes started, last first: SIGTERM, then SIGKILL after `timeout` seconds."""
    for p in reversed(procs):
        p.terminate()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
