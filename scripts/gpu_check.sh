#!/usr/bin/env bash
# The GPU check (issue 9): one prepared run on a lent GPU machine, which has CUDA, cmake and
# ninja but not chorus's Debian dependencies, so the binaries are built here and carried.
#
#   scripts/gpu_check.sh --prepare   # here: build the CUDA targets, put the binaries, the ptxas
#                                    # resource report and this script's inputs into .gpu/
#   (device tool) run  command="bash scripts/gpu_check.sh"  carry=[".gpu"]  timeout_s=480
#
# On the device it prints the GPU, runs the gpu-labelled tests (every CUDA op against the CPU
# reference; the engine on the GPU) and the step benchmark (Qwen3.5-9B-shaped steps for batches
# 1, 8, 32 with and without a CUDA graph; a SmolLM2-shaped model through the runners, GPU vs CPU:
# decode, and a 4k-token prefill while 8 sequences decode; then a Qwen3.5-9B-shaped hybrid model
# through the CUDA runner itself: decode of 1, 8, 32 generates over 3-block views, 8 writers
# reading 8 live thinkers with chain reads and without, the 4k prefill while 8 decode, and the
# Gated DeltaNet recurrence's part of it),
# writes JSON under $OUT and prints a short table last. Well under 8 minutes: the tests take
# seconds, the op-level benchmark makes 16 GiB of random bf16 weights on the device and times
# about 600 steps, the runner uploads 18 GiB once and times about 270.
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--prepare" ]]; then
  set -e
  build=${BUILD:-build}
  [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "gpu_check: no nvcc here: cannot build the CUDA targets" >&2; exit 1; }
  cmake -S . -B "$build" -G Ninja -DCHORUS_CUDA=ON >/dev/null
  cmake --build "$build" --target chorus_gpu_tests chorus_cuda_step_bench
  rm -rf .gpu && mkdir -p .gpu
  cp "$build/tests/chorus_gpu_tests" "$build/chorus_cuda_step_bench" .gpu/
  # Debian libraries the binaries need beyond libc, libstdc++ and CUDA's (the GPU machine's
  # image has those, not chorus's Debian packages): carried in .gpu/lib.
  mkdir -p .gpu/lib
  ldd .gpu/chorus_gpu_tests .gpu/chorus_cuda_step_bench | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so|/usr/local/cuda|ld-linux' |
    while read -r lib; do cp -L "$lib" .gpu/lib/; done
  echo "gpu_check: carried libraries: $(ls .gpu/lib | tr '\n' ' ')"
  # Registers, shared memory and spills of every kernel (the build already fails on a spill).
  for f in kernels/cuda/*.cu; do
    /usr/local/cuda/bin/nvcc -I. -O3 -std=c++17 --generate-code=arch=compute_90,code=sm_90 -Xptxas=-v \
      -c "$f" -o /dev/null 2>&1 | grep -E "Compiling entry|Used|spill" |
      sed -E "s/.*Compiling entry function '([^']*)'.*/\1/" | c++filt >> .gpu/resources.txt
  done
  echo "gpu_check: .gpu/ ready ($(du -sh .gpu | cut -f1)); run on the device: bash scripts/gpu_check.sh (carry .gpu)"
  exit 0
fi

OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
[[ -x .gpu/chorus_gpu_tests ]] || { echo "gpu_check: .gpu/ is missing: run scripts/gpu_check.sh --prepare here and carry .gpu" >&2; exit 1; }
# Runtime libraries: CUDA's own, and NCCL from the image's Python wheel when it is not in CUDA's.
libs=$PWD/.gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
[[ -n "$nccl" ]] && libs="$libs:$nccl"
for pkg in cublas cuda_runtime; do
  d=$(python3 -c "import nvidia.$pkg, os; print(os.path.join(list(nvidia.$pkg.__path__)[0], 'lib'))" 2>/dev/null || true)
  [[ -n "$d" ]] && libs="$libs:$d"
done
export LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}"
export CHORUS_GOLDENS_DIR="$PWD/tests/goldens"  # the tiny models the runner tests load

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== gpu tests"
timeout 180 .gpu/chorus_gpu_tests --gtest_output="json:$OUT/gpu_tests.json" 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
tests_rc=${PIPESTATUS[0]}
echo "== step benchmark (Qwen3.5-9B shapes, random bf16 weights made on the device)"
timeout 300 .gpu/chorus_cuda_step_bench --json "$OUT/step_bench.json" 2>&1 | tee "$OUT/step_bench.log"
bench_rc=${PIPESTATUS[0]}
cp .gpu/resources.txt "$OUT/" 2>/dev/null || true

echo
echo "== summary"
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/gpu_tests.log" | head -20
grep -E "^ +(batch|[0-9]+) \||^4096-token prefill|^  (alone|while 8|decode step)|^GEMV|^ +(matrix|ffn_|gdn_qkv|output)|^Qwen3.5-9B shapes through|^8 writers reading|^gdn_runs over" "$OUT/step_bench.log"
echo "tests rc $tests_rc, bench rc $bench_rc; goal: >= 1.2x the paper's 106 / 552 / 1085 tok/s, step <= 10.5 ms with graphs at 8"
exit $(( tests_rc != 0 || bench_rc != 0 ))
