#!/usr/bin/env python3
"""`--device cpu|cuda|auto` on the command line (apps/chorus/gpu_choice.h), on any machine.

Without a usable GPU: `auto` runs on the CPU, says why on stderr and prints exactly what `cpu`
prints; `cuda` fails with a message naming the reason. With one: both run, on a dense, a hybrid
and a mixture-of-experts model alike. Either way `chorus info` says, without a device, that the
CUDA runner takes each of them (or that CUDA is not built), and an unknown device is refused. (What the runner refuses by
name is checked by tests/gpu/test_cuda_runner.cpp, CudaRunner.CheckSaysWhatItRunsWithoutADevice.)

usage: test_device_flag.py CHORUS GOLDENS_DIR
"""
import os
import subprocess
import tempfile
import sys


def run(chorus, model, *args):
    cmd = [chorus, "generate", "--model", model, "-n", "8", "--temp", "0", "The river", *args]
    # Bytes: a random tiny model's tokens need not make valid UTF-8.
    p = subprocess.run(cmd, capture_output=True, timeout=120)
    p.stderr = p.stderr.decode("utf-8", "replace")
    assert p.returncode >= 0, f"{cmd} died with signal {-p.returncode}: {p.stderr}"
    return p


def main():
    chorus, goldens = sys.argv[1], sys.argv[2]
    dense, hybrid, moe = (f"{goldens}/{f}.gguf" for f in ("tiny_llama_f32", "tiny_qwen35", "tiny_qwen35moe"))

    cpu = run(chorus, dense, "--device", "cpu")
    assert cpu.returncode == 0 and cpu.stdout.strip(), cpu.stderr
    auto = run(chorus, dense, "--device", "auto")
    assert auto.returncode == 0, auto.stderr
    on_cpu = "--device auto: running on the CPU" in auto.stderr
    if on_cpu:
        assert auto.stdout == cpu.stdout, (auto.stdout, cpu.stdout)
    cuda = run(chorus, dense, "--device", "cuda")
    if on_cpu:
        assert cuda.returncode != 0, "no GPU was found by auto, yet cuda ran"
        assert cuda.stderr.startswith("chorus generate:"), cuda.stderr
    else:
        assert cuda.returncode == 0 and cuda.stdout.strip(), cuda.stderr

    # A hybrid and a MoE model run where the dense one does; without a GPU, auto gives the CPU's.
    for model in (hybrid, moe):
        m_cuda = run(chorus, model, "--device", "cuda")
        assert (m_cuda.returncode != 0) == on_cpu, m_cuda.stderr
        if on_cpu:
            m_cpu = run(chorus, model, "--device", "cpu")
            m_auto = run(chorus, model, "--device", "auto")
            assert m_cpu.returncode == 0 and m_auto.returncode == 0, (m_cpu.stderr, m_auto.stderr)
            assert "running on the CPU" in m_auto.stderr and m_auto.stdout == m_cpu.stdout, m_auto.stderr

    # `chorus info` says what the CUDA runner would do with each, without asking a device.
    for model, want in ((dense, "cuda runner runs this model"), (hybrid, "cuda runner runs this model"),
                        (moe, "cuda runner runs this model")):
        info = subprocess.run([chorus, "info", "--model", model], capture_output=True, text=True, timeout=60)
        assert info.returncode == 0, info.stderr
        assert want in info.stdout or "cuda        not built" in info.stdout, (model, info.stdout)

    # ... and what the CPU runner does with each: runs it, or refuses it and says why (here an
    # architecture it does not know: the file's own name for it, patched).
    for model in (dense, hybrid, moe):
        info = subprocess.run([chorus, "info", "--model", model], capture_output=True, text=True, timeout=60)
        assert "cpu runner  runs this model" in info.stdout, (model, info.stdout)
    data = bytearray(open(dense, "rb").read())
    key = data.find(b"general.architecture")
    at = data.find(b"llama", key + len("general.architecture"))
    assert key >= 0 and at > key, "the dense model's architecture entry"
    data[at:at + 5] = b"zzzzz"
    with tempfile.NamedTemporaryFile(suffix=".gguf", delete=False) as f:
        f.write(data)
    try:
        info = subprocess.run([chorus, "info", "--model", f.name], capture_output=True, text=True, timeout=60)
        assert info.returncode == 0, info.stderr
        assert "cpu runner  refuses it:" in info.stdout and "architecture 'zzzzz' is not supported" in info.stdout, \
            info.stdout
    finally:
        os.unlink(f.name)

    bad = run(chorus, dense, "--device", "tpu")
    assert bad.returncode != 0 and "cpu" in bad.stderr and "cuda" in bad.stderr, bad.stderr
    print("device flag: ok (" + ("no usable GPU: auto ran on the CPU" if on_cpu else "ran on the GPU") + ")")


if __name__ == "__main__":
    main()
