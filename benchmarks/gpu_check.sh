#!/usr/bin/env bash
# The GPU checks of issue 16, for a machine with an NVIDIA GPU, CuPy and numba-cuda (the lent
# device machines have cupy-cuda13x, numba-cuda, PyTorch with CUDA, and no network). Run from
# the repository root, with the data packed by benchmarks/gpu_data.py in .gpu-data/:
#
#   here:   python benchmarks/gpu_data.py .gpu-data && echo /.gpu-data/ >> .git/info/exclude
#   there:  bash benchmarks/gpu_check.sh tests      # 1. the GPU tests (H200: 95 s, -n 6)
#           bash benchmarks/gpu_check.sh train      # 2. every seed preset (H200: 35 s)
#           bash benchmarks/gpu_check.sh bench [gpu_bench.py's options]   # 3. the table (~3 min)
#
# (with the device tool: run(command="bash benchmarks/gpu_check.sh tests", carry=[".gpu-data"]),
# one call per step, each under the tool's 10 minutes). Results go to $OUT (the device tool's
# folder that comes back) or gpu-results/. tapegrad needs numpy, numba, safetensors, tqdm and
# psutil there (all present on the device machines); pooch is only imported to download.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TAPEGRAD_OFFLINE=1
export TAPEGRAD_DATA="${TAPEGRAD_DATA:-$PWD/.gpu-data}"
PY="${PYTHON:-python3}"
RESULTS="${OUT:-gpu-results}"
mkdir -p "$RESULTS"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$RESULTS/gpu.txt"
"$PY" - <<'EOF' 2>&1 | tee -a "$RESULTS/gpu.txt" || true
import importlib.metadata as m
import sys

def version(p):
    try:
        return m.version(p)
    except m.PackageNotFoundError:
        return "missing"

names = ("numpy", "cupy-cuda13x", "cupy-cuda12x", "numba", "numba-cuda", "torch")
print("python", sys.version.split()[0], *(f"{p} {version(p)}" for p in names))
from numba import cuda

print("numba-cuda finds a GPU:", cuda.is_available())
EOF

# Each step is bounded (GPU_TESTS_TIMEOUT, GPU_TRAIN_TIMEOUT per preset, GPU_BENCH_TIMEOUT, in
# seconds), so one hang cannot eat a device session. The presets train side by side (2 CPU threads
# each; they are launch-bound), their JSON files go to runs/ (archived to runs.tar.gz under the
# device tool, which brings back at most 8 files). Arguments after "bench" go to gpu_bench.py.
step="${1:-all}"
shift || true
case "$step" in
tests | all)
    # the cudasim suite on the GPU, run directly so each failure is in the log (tests/gpu's first
    # test runs the same suite in a subprocess and is left out here), then tests/gpu's own tests
    # (SIGINT at the limit: pytest still prints the failures it has seen; GPU_TESTS_ARGS adds
    # options to the cudasim run, e.g. "-n 4" with pytest-xdist)
    set +e
    # shellcheck disable=SC2086
    TAPEGRAD_TEST_GPU=1 timeout -s INT -k 20 "${GPU_TESTS_TIMEOUT:-900}" "$PY" -m pytest -q -rfE \
        --tb=short -p no:cacheprovider ${GPU_TESTS_ARGS:-} tests/cudasim 2>&1 |
        tee "$RESULTS/tests.log"
    timeout -s INT -k 20 "${GPU_TESTS_TIMEOUT:-900}" "$PY" -m pytest -q -rfEs --tb=short \
        -p no:cacheprovider tests/gpu --deselect tests/gpu/test_gpu.py::test_the_cuda_suite_on_the_gpu \
        2>&1 | tee -a "$RESULTS/tests.log"
    set -e
    ;;&
train | all)
    mkdir -p "$RESULTS/runs"
    for preset in seed-cnn seed-rnn seed-rnn-lr0.2 text-cnn text-cnn-learned mlp; do
        timeout "${GPU_TRAIN_TIMEOUT:-1200}" "$PY" -m tapegrad train "$preset" --device cuda \
            --threads 2 --json "$RESULTS/runs/$preset.json" 2>&1 | sed -u "s/^/[$preset] /" &
    done > "$RESULTS/train.log"
    wait
    cat "$RESULTS/train.log"
    "$PY" benchmarks/gpu_accuracy.py "$RESULTS"/runs/*.json | tee "$RESULTS/accuracy.md" || true
    if [ -n "${OUT:-}" ]; then
        tar czf "$RESULTS/runs.tar.gz" -C "$RESULTS" runs && rm -r "$RESULTS/runs"
    fi
    ;;&
bench | all)
    timeout "${GPU_BENCH_TIMEOUT:-1800}" "$PY" benchmarks/gpu_bench.py \
        --markdown "$RESULTS/gpu_table.md" "$@" 2>&1 | tee "$RESULTS/bench.log"
    ;;
esac
